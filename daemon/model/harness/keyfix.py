"""The harness's own fixes of a failed snippet's key reads, run again with no model
round (:func:`key_fix`; pure). The look at the variables (a
:class:`~daemon.model.harness.look.Look`) says where a key is; where that is
certain, the harness reads it there instead of asking the model to.
"""

from __future__ import annotations

import ast

from daemon.model.harness.keys import key_paths, missing_key, plain_path
from daemon.model.harness.look import Look
from daemon.model.harness.rules import on

__all__ = ["key_fix"]


def key_fix(code: str, error: str, look: Look | None) -> str | None:
    """The failed snippet with ``v['k']`` read where the look found ``k``, or None.

    After ``KeyError: 'components'`` on ``status['components']``, the look at the
    variables showed ``status['json']: has 'components'``: the model's meaning is
    plain, and one more round for it to copy the path cost 10-20 s and often a
    new mistake (the next snippet dropped its filter). So the harness reads the key
    where it is and runs the snippet again, no model round. Only where that is
    certain: the key lives under exactly one path below the value read (not
    through a list's first item, which would say nothing of the other items), and
    only a plain variable's subscripts (``v['a']['k']``) move.

    Rule ``key-fix``.
    """
    key = missing_key(error)
    if key is None or look is None or not on("key-fix"):
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    # the paths whose dict holds the key (each path to it, less its last step)
    holders = {str(path.up()) for path in key_paths(key, look)}
    fixer = _KeyFix(key, holders)
    fixer.visit(tree)
    if not fixer.changed:
        return None
    return ast.unparse(ast.fix_missing_locations(tree))


class _KeyFix(ast.NodeTransformer):
    """``base[key]`` → ``base[...][key]`` where the look put ``key`` (see :func:`key_fix`)."""

    def __init__(self, key: str, holders: set[str]) -> None:
        self.key = key
        self.holders = holders
        self.changed = False

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        s = node.slice
        if not (isinstance(s, ast.Constant) and s.value == self.key and plain_path(node.value)):
            return node
        base = ast.unparse(node.value)
        below = {p for p in self.holders if _below(base, p)}
        if len(below) == 1:
            moved = ast.parse(below.pop(), mode="eval").body
            self.changed = True
            return ast.copy_location(ast.Subscript(value=moved, slice=s, ctx=node.ctx), node)
        return node


def _below(base: str, path: str) -> bool:
    """Whether ``path`` lies below ``base``, not through a list's first item."""
    return path.startswith(base + "[") and "[0]" not in path[len(base) :]
