"""The harness's look at a snippet's variables: which names it assigned or read, and
the Monty snippet whose value is the look (:mod:`~daemon.model.harness.look`'s
records: access paths and values). Pure, no I/O.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable

__all__ = ["assigned_names", "peek_code", "read_names", "top_level_targets"]


def assigned_names(code: str, limit: int = 4) -> list[str]:
    """The first top-level names a snippet assigns (the data it fetched, usually)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return top_level_targets(tree)[:limit]


# Modules a snippet may use without importing them (preloaded, or an import the model
# forgot): not data to look at.
_MODULES = frozenset({"asyncio", "json", "re", "math", "datetime", "collections", "itertools"})


def read_names(code: str, skip: Iterable[str] = (), limit: int = 2) -> list[str]:
    """Names a snippet reads but never binds (data an earlier snippet fetched), in order,
    without builtins, private names and ``skip`` (the functions and helpers).

    The look after a failure showed only what the failed snippet assigned: one that
    failed on its first line (``{n: 0 for n in names(ws['workspaces'][0]['nodes'])}``,
    ``ws`` from the snippet before) had nothing to show, and the model read the same
    missing key three times.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    bound: set[str] = set(skip) | _MODULES
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        name = node.id
        if name in bound or name.startswith("_") or hasattr(builtins, name) or name in found:
            continue
        found.append(name)
    found.sort(key=lambda n: _first_use(tree, n))
    return found[:limit]


def _first_use(tree: ast.Module, name: str) -> tuple[int, int]:
    """Where ``name`` is first read in ``tree`` (line, column)."""
    return min(
        (n.lineno, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
    )


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


# Monty Python (no globals(), no yield). The look is data: one record a line of the look
# (daemon/model/harness/look.py renders them), `[kind, variable, steps, ...]`, each step
# `[repr(key), key or None]`; the lines show each value as its access path for the first
# item of each list: `pods['items'][0]['status']['phase'] == 'Running'`. A small model
# copies a path it sees exactly; a sketch shaped like a literal it pasted into its code as
# an assignment (a SyntaxError at "..."). Text of several lines (a CSV body, logs) is
# shown as its first lines, said to be a str: the model indexed such a body as if it were
# parsed data. The top call (depth 0) files the variable's records once its walk ended,
# in a default list (state that outlives the call without a REPL name of its own), and a
# call without an out list gives them all back, so each block's value is the look so far:
# the snippet binds no name the look did not bind when it printed its lines (the REPL's
# variables note lists them).
_PEEK_PATHS = """\
def _peek_paths(x, path, out, depth=0, steps=[], looked=[]):
    if out is None:
        return looked
    if len(out) >= 30 or depth > 8:
        return
    if isinstance(x, dict):
        if len(x) == 0:
            out.append(['value', path, steps, '{}'])
        for k in list(x)[:20]:
            step = [repr(k), k if isinstance(k, str) else None]
            _peek_paths(x[k], path, out, depth + 1, steps + [step])
    elif isinstance(x, (list, tuple)):
        out.append(['len', path, steps, len(x)])
        if len(x) > 0:
            _peek_paths(x[0], path, out, depth + 1, steps + [['0', None]])
    elif isinstance(x, str) and '\\n' in x.strip():
        lines = x.splitlines()
        first = [l[:80] for l in lines[:3]]
        out.append(['text', path, steps, len(lines)])
        out.append(['lines', path, steps, repr(first)])
    elif isinstance(x, str) and len(x) > 80:
        out.append(['start', path, steps, repr(x[:80])])
    else:
        out.append(['value', path, steps, repr(x)])
    if depth == 0:
        looked.append(out)
"""
_PEEK_ONE = """\
try:
    _peek_out = []
    _peek_paths({name}, '{name}', _peek_out)
except Exception:
    pass
[_peek_paths(None, None, None), []]
"""
# After a KeyError: in each list of the variables whose items hold the key (through
# dicts, at the same relative path), how many items have it. The first item alone
# does not say: a Pending pod has no status.containerStatuses, the Running ones do.
# One record per such list, and one per dict outside a list that holds the key (read by
# keys.key_hint): `pods['items']: 10 of 12 items have ['status']['containerStatuses']
# (a list)`, `r['json']: has 'components'`.
_PEEK_MISSING = """\
def _peek_find(x, key, depth):
    if not isinstance(x, dict) or depth > 4:
        return None
    if key in x:
        return [key]
    for k in list(x)[:30]:
        sub = _peek_find(x[k], key, depth + 1)
        if sub is not None:
            return [k] + sub
    return None
def _peek_at(x, rel):
    for k in rel:
        if not isinstance(x, dict) or k not in x or x[k] is None:
            return None, False
        x = x[k]
    return x, True
def _peek_kind(v):
    if isinstance(v, bool):
        return 'a bool'
    if isinstance(v, (int, float)):
        return 'a number'
    if isinstance(v, str):
        return 'a str'
    if isinstance(v, (list, tuple)):
        return 'a list'
    if isinstance(v, dict):
        return 'a dict'
    return 'None'
def _peek_missing(x, path, key, out, depth=0, steps=[], counted=[]):
    if out is None:
        return counted
    if len(out) >= 4 or depth > 6:
        return
    if isinstance(x, dict) and key in x:
        out.append(['has', path, steps, repr(key), key])
    elif isinstance(x, dict):
        for k in list(x)[:30]:
            step = [repr(k), k if isinstance(k, str) else None]
            _peek_missing(x[k], path, key, out, depth + 1, steps + [step])
    elif isinstance(x, (list, tuple)) and len(x) > 0:
        rel = None
        for it in x:
            rel = _peek_find(it, key, 0)
            if rel is not None:
                break
        if rel is None:
            _peek_missing(x[0], path, key, out, depth + 1, steps + [['0', None]])
        else:
            have = 0
            kind = None
            for it in x:
                v, found = _peek_at(it, rel)
                if found:
                    have += 1
                    if kind is None:
                        kind = _peek_kind(v)
            shown = [[repr(k), k if isinstance(k, str) else None] for k in rel]
            out.append(['counted', path, steps, have, len(x), shown, kind])
    if depth == 0 and out:
        counted.append(out)
"""
_MISSING_ONE = """\
try:
    _peek_out = []
    _peek_missing({name}, '{name}', {key!r}, _peek_out)
except Exception:
    pass
[_peek_paths(None, None, None), _peek_missing(None, None, None, None)]
"""


def peek_code(names: Iterable[str], missing: str | None = None) -> str:
    """A snippet whose value is the look at each named variable (:class:`~daemon.model.
    harness.look.Look`'s records: its access paths and values, the first item of each
    list), skipping names the failed snippet never set; with ``missing`` (the key of a
    KeyError), also how many items of each list that holds it have it."""
    names = list(names)
    code = _PEEK_PATHS + "".join(_PEEK_ONE.format(name=n) for n in names)
    if missing is None:
        return code
    return code + _PEEK_MISSING + "".join(_MISSING_ONE.format(name=n, key=missing) for n in names)
