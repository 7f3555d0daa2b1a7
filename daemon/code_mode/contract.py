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

Any error result of a snippet that started nested calls ends with the calls it
started, in order, and how each ended (:func:`with_started_calls`), so the
model does not repeat a side effect::

    Calls this snippet started, in order:
    - delete_object(name='old', namespace='default') [mutating]: ok
    - get_logs(pod='web-1'): cancelled

The list is bounded and kept whole: when the result would pass
``max_result_chars``, the error text before it is cut, never the list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.code_mode.convert import ConversionError, dumps_compact, sandbox_text
from daemon.tools import CallOutcome

__all__ = [
    "NO_OUTPUT",
    "PREVIEW_CHARS",
    "RESET_NOTE",
    "STARTED_HEAD",
    "RunCodeText",
    "StartedCall",
    "is_unawaited_awaitable",
    "render_error",
    "render_result",
    "started_calls_report",
    "with_started_calls",
]

NO_OUTPUT = "(no output; the last expression was None)"
RESET_NOTE = (
    "REPL state was reset: variables, functions and imports from earlier snippets are gone."
)
PREVIEW_CHARS = 2_000
STARTED_HEAD = "Calls this snippet started, in order:"
_MAY_HAVE_ACTED = (
    "A mutating call that was cancelled or whose outcome is unknown may have taken "
    "effect: check its result before calling it again."
)
_UNCERTAIN = frozenset({"cancelled", "unknown", "started"})
_VALUE_CHARS = 40  # one argument's repr in the report
_CALL_CHARS = 200  # one call's line

# How Monty 1.4 renders awaitables that cross to the host: un-awaited tool
# calls, gathers and coroutines of sandbox-defined async functions.
_AWAITABLE_REPR = re.compile(
    r"<(coroutine external_future\(\d+\)|gather\(\d+\)|coroutine object \S+)>"
)

# the same, for a tool call made through its scope wrapper (daemon.code_mode.lazy)
_WRAPPED_CALL = "<coroutine object _asyncai_result>"

_EMPTY_NAMES: dict[type, str] = {
    list: "an empty list",
    tuple: "an empty tuple",
    dict: "an empty dict",
    set: "an empty set",
    frozenset: "an empty frozenset",
    str: "an empty string",
}


@dataclass
class StartedCall:
    """One nested call a snippet started, and where it stands (``started`` until it ends)."""

    key: str  # the AuditEntry key of its started and ended entries
    tool: str
    arguments: dict[str, Any]
    mutating: bool
    outcome: CallOutcome = "started"
    queued: bool = False  # waiting for a slot of its server's max_concurrent
    queue_ms: float | None = None  # how long it waited (None: its server has no limit)


@dataclass(frozen=True)
class RunCodeText:
    """What ``run_code`` hands back: the text the model reads, and whether it failed."""

    text: str
    is_error: bool


def is_unawaited_awaitable(value: Any) -> bool:
    """Whether a snippet result is an awaitable the sandbox never awaited."""
    return isinstance(value, str) and _AWAITABLE_REPR.fullmatch(value) is not None


#: the error of a call's coroutine read as its result: ``await f(x)['k']`` is one, as
#: Python binds ``[...]``, ``.name`` and a method call tighter than ``await``
_READ_COROUTINE = re.compile(r"'coroutine' object (?:is not subscriptable|has no attribute)")


