"""Honest failure: a run whose tool calls all failed or were refused replies with
what could not be done and why, never with data (pure, from the run's records).

A 1.5B model whose every call was refused (``asyncai ask`` with no terminal,
third-party tools without annotations) answered "John Doe spent 1234 euros"
after zero successful calls. The model's words cannot be checked for
invented values, so when no call returned data the loop replaces its reply
with one composed here: each tool that failed, and its error or refusal.

What counts as a call returning data:

- with the tools offered directly, a tool result that is not an error;
- with code mode, a ``run_code`` result whose snippet made a nested call that
  ended well. A snippet that called no tool (arithmetic, or one that failed
  before its first call) neither brings data nor fails to: it is left out.

A run with no tool call at all (arithmetic answered in words, or computed in
code) is not affected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sessions.model import Record

__all__ = ["CallFailure", "no_data_reply", "unanswered_calls"]

_REASON_CHARS = 300  # of an error's text, in the reply
_LISTED = 6  # failures named in the reply (the rest are counted)


@dataclass(frozen=True)
class CallFailure:
    """One tool that gave no data: its name, and why (the error or the refusal)."""

    tool: str
    reason: str
    refused: bool = False


def unanswered_calls(records: Iterable[Record]) -> list[CallFailure] | None:
    """The failures of a run whose tool calls all failed or were refused, in order
    (one per tool and reason), or None when some call returned data or no call was
    made."""
    names: dict[str, str] = {}  # tool_use id → the tool's name as the model called it
    failures: list[CallFailure] = []
    attempted = False
    for record in records:
        content = record.message.get("content") if isinstance(record.message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            elif block.get("type") == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "a tool")
                found = _result_failures(name, block, record.tool_use_result)
                if found is None:
                    return None  # this call returned data
                attempted = attempted or bool(found)
                for failure in found:
                    if failure not in failures:
                        failures.append(failure)
    return failures if attempted else None


def _result_failures(name: str, block: dict[str, Any], audit: Any) -> list[CallFailure] | None:
    """Why one tool result brought no data, or None when it did; ``[]`` for a snippet
    that called no tool (no data was asked for)."""
    text = block.get("content")
    text = text if isinstance(text, str) else ""
    is_error = bool(block.get("is_error"))
    nested = audit.get("nested_calls") if isinstance(audit, dict) else None
    if not isinstance(nested, list):  # a direct tool call (or run_code without an audit)
        if not is_error:
            return None
        reason = _reason(text)
        return [CallFailure(name, reason, refused=reason.startswith("PermissionError"))]
    calls = [c for c in nested if isinstance(c, dict)]
    if any(not c.get("is_error") and c.get("outcome", "ok") == "ok" for c in calls):
        return None
    denied = audit.get("denied_calls") if isinstance(audit, dict) else None
    refusals = [c for c in denied if isinstance(c, dict)] if isinstance(denied, list) else []
    found = [CallFailure(str(c.get("tool")), _refusal(c, text), refused=True) for c in refusals]
    why = _reason(text) if is_error else "it returned an error"
    return found + [CallFailure(str(c.get("tool")), why) for c in calls]


def _refusal(entry: dict[str, Any], text: str) -> str:
    """Why a nested call was refused: the PermissionError the snippet got, or the decision."""
    line = _error_line(text, "PermissionError")
    if line:
        return line
    kind = entry.get("decision") or "denied"
    by = entry.get("decided_by")
    return f"{kind} by {by}" if by else str(kind)


def _reason(text: str) -> str:
    """An error result's reason: its exception line when it has one, else its text."""
    line = _error_line(text)
    shown = line or " ".join(text.split())
    if len(shown) > _REASON_CHARS:
        shown = shown[:_REASON_CHARS] + " …"
    return shown or "no reason given"


def _error_line(text: str, kind: str = "") -> str | None:
    """The last line of ``text`` that names an exception (``KeyError: 'x'``), of ``kind``
    when given; hint lines after a traceback are not exceptions."""
    found = None
    for line in text.splitlines():
        head, sep, _ = line.strip().partition(":")
        named = sep and head.endswith(("Error", "Exception")) and head.isidentifier()
        if named and (not kind or head == kind):
            found = line.strip()
    if found is not None and len(found) > _REASON_CHARS:
        found = found[:_REASON_CHARS] + " …"
    return found


def no_data_reply(failures: list[CallFailure]) -> str:
    """The reply of a run whose every call failed or was refused: what could not be done,
    each tool and why, and no data."""
    lines = [
        "I could not find this out: no tool call returned any data, so I cannot answer "
        "from data and will not guess."
    ]
    for failure in failures[:_LISTED]:
        how = "was refused" if failure.refused else "failed"
        lines.append(f"- {failure.tool} {how}: {failure.reason}")
    if len(failures) > _LISTED:
        lines.append(f"- and {len(failures) - _LISTED} more")
    return "\n".join(lines)
