"""Builders of realistic rows for tests and benchmarks (no I/O, no randomness beyond ids).

``run_records`` makes the records one code-mode run stores, in the order the
model saw them: the user's prompt, the assistant's ``run_code`` tool_use,
the user ``tool_result`` carrying the nested-call audit as
``toolUseResult``, and the assistant's answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from .ids import iso_utc
from .model import Record, ToolCallRow

__all__ = ["assistant_record", "run_records", "tool_call_row", "user_record"]

_EPOCH = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)


def _stamp(at: datetime | None, offset_ms: int = 0) -> str:
    return iso_utc((at or datetime.now(UTC)) + timedelta(milliseconds=offset_ms))


def user_record(text: str, *, at: datetime | None = None) -> Record:
    """A user record with one text block."""
    return Record(
        uuid=str(uuid.uuid4()),
        type="user",
        timestamp=_stamp(at),
        message={"role": "user", "content": [{"type": "text", "text": text}]},
    )


def assistant_record(
    blocks: list[dict[str, Any]],
    *,
    at: datetime | None = None,
    model: str = "test-model",
    stop_reason: str = "end_turn",
    usage: dict[str, int] | None = None,
) -> Record:
    """An assistant record with the full Claude Code ``message`` shape."""
    return Record(
        uuid=str(uuid.uuid4()),
        type="assistant",
        timestamp=_stamp(at),
        message={
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 100, "output_tokens": 20},
        },
    )


def run_records(
    prompt: str = "how many pods are running?",
    code: str = "pods = await list_objects(kind='pods')\nlen(pods['items'])",
    result: str = "3",
    answer: str = "Three pods are running.",
    *,
    nested: Sequence[dict[str, Any]] = (),
    at: datetime | None = None,
    is_error: bool = False,
) -> list[Record]:
    """The four records of a run with one ``run_code`` call."""
    start = at or _EPOCH
    tool_use_id = f"toolu_{uuid.uuid4().hex[:24]}"
    nested_calls = list(nested) or [
        {
            "tool": "list_objects",
            "arguments": {"kind": "pods"},
            "is_error": False,
            "bytes": 2048,
            "mutating": False,
        }
    ]
    user = user_record(prompt, at=start)
    call = assistant_record(
        [
            {"type": "text", "text": ""},
            {"type": "tool_use", "id": tool_use_id, "name": "run_code", "input": {"code": code}},
        ],
        at=start + timedelta(seconds=1),
        stop_reason="tool_use",
    )
    outcome = Record(
        uuid=str(uuid.uuid4()),
        type="user",
        timestamp=_stamp(start, 2000),
        message={
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_use_id,
                    "content": result,
                    "is_error": is_error,
                }
            ],
        },
        tool_use_result={"nested_calls": nested_calls},
    )
    reply = assistant_record([{"type": "text", "text": answer}], at=start + timedelta(seconds=3))
    return [user, call, outcome, reply]


def tool_call_row(
    run_id: str,
    thread_id: str,
    *,
    tool: str = "list_objects",
    arguments: dict[str, Any] | None = None,
    mutating: bool = False,
    is_error: bool = False,
    started: datetime | str | None = None,
    record_uuid: str | None = None,
    size: int = 2048,
    duration_ms: float = 12.5,
) -> ToolCallRow:
    """One audit row."""
    stamp = started if isinstance(started, str) else iso_utc(started or _EPOCH)
    return ToolCallRow(
        run_id=run_id,
        thread_id=thread_id,
        tool=tool,
        arguments=arguments if arguments is not None else {"kind": "pods"},
        is_error=is_error,
        bytes=size,
        mutating=mutating,
        started=stamp,
        duration_ms=duration_ms,
        record_uuid=record_uuid,
    )
