"""AST repairs of a small model's snippet: what it predictably gets wrong, fixed
before the snippet runs (:func:`repair_code`; pure, no I/O).
"""

from __future__ import annotations

import ast

from daemon.code_mode.catalog import RESERVED_NAMES
from daemon.model.harness.peek import top_level_targets
from daemon.model.harness.rules import on

__all__ = ["repair_code"]


class _RenameHelpers(ast.NodeTransformer):
    """``items = items(r)`` → ``items_ = items(r)``: a variable named like a helper is
    renamed everywhere except where it is called (the call means the helper)."""

    def __init__(self, names: set[str]):
        self.names = names

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.names:
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            return node
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Name(id=node.id + "_", ctx=node.ctx), node)
        return node


def repair_code(code: str) -> tuple[str, list[str]]:
    """Fix what small models predictably get wrong; returns ``(code, repairs)``.

    Code that does not parse, or needs no repair, comes back unchanged (so
    the sandbox reports the real error). Each repair is a rule of
    :data:`~daemon.model.harness.rules.RULES`, named beside it, and acts only when on.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code, []
    repairs: list[str] = []
    rebound = {n for n in top_level_targets(tree) if n in RESERVED_NAMES}
    if rebound and on("rename-helpers"):
        tree = _RenameHelpers(rebound).visit(tree)
        repairs.append("renamed variables that shadowed helpers: " + ", ".join(sorted(rebound)))
    last = tree.body[-1] if tree.body else None
    target = None
    if isinstance(last, ast.Assign) and len(last.targets) == 1:
        target = last.targets[0]
    elif isinstance(last, ast.AnnAssign | ast.AugAssign):
        target = last.target
    if isinstance(target, ast.Name) and on("last-assignment"):
        tree.body.append(ast.Expr(value=ast.Name(id=target.id, ctx=ast.Load())))
        repairs.append(f"the assigned name {target.id} made the result")
    if not repairs:
        return code, []
    return ast.unparse(ast.fix_missing_locations(tree)), repairs
