"""Valid Python that Monty 1.4 runs otherwise than CPython, rewritten before it runs.

Monty evaluates a generator expression to a list (``type(x for x in y)`` is
``list`` there), so ``next(x for x in items if ...)``, the usual way to take
the first match, fails with ``TypeError: 'list' object is not an iterator``.
Any model writes it; a small one then loses a round or the run (on the dev
questions of 2026-12-02, two of the eight failed runs ended on it). Given
``iter(...)`` around the generator expression it runs as CPython runs it,
with the same result and the same default, so :func:`as_cpython` puts it
there before the snippet runs, for every model: the run never sees the gap.

The edit is textual and minimal (the two words inserted, nothing else
reformatted), so a traceback still quotes the snippet's own lines. Pure, no
I/O; code that does not parse is left as it is (Monty reports its error).
"""

from __future__ import annotations

import ast

__all__ = ["as_cpython"]


def as_cpython(code: str) -> str:
    """``code`` with ``iter(...)`` around each generator expression passed to ``next``."""
    if "next" not in code:  # the common case: no parse
        return code
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    lines = code.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (line index, character offset, text)
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "next"
            and node.args
            and isinstance(node.args[0], ast.GeneratorExp)
        ):
            continue
        gen = node.args[0]
        if gen.end_lineno is None or gen.end_col_offset is None:  # parsed code has them
            continue
        # a lone argument shares the call's parentheses: next(x for x in y) spans "(x ... y)"
        shared = (gen.end_lineno, gen.end_col_offset) == (node.end_lineno, node.end_col_offset)
        start, end = ("(iter(", "))") if shared else ("iter(", ")")
        edits.append((gen.lineno - 1, _column(lines[gen.lineno - 1], gen.col_offset), start))
        edits.append(
            (gen.end_lineno - 1, _column(lines[gen.end_lineno - 1], gen.end_col_offset), end)
        )
    if not edits:
        return code
    # from the end backwards, so that each edit leaves the offsets before it as they were
    for index, column, text in sorted(edits, reverse=True):
        line = lines[index]
        lines[index] = f"{line[:column]}{text}{line[column:]}"
    return "".join(lines)


def _column(line: str, byte_offset: int) -> int:
    """The character offset of ``ast``'s UTF-8 byte offset in ``line``."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))
