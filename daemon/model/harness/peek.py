"""The harness's look at a snippet's variables: which names it assigned, and the
Monty snippet that prints their access paths and values (pure text, no I/O).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

__all__ = ["assigned_names", "peek_code", "top_level_targets"]


def assigned_names(code: str, limit: int = 4) -> list[str]:
    """The first top-level names a snippet assigns (the data it fetched, usually)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return top_level_targets(tree)[:limit]


def top_level_targets(tree: ast.Module) -> list[str]:
    """Every public name the module's top-level statements assign, in order."""
    found: list[str] = []
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        for target in targets:
            for node in ast.walk(target):
                if not isinstance(node, ast.Name) or node.id.startswith("_"):
                    continue
                if node.id not in found:
                    found.append(node.id)
    return found


# Monty Python (no globals(), no yield). The value is shown as access paths with their
# values for the first item of each list: `pods['items'][0]['status']['phase'] ==
# 'Running'`. A small model copies a path it sees exactly; a sketch shaped like a
# literal it pasted into its code as an assignment (a SyntaxError at "..."). Text of
# several lines (a CSV body, logs) is shown as its first lines, said to be a str: the
# model indexed such a body as if it were parsed data.
_PEEK_PATHS = """\
def _peek_paths(x, path, out, depth=0):
    if len(out) >= 30 or depth > 8:
        return
    if isinstance(x, dict):
        if len(x) == 0:
            out.append(path + ' == {}')
        for k in list(x)[:20]:
            _peek_paths(x[k], path + '[' + repr(k) + ']', out, depth + 1)
    elif isinstance(x, (list, tuple)):
        out.append('len(' + path + ') == ' + str(len(x)))
        if len(x) > 0:
            _peek_paths(x[0], path + '[0]', out, depth + 1)
    elif isinstance(x, str) and '\\n' in x.strip():
        lines = x.splitlines()
        out.append(path + ' is a str of ' + str(len(lines)) + ' lines (text, not parsed)')
        out.append(path + '.splitlines()[:3] == ' + repr([l[:80] for l in lines[:3]]))
    elif isinstance(x, str) and len(x) > 80:
        out.append(path + '[:80] == ' + repr(x[:80]))
    else:
        out.append(path + ' == ' + repr(x))
"""
_PEEK_ONE = """\
try:
    _peek_out = []
    _peek_paths({name}, '{name}', _peek_out)
    print('\\n'.join(_peek_out))
except Exception:
    pass
"""


def peek_code(names: Iterable[str]) -> str:
    """A snippet that prints each named variable's access paths and values (the first
    item of each list), skipping names the failed snippet never set."""
    return _PEEK_PATHS + "".join(_PEEK_ONE.format(name=n) for n in names)
