"""Seams where the helpers and the variables note (issue 3) plug into the engine.

The engine calls these and nothing else for that purpose; each body only
delegates to the pure modules (:mod:`helpers`, :mod:`hints`, :mod:`note`):

1. :func:`scope_preamble` — the Python fed into every new scope (a fresh
   checkout, and after ``restart`` or a reset) before its first snippet:
   :data:`~daemon.code_mode.helpers.HELPERS_SOURCE` (``import asyncio``,
   ``json``, ``re`` and the helpers ``items``, ``names``, ``dig``,
   ``count_by``, ``to_json``; spec A8), then the operator's
   ``limits.preamble``.
2. :func:`check_snippet` — a pre-run check on the snippet text; a returned
   message rejects the snippet before it reaches the sandbox (the REPL is
   untouched): :func:`~daemon.code_mode.helpers.check_reserved` (A11).
   The engine awaits :func:`vet_snippet`, which first refuses a snippet
   over ``limits.max_snippet_bytes`` without looking further, then runs
   :func:`check_snippet` (in a worker thread when the snippet is long).
3. :func:`error_hints` — extra ``Hint:`` lines for an error result, from its
   traceback text (A11: known Monty gaps,
   :func:`~daemon.code_mode.sandbox.hints.hints_for`). Return the hint text only;
   the formatter prefixes ``Hint: ``.
4. :func:`after_snippet` — awaited after every snippet (rejected ones
   aside), with the scope, the snippet's text and its outcome.
   ``outcome.fresh`` says the snippet ran in a newly checked-out, empty REPL
   (first use, or after ``restart``, an eviction or a reset);
   ``outcome.reset`` says the checkout was discarded after it (then
   ``scope.session`` is None and nothing can be probed). While the scope
   is live, ``await scope.probe(code)`` runs a tool-free feed in the same
   REPL and returns its value. ``scope.note`` holds the scope's
   :class:`~daemon.code_mode.repl.note.ScopeVariables` (the engine drops it with
   the checkout). :func:`context_note` then turns the scope into the note
   that ``CodeModeToolExecutor.context_note`` returns. A failing or slow hook
   (bounded by ``limits.request_timeout``) is logged and costs only the note;
   a probe that ended its checkout (cancelled mid-feed, a dead worker)
   discards it as a reset, so the next snippet starts in a fresh REPL instead
   of failing on a finished one.

:func:`check_snippet` and the parse in :func:`after_snippet` are one parse
(cached), CPU work proportional to the snippet (up to
``limits.max_snippet_bytes``); a snippet over :data:`INLINE_PARSE_CHARS`
is parsed in a worker thread, a shorter one inline (the hop would cost more).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pydantic_monty import MontyRuntimeError, MontySyntaxError

from daemon.code_mode.bindings import module_bindings
from daemon.code_mode.helpers import check_reserved, prelude
from daemon.code_mode.repl.note import ScopeVariables, thread_note
from daemon.code_mode.sandbox import hints_for

T = TypeVar("T")

if TYPE_CHECKING:
    from daemon.code_mode.repl.scope import ScopeState
    from daemon.code_mode.sandbox import SnippetOutcome
    from daemon.limits import CodeModeLimits

__all__ = [
    "INLINE_PARSE_CHARS",
    "after_snippet",
    "check_snippet",
    "context_note",
    "error_hints",
    "scope_preamble",
    "too_large",
    "vet_snippet",
]


def scope_preamble(limits: CodeModeLimits) -> str:
    """The helpers (with ``asyncio``, ``json``, ``re``), then the operator's ``limits.preamble``."""
    return "\n".join(prelude(limits.preamble))


def check_snippet(code: str, extra: tuple[str, ...] = ()) -> str | None:
    """Rejects a snippet that rebinds a helper name at module level (A11), else None.

    ``extra``: helper names of this catalog besides the built-in ones (issue 19).
    """
    return check_reserved(code, extra)


def too_large(code: str, max_bytes: int) -> str | None:
    """Why ``code`` is refused for its size (over ``max_bytes`` in UTF-8), or None.

    Constant time for any text far over the limit: a character is at least one byte.
    """
    size = len(code) if len(code) > max_bytes else len(code.encode("utf-8", "surrogatepass"))
    if size <= max_bytes:
        return None
    return (
        f"run_code rejected this snippet before running it: it is {size:,} bytes, over the "
        f"{max_bytes:,}-byte limit (code_mode.max_snippet_bytes). Send less code: let the "
        "snippet fetch data with tool calls instead of pasting it, or split the work over "
        "several run_code calls (variables persist between them)."
    )


async def vet_snippet(code: str, limits: CodeModeLimits, extra: tuple[str, ...] = ()) -> str | None:
    """The pre-run checks: the size limit, then :func:`check_snippet` (see :func:`_parsed`)."""
    refused = too_large(code, limits.max_snippet_bytes)
    if refused is not None:
        return refused
    # the seam keeps its one-argument form when there is nothing extra to reserve
    check = functools.partial(check_snippet, extra=extra) if extra else check_snippet
    return await _parsed(check, code)


# A thread hop costs 50-100 µs, more than parsing a short snippet, and the parse
# (``compile``) holds the GIL either way; so only a longer snippet goes to a thread.
INLINE_PARSE_CHARS = 4096


async def _parsed(check: Callable[[str], T], code: str) -> T:
    """``check(code)``, a parse of the snippet: inline when it is short, else in a thread."""
    if len(code) <= INLINE_PARSE_CHARS:
        return check(code)
    return await asyncio.to_thread(check, code)


def error_hints(error_text: str) -> list[str]:
    """One hint per known Monty gap the traceback shows (without the ``Hint: `` prefix)."""
    return hints_for(error_text)


async def after_snippet(scope: ScopeState, code: str, outcome: SnippetOutcome) -> None:
    """Record the names ``code`` bound, then probe the live scope for the variables note.

    A fresh REPL starts a new record; after a reset there is nothing to probe
    (the engine already dropped the record with the checkout).
    """
    if outcome.reset or scope.session is None:
        scope.note = None
        return
    if outcome.fresh or scope.note is None:
        scope.note = ScopeVariables()
    note = scope.note
    # parsed once per snippet: the pre-run check's parse is cached (bindings.py)
    note.record_bindings(await _parsed(module_bindings, code))
    probe = note.probe()
    if probe is None:
        return
    try:
        value = await scope.probe(probe)
    except (MontyRuntimeError, MontySyntaxError):
        if scope.worker_pid is None:
            await scope.discard("reset")
        raise  # failed inside the sandbox (a rebound builtin): the last note stands
    except BaseException:
        # cancelled mid-feed, a dead worker or a protocol error: the checkout
        # cannot be fed again, so the next snippet must not inherit it
        await scope.discard("reset")
        raise
    note.update(value)


def context_note(scope: ScopeState | None, *, evicted: bool) -> str | None:
    """The variables still in scope, or that the REPL is empty after an eviction or reset.

    ``scope`` is None when the thread has no scope now; ``evicted`` says its
    scope was evicted from the LRU (so its next run starts with an empty REPL).
    ``scope.reset_reason`` says why a live scope's REPL was last emptied, and
    ``scope.notices`` (what became of its stored REPL) come first.
    """
    if scope is None:
        return thread_note(None, "evicted" if evicted else None)
    return thread_note(scope.note, scope.reset_reason, scope.notices)
