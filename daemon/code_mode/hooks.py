"""Seams where the helpers and the variables note (issue 3) plug into the engine.

The engine calls these and nothing else for that purpose; each is a no-op or
a minimal default here, so replacing a body changes behaviour without touching
the engine:

1. :func:`scope_preamble` — the Python fed into every new scope (a fresh
   checkout, and after ``restart`` or a reset) before its first snippet.
   Default: ``import asyncio``, ``json`` and ``re`` (spec A8), then the
   operator's ``limits.preamble``. Helpers (``items``, ``names``, ``dig``,
   ``count_by``, ``to_json``) go here.
2. :func:`check_snippet` — a pre-run check on the snippet text; a returned
   message rejects the snippet before it reaches the sandbox (the REPL is
   untouched). Reserved-helper rebinding (A11) goes here.
3. :func:`error_hints` — extra ``Hint:`` lines for an error result, from its
   traceback text (A11: known Monty gaps). Return the hint text only; the
   formatter prefixes ``Hint: ``.
4. :func:`after_snippet` — awaited after every snippet (rejected ones
   aside), with the scope, the snippet's text and its outcome.
   ``outcome.fresh`` says the snippet ran in a newly checked-out, empty REPL
   (first use, or after ``restart``, an eviction or a reset);
   ``outcome.reset`` says the checkout was discarded after it (then
   ``scope.session`` is None and nothing can be probed). While the scope
   is live, ``await scope.probe(code)`` runs a tool-free feed in the same
   REPL and returns its value. ``scope.note`` is free for the hook to keep
   its state in. The variables probe (A11) goes here; :func:`context_note`
   then turns the scope into the note that
   ``CodeModeToolExecutor.context_note`` returns. A failing or slow hook
   (bounded by ``limits.request_timeout``) is logged and costs only the note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.code_mode.engine import SnippetOutcome
    from daemon.code_mode.limits import CodeModeLimits
    from daemon.code_mode.scope import ScopeState

__all__ = ["after_snippet", "check_snippet", "context_note", "error_hints", "scope_preamble"]

BUILTIN_PREAMBLE = "import asyncio\nimport json\nimport re\n"


def scope_preamble(limits: CodeModeLimits) -> str:
    """The Python fed into every new scope before its first snippet."""
    if limits.preamble.strip():
        return f"{BUILTIN_PREAMBLE}{limits.preamble}"
    return BUILTIN_PREAMBLE


def check_snippet(code: str) -> str | None:
    """An error message rejecting ``code`` before it runs, or None to run it."""
    return None


def error_hints(error_text: str) -> list[str]:
    """Hints for an error result, from its traceback text (without the ``Hint: `` prefix)."""
    return []


async def after_snippet(scope: ScopeState, code: str, outcome: SnippetOutcome) -> None:
    """Called after each snippet that reached the sandbox, reset or not."""


def context_note(scope: ScopeState | None, *, evicted: bool) -> str | None:
    """The note for a thread's next run.

    ``scope`` is None when the thread has no scope now; ``evicted`` says its
    scope was evicted from the LRU (so its next run starts with an empty REPL).
    ``scope.reset_reason`` says why a live scope's REPL is empty, if it is.
    """
    return None
