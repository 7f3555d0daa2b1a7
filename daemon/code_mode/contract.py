"""The return contract of ``run_code`` (spec 0004, Return contract and A11), without I/O.

| snippet ends with                          | ``run_code`` returns                           |
|--------------------------------------------|------------------------------------------------|
| a non-``None`` value, nothing printed      | the value (``str`` as-is, else compact JSON)   |
| an empty value, nothing printed            | explicit text: ``(empty result: ...)``         |
| ``None`` or an assignment, nothing printed | ``(no output; the last expression was None)``  |
| ``None`` or an assignment, prints          | ``{"output": "<prints>"}``                     |
| a non-``None`` value, prints               | ``{"output": "<prints>", "result": <value>}``  |
| an exception                               | error: the traceback, ``Hint:`` lines          |
| an un-awaited coroutine or ``gather``      | error: add ``await``                           |
| a call that was never awaited              | error: add ``await`` (the call never ran)      |
| more than ``max_result_chars``             | error: the size, a 2 000-char preview, advice  |
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.code_mode.convert import dumps_compact

__all__ = [
    "NO_OUTPUT",
    "PREVIEW_CHARS",
    "RESET_NOTE",
    "RunCodeText",
    "is_unawaited_awaitable",
    "render_error",
    "render_result",
]

NO_OUTPUT = "(no output; the last expression was None)"
RESET_NOTE = (
    "REPL state was reset: variables, functions and imports from earlier snippets are gone."
)
PREVIEW_CHARS = 2_000

# How Monty 1.4 renders awaitables that cross to the host: un-awaited tool
# calls, gathers and coroutines of sandbox-defined async functions.
_AWAITABLE_REPR = re.compile(
    r"<(coroutine external_future\(\d+\)|gather\(\d+\)|coroutine object \S+)>"
)

_EMPTY_NAMES: dict[type, str] = {
    list: "an empty list",
    tuple: "an empty tuple",
    dict: "an empty dict",
    set: "an empty set",
    frozenset: "an empty frozenset",
    str: "an empty string",
}


@dataclass(frozen=True)
class RunCodeText:
    """What ``run_code`` hands back: the text the model reads, and whether it failed."""

    text: str
    is_error: bool


def is_unawaited_awaitable(value: Any) -> bool:
    """Whether a snippet result is an awaitable the sandbox never awaited."""
    return isinstance(value, str) and _AWAITABLE_REPR.fullmatch(value) is not None


def _await_advice(names: Sequence[str]) -> str:
    calls = ", ".join(f"{n}()" for n in dict.fromkeys(names))
    one = len(set(names)) == 1
    return (
        f"{calls} {'was' if one else 'were'} called without `await`, so "
        f"{'it' if one else 'they'} never ran. Add `await`: "
        "`x = await f(...)`, or `await asyncio.gather(f(...), g(...))` for several calls."
    )


def _prints_tail(prints: str) -> str:
    if len(prints) <= PREVIEW_CHARS:
        return f"Output printed before the error:\n{prints}"
    return (
        f"Output printed before the error (last {PREVIEW_CHARS:,} of {len(prints):,} "
        f"characters):\n{prints[-PREVIEW_CHARS:]}"
    )


def render_error(
    error: str,
    *,
    prints: str = "",
    hints: Sequence[str] = (),
    unawaited: Sequence[str] = (),
    reset: bool = False,
    max_result_chars: int = 20_000,
) -> RunCodeText:
    """An error result: the traceback, then hints, notes and the prints that came before."""
    head = error.rstrip()
    if len(head) > max_result_chars // 2:
        # an exception message can carry a whole tool result; the tail says where
        quarter = max_result_chars // 4
        head = f"{head[:quarter]}\n… [{len(head):,} characters cut] …\n{head[-quarter:]}"
    parts = [head]
    parts += [f"Hint: {h}" for h in hints]
    if unawaited:
        parts.append(f"Note: {_await_advice(unawaited)}")
    if reset:
        parts.append(RESET_NOTE)
    if prints:
        parts.append(_prints_tail(prints))
    return RunCodeText("\n".join(parts), True)


def _guard(text: str, max_result_chars: int) -> RunCodeText:
    if len(text) <= max_result_chars:
        return RunCodeText(text, False)
    return RunCodeText(
        f"Error: the result is {len(text):,} characters, more than the {max_result_chars:,} "
        "allowed. The value is still in the REPL if you assigned it: assign it to a variable "
        "and return a filtered subset (a count, a few fields, the first items).\n"
        f"First {PREVIEW_CHARS:,} characters:\n{text[:PREVIEW_CHARS]}",
        True,
    )


def render_result(
    value: Any,
    prints: str = "",
    *,
    unawaited: Sequence[str] = (),
    max_result_chars: int = 20_000,
) -> RunCodeText:
    """The result of a snippet that completed, per the return contract."""
    if is_unawaited_awaitable(value):
        return render_error(
            f"Error: the last expression is an un-awaited awaitable ({value}), so nothing "
            "ran. Add `await`: `await f(...)`, or `await asyncio.gather(...)`.",
            prints=prints,
            max_result_chars=max_result_chars,
        )
    if unawaited:
        return render_error(
            f"Error: {_await_advice(unawaited)}", prints=prints, max_result_chars=max_result_chars
        )
    if prints:
        shown = {"output": prints} if value is None else {"output": prints, "result": value}
        return _guard(dumps_compact(shown), max_result_chars)
    if value is None:
        return RunCodeText(NO_OUTPUT, False)
    empty = _EMPTY_NAMES.get(type(value))
    if empty is not None and len(value) == 0:
        return RunCodeText(f"(empty result: the last expression was {empty})", False)
    if isinstance(value, str):
        return _guard(value, max_result_chars)
    return _guard(dumps_compact(value), max_result_chars)