def _await_advice(names: Sequence[str], error: str = "") -> str:
    calls = ", ".join(f"{n}()" for n in dict.fromkeys(names))
    was, it = ("was", "it") if len(set(names)) == 1 else ("were", "they")
    # the exception's lines only: a traceback's source lines are indented, and one that
    # quotes this message is no coroutine read as its result
    if any(_READ_COROUTINE.search(ln) for ln in error.splitlines() if ln[:1].strip()):
        return (
            f"{calls} {was} read before {it} {was} awaited, so {it} never ran: "
            "`await f(...)['key']` indexes the call, not its result. "
            "Await it first: `x = await f(...)`, then `x['key']`, or `(await f(...))['key']`."
        )
    return (
        f"{calls} {was} called without `await`, so {it} never ran. Add `await`: "
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
        parts.append(f"Note: {_await_advice(unawaited, error)}")
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
        if value == _WRAPPED_CALL and unawaited:
            # a tool called through its scope wrapper (lazy.py): name the call, not the wrapper
            value = f"<coroutine {unawaited[-1]}()>"
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
    try:
        if prints:
            shown = {"output": prints} if value is None else {"output": prints, "result": value}
            return _guard(dumps_compact(shown), max_result_chars)
        if value is None:
            return RunCodeText(NO_OUTPUT, False)
        empty = _EMPTY_NAMES.get(type(value))
        if empty is not None and len(value) == 0:
            return RunCodeText(f"(empty result: the last expression was {empty})", False)
        if isinstance(value, str):
            return _guard(sandbox_text(value), max_result_chars)
        return _guard(dumps_compact(value), max_result_chars)
    except ConversionError as exc:
        return render_error(
            f"Error: the snippet's value cannot be returned: {exc}. The value is still in "
            "the REPL if you assigned it.",
            prints=prints,
            max_result_chars=max_result_chars,
        )


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_line(call: StartedCall) -> str:
    """``- tool(name='x', n=3) [mutating]: ok``: Python-call shaped, values shortened."""
    args = ", ".join(f"{k}={_short(repr(v), _VALUE_CHARS)}" for k, v in call.arguments.items())
    head = _short(f"{call.tool}({args})", _CALL_CHARS).replace("\n", " ")
    # a call whose end was never observed is still "started": that is "unknown"
    outcome = "unknown" if call.outcome == "started" else call.outcome
    return f"- {head}{' [mutating]' if call.mutating else ''}: {outcome}"


def started_calls_report(started: Sequence[StartedCall], max_chars: int = 10_000) -> str:
    """The calls a snippet started, in order, with how each ended; at most ``max_chars``.

    Past the bound, read-only calls are folded into counts first; mutating
    calls are the ones the model must not repeat, so they go last.
    """
    if not started:
        return ""
    uncertain = any(c.mutating and c.outcome in _UNCERTAIN for c in started)
    tail = [_MAY_HAVE_ACTED] if uncertain else []
    lines = [STARTED_HEAD, *(_call_line(c) for c in started), *tail]
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    folded = [STARTED_HEAD]
    skipped = 0
    for call in started:
        if call.mutating:
            if skipped:
                folded.append(f"- ({skipped} read-only call{'s' if skipped > 1 else ''})")
                skipped = 0
            folded.append(_call_line(call))
        else:
            skipped += 1
    if skipped:
        folded.append(f"- ({skipped} read-only call{'s' if skipped > 1 else ''})")
    folded += tail
    text = "\n".join(folded)
    if len(text) <= max_chars:
        return text
    cut = f"\n… (the rest of the {len(started)} calls cut)"
    return text[: max(0, max_chars - len(cut))] + cut


def with_started_calls(
    rendered: RunCodeText, started: Sequence[StartedCall], max_result_chars: int = 20_000
) -> RunCodeText:
    """An error result with the report of the calls it started appended; else unchanged.

    The report is bounded to half of ``max_result_chars``; the error text
    before it is cut (its start and its end kept) so the whole stays within
    ``max_result_chars``.
    """
    if not rendered.is_error or not started:
        return rendered
    report = started_calls_report(started, max_result_chars // 2)
    text = rendered.text
    room = max_result_chars - len(report) - 1
    if len(text) > room:
        marker = f"\n… [{len(text):,} characters of the error cut] …\n"
        keep = max(0, room - len(marker))
        head = keep - keep // 2
        text = text[:head] + marker + (text[-(keep // 2) :] if keep // 2 else "")
    return RunCodeText(f"{text}\n{report}", True)
