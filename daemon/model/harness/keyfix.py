"""The harness's own fixes of a failed snippet's key reads, run again with no model
round (:func:`key_fix`; pure). The look at the variables (a
:class:`~daemon.model.harness.look.Look`) says where a key is; where that is
certain, the harness reads it there instead of asking the model to.
"""

from __future__ import annotations

import ast

from daemon.model.harness.keys import (
    counted_lists,
    first_item_path,
    key_paths,
    list_paths,
    loop_sources,
    missing_key,
    plain_path,
)
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
    only a plain variable's subscripts (``v['a']['k']``) move. A ``KeyError:
    'items'`` (the model's name for "the list", from kubernetes) moves to the one
    list the value holds one level down, as the ``items()`` helper finds it. A key
    some items of a list lack (a Pending pod has no ``status.containerStatuses``)
    is read with ``dig(item, 'a.b', default=...)`` where the read is iterated,
    measured or compared (:class:`_DigFix`).

    Rule ``key-fix`` (its parts: ``keyfix-items`` for ``'items'``, ``dig-fix``).
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
    lists = list_paths(look)
    fixer = _KeyFix(key, holders, lists)
    fixer.visit(tree)
    if not fixer.changed:
        if not on("dig-fix"):
            return None
        digs = _DigFix(key, tree, look)
        digs.visit(tree)
        if not digs.changed:
            return None
    return ast.unparse(ast.fix_missing_locations(tree))


class _KeyFix(ast.NodeTransformer):
    """``base[key]`` → ``base[...][key]`` where the look put ``key`` (see :func:`key_fix`)."""

    def __init__(self, key: str, holders: set[str], lists: set[str]) -> None:
        self.key = key
        self.holders = holders
        self.lists = lists
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
        depth = base.count("[") + 1
        one_list = {p for p in self.lists if _below(base, p) and p.count("[") == depth}
        if not below and self.key == "items" and len(one_list) == 1 and on("keyfix-items"):
            self.changed = True
            return ast.copy_location(ast.parse(one_list.pop(), mode="eval").body, node)
        return node


def _below(base: str, path: str) -> bool:
    """Whether ``path`` lies below ``base``, not through a list's first item."""
    return path.startswith(base + "[") and "[0]" not in path[len(base) :]


# Where a missing value reads as "nothing": iterated (the default []), measured or
# summed (len, sum, any, all: []), compared (None: never equal).
_NOTHING_CALLS = frozenset({"len", "sum", "any", "all", "list", "sorted", "set"})


class _DigFix(ast.NodeTransformer):
    """``item['a']['k']`` → ``dig(item, 'a.k', default=[])`` for a loop variable over a
    list whose items only some hold ``['a']['k']`` (the look counted them), where
    the value is iterated, measured or compared: the hint said to write exactly
    that, and the model needed a round (and often two) to do it. A read that is
    indexed further (``[j]``) or used otherwise is left to the hint: no default
    is certain there."""

    def __init__(self, key: str, tree: ast.Module, look: Look) -> None:
        self.counted = [
            (str(path), rel, kind)
            for path, have, total, rel, kind in counted_lists(look)
            if 0 < have < total and rel and rel[-1] == key
        ]
        self.look = look
        self.parents = {
            id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        self.loops = loop_sources(tree)
        self.changed = False

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        chain = _chain(node)
        if chain is None or not self.counted:
            return self.generic_visit(node)
        var, rel = chain
        over = self.loops.get(var)
        first = first_item_path(over, self.look) if over is not None else None
        for path, counted_rel, kind in self.counted:
            if first != f"{path}[0]" or rel != counted_rel:
                continue
            default = self._default(node, kind)
            if default is None:
                break
            self.changed = True
            args: list[ast.expr] = [ast.Name(var, ast.Load())]
            if any("." in k for k in rel):
                args += [ast.Constant(k) for k in rel]
            else:
                args.append(ast.Constant(".".join(rel)))
            call = ast.Call(
                ast.Name("dig", ast.Load()),
                args,
                [ast.keyword("default", ast.parse(default, mode="eval").body)],
            )
            return ast.copy_location(call, node)
        return self.generic_visit(node)

    def _default(self, node: ast.Subscript, kind: str) -> str | None:
        """The default that reads as "nothing" where ``node`` is used, or None."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Compare):  # against a name or a number: None is neither
            sides = [o for o in (parent.left, *parent.comparators) if o is not node]
            if len(sides) == 1 and isinstance(sides[0], ast.Constant):
                value = sides[0].value
                named = isinstance(value, str | int | float) and not isinstance(value, bool)
                if named and value != "" and isinstance(parent.ops[0], ast.Eq | ast.NotEq):
                    return "None"
            return None
        if kind != "a list":
            return None
        if isinstance(parent, ast.comprehension | ast.For | ast.AsyncFor) and parent.iter is node:
            return "[]"
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in _NOTHING_CALLS
            and parent.args[:1] == [node]
        ):
            return "[]"
        return None


def _chain(node: ast.Subscript) -> tuple[str, list[str]] | None:
    """``v['a']['b']`` as ``('v', ['a', 'b'])``; None for any other subscript."""
    rel: list[str] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Subscript):
        if not (isinstance(cur.slice, ast.Constant) and isinstance(cur.slice.value, str)):
            return None
        rel.append(cur.slice.value)
        cur = cur.value
    return (cur.id, rel[::-1]) if isinstance(cur, ast.Name) else None
