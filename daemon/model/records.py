"""What a run leaves behind: its transcript records and its metrics.

:class:`RunState` accumulates both as the loop goes. Transcript records are
Claude Code shaped and in the order the model saw them: the user text (the
prompts only: the context note and the final-round request are harness
text, kept out of the history the runtime rebuilds from records), each
assistant message with its ``text`` and ``tool_use`` blocks, one user record
per ``tool_result`` carrying the call's audit as ``tool_use_result``, and the
final assistant text. The metrics end in the ``model.turn_summary`` log
event (spec A9 plus tokens).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from daemon.runtime.runs import RunRequest
from daemon.runtime.timing import run_split
from daemon.tools import ToolCallOutput
from sessions.model import Record, RunMetrics

__all__ = [
    "RunState",
    "assistant_record",
    "count_result",
    "log_summary",
    "now",
    "unanswered_results",
    "user_record",
]

log = structlog.get_logger("asyncai.backend")


@dataclass
class RunState:
    """What one run accumulates."""

    request: RunRequest
    records: list[Record] = field(default_factory=list)
    metrics: RunMetrics = field(default_factory=RunMetrics)
    reply: str = ""
    call_ids: set[str] = field(default_factory=set)


def user_record(content: list[dict[str, Any]], tool_use_result: Any = None) -> Record:
    """A user record: the prompt text, or one ``tool_result`` with the call's audit."""
    return Record(
        uuid=str(uuid.uuid4()),
        type="user",
        timestamp=now(),
        message={"role": "user", "content": content},
        tool_use_result=tool_use_result,
    )


def unanswered_results(records: list[Record], why: str) -> list[Record]:
    """A ``tool_result`` record (an error saying ``why``) for each ``tool_use`` of
    ``records`` that has none, in order: a run cut off in the middle of a call (its
    deadline, a failing executor) still pairs every ``tool_use`` with its result, as
    Claude Code's readers require of the JSONL export."""
    answered: set[str] = set()
    uses: list[str] = []
    for record in records:
        content = record.message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                uses.append(str(block.get("id")))
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                answered.add(str(block.get("tool_use_id")))
    return [
        user_record(
            [
                {
                    "type": "tool_result",
                    "tool_use_id": use,
                    "content": f"(no result: {why})",
                    "is_error": True,
                }
            ]
        )
        for use in uses
        if use not in answered
    ]


def assistant_record(
    response: Any,
    content: str,
    tool_uses: list[dict[str, Any]],
    finish: str | None,
    model_name: str,
) -> Record:
    """An assistant record: its text, then its ``tool_use`` blocks, with the usage."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks += tool_uses
    usage = response.usage
    stop = "tool_use" if tool_uses else ("max_tokens" if finish == "length" else "end_turn")
    return Record(
        uuid=str(uuid.uuid4()),
        type="assistant",
        timestamp=now(),
        message={
            "id": response.id or f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "model": response.model or model_name,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": getattr(usage, "prompt_tokens", 0) or 0,
                "output_tokens": getattr(usage, "completion_tokens", 0) or 0,
            },
        },
    )


def now() -> str:
    """The current time as a record timestamp: ISO 8601, UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def count_result(metrics: RunMetrics, output: ToolCallOutput, sent: str, code_mode: bool) -> None:
    """Count one tool result: the call, the bytes sent to the model, the nested calls
    and the bytes they brought in (or, in direct mode, the MCP result's), an error."""
    metrics.run_code_calls += 1
    metrics.bytes_out += len(sent.encode())
    nested = (output.audit or {}).get("nested_calls")
    if isinstance(nested, list):
        metrics.nested_calls += len(nested)
        metrics.bytes_in += sum(int(c.get("bytes") or 0) for c in nested if isinstance(c, dict))
    elif not code_mode:  # direct mode: the tool result is the MCP result
        metrics.bytes_in += len(output.content.encode())
    if output.is_error:
        metrics.tool_errors += 1


def log_summary(state: RunState, status: str, seconds: float) -> None:
    """The ``model.turn_summary`` event that ends every run (every leg of a paused one),
    with the run's time split so far, which the run row keeps too (``extra.split``)."""
    m = state.metrics
    m.split = run_split()
    log.info(
        "model.turn_summary",
        run_id=state.request.run_id,
        thread_id=state.request.thread_id,
        status=status,
        rounds=m.rounds,
        run_code_calls=m.run_code_calls,
        nested_calls=m.nested_calls,
        bytes_in=m.bytes_in,
        bytes_out=m.bytes_out,
        final_round_forced=m.final_round_forced,
        prompt_tokens=m.prompt_tokens,
        completion_tokens=m.completion_tokens,
        duration_ms=round(seconds * 1000, 1),
        **{f"{part}_s": value for part, value in m.split.items()},
    )
