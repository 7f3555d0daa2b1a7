"""What one ``run_code`` call hands back, from the snippet's outcome: its text and its audit.

The text follows the return contract (:mod:`daemon.code_mode.contract`),
with ``Hint:`` lines from :func:`daemon.code_mode.repl.hooks.error_hints` on
errors; the audit is the transcript's ``toolUseResult`` JSON.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import structlog

from daemon.code_mode.contract import RunCodeText, render_error, render_result
from daemon.code_mode.repl import hooks
from daemon.code_mode.sandbox import SnippetOutcome
from daemon.tools import AuditEntry

__all__ = ["audit_json", "render_outcome"]

log = structlog.get_logger("asyncai.code_mode")


def render_outcome(
    outcome: SnippetOutcome, *, max_result_chars: int, thread: str | None
) -> RunCodeText:
    """The text of a snippet that ended (not paused), per the return contract."""
    if outcome.ok:
        return render_result(
            outcome.value,
            outcome.prints,
            unawaited=outcome.unawaited,
            max_result_chars=max_result_chars,
        )
    error = outcome.error or ""
    try:
        hints = hooks.error_hints(error)
    except Exception:
        # a broken hint costs only the hints
        log.exception("code_mode.hints_failed", thread=thread)
        hints = []
    return render_error(
        error,
        prints=outcome.prints,
        hints=hints,
        unawaited=outcome.unawaited,
        reset=outcome.reset,
        max_result_chars=max_result_chars,
    )


def audit_json(entries: list[AuditEntry], denied: list[AuditEntry] | None = None) -> dict[str, Any]:
    """The ``audit`` of a run_code result: the transcript's ``toolUseResult`` JSON.

    ``nested_calls``: the calls made, as they ended. ``denied_calls`` (only
    when there are any): the calls refused by the approval policy or a
    person, which were never made.
    """
    audit: dict[str, Any] = {"nested_calls": [_entry_json(entry) for entry in entries]}
    if denied:
        audit["denied_calls"] = [_entry_json(entry) for entry in denied]
    return audit


_ENTRY_FIELDS = tuple(f.name for f in fields(AuditEntry))


def _entry_json(entry: AuditEntry) -> dict[str, Any]:
    """``entry.as_json()`` without its deep copy (a tenth of the time per nested call).

    The arguments dict is shared with the entry: both are plain JSON built
    for this call by :func:`~daemon.code_mode.convert.to_json_value`, and
    nothing changes either after the call. A dataclass instance's ``__dict__``
    holds its fields, in order: copying it is a seventh of reading each one.
    """
    held = entry.__dict__
    if len(held) == len(_ENTRY_FIELDS):
        return held.copy()
    return {name: getattr(entry, name) for name in _ENTRY_FIELDS}
