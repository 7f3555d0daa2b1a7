"""The harness's own fix of a failed snippet's loop over a dict, run again with no
model round (:func:`loop_fix`; pure). The look at the variables (a
:class:`~daemon.model.harness.look.Look`) says where the dict's one list is; where
that is certain, the harness loops over it instead of asking the model to.
"""

from __future__ import annotations

import ast

from daemon.model.harness.keys import PARSE_ERROR, list_paths, plain_path
from daemon.model.harness.look import Look
from daemon.model.harness.rules import acts

__all__ = ["loop_fix"]


def loop_fix(code: str, error: str, look: Look | None) -> str | None:
    """The failed snippet with a loop over a dict made a loop over the one list that dict
    holds, where the look found it; or None.

    ``for e in events`` over a Kubernetes list (or ``for p in r['json']`` over a
    page of an API, ``{'items': [...], 'next': ...}``) walks the dict's keys, each a
    str, and the first ``e['reason']`` fails: ``string indices must be integers``.
    Such a loop cannot have meant the keys when its items are read as dicts;
    where the look shows exactly one list one key below the dict (``len(events['items'])``),
    that list is what it meant. Only a plain variable's subscripts are moved, and
    only after an error of that kind (a str read as data). Rule ``dict-loop``.
    """
    if look is None or not PARSE_ERROR.search(error):
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    fixer = _LoopFix(list_paths(look))
    fixer.visit(tree)
    if not acts("dict-loop", fixer.changed):
        return None
    return ast.unparse(ast.fix_missing_locations(tree))


class _LoopFix(ast.NodeTransformer):
    """``for x in d`` → ``for x in d['k']`` where ``d['k']`` is the one list below ``d``
    (see :func:`loop_fix`); a ``d`` that is itself a list is left as it is."""

    def __init__(self, lists: set[str]) -> None:
        self.lists = lists
        self.changed = False

    def _moved(self, node: ast.expr) -> ast.expr:
        if not plain_path(node):
            return node
        base = ast.unparse(node)
        if base in self.lists:
            return node  # a list already
        below = [p for p in self.lists if p.startswith(base + "[") and _one_key(p[len(base) :])]
        if len(below) != 1:
            return node
        self.changed = True
        return ast.copy_location(ast.parse(below[0], mode="eval").body, node)

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.iter = self._moved(node.iter)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.iter = self._moved(node.iter)
        return node


def _one_key(rest: str) -> bool:
    """Whether ``rest`` (a path's end) is one str key's step: ``['items']``."""
    try:
        step = ast.parse("x" + rest, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(step, ast.Subscript)
        and isinstance(step.value, ast.Name)
        and isinstance(step.slice, ast.Constant)
        and isinstance(step.slice.value, str)
    )
