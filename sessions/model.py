"""Row types the daemon hands to the store.

sessions/ may not import daemon/, so the backend produces these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Record", "RunMetrics", "ToolCallRow"]


@dataclass(frozen=True)
class Record:
    """One transcript record, Claude Code shaped.

    ``message`` is the Claude Code ``message`` object: for a user record
    ``{"role": "user", "content": [blocks]}`` (``text`` or ``tool_result``
    blocks), for an assistant record ``{"id", "type": "message", "role":
    "assistant", "model", "content": [text / tool_use blocks], "stop_reason",
    "usage"}``. The store adds the envelope (``parentUuid``, ``sessionId``,
    ``cwd``, ``version``, ``isSidechain``, ``userType``) and chains
    ``parentUuid``: the first record of a run links to the thread's last record,
    each later one to the record before it.
    """

    uuid: str
    type: Literal["user", "assistant"]
    timestamp: str  # ISO 8601, UTC, e.g. 2026-11-29T18:00:00.000Z
    message: dict
    tool_use_result: Any | None = None  # run_code audit, on a tool_result record


@dataclass(frozen=True)
class ToolCallRow:
    """The audit of one nested tool call, committed as the call ends."""

    run_id: str
    thread_id: str
    tool: str
    arguments: dict
    is_error: bool
    bytes: int
    mutating: bool
    started: str  # ISO 8601, UTC
    duration_ms: float
    record_uuid: str | None = None  # the assistant record that carried the run_code tool_use


@dataclass
class RunMetrics:
    """Turn metrics (spec A9) plus token usage, stored on the run row."""

    rounds: int = 0
    run_code_calls: int = 0
    nested_calls: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    final_round_forced: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
