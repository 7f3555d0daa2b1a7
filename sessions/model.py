"""Row types the daemon hands to the store, and those the store hands back.

sessions/ may not import daemon/, so the backend produces these. A type the
store reads back has its table's one row mapper beside it: ``COLUMNS``, the
SQL select list it maps, and ``from_row``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

__all__ = [
    "AuditEntry",
    "CallOutcome",
    "Decision",
    "HistoryText",
    "InterruptedRun",
    "PromptStatus",
    "Record",
    "RunMetrics",
    "SenderRun",
    "StartedCall",
    "StoredPrompt",
    "StoredRecord",
    "ThreadSummary",
    "ToolCallRow",
]

PromptStatus = Literal["queued", "running", "done", "failed"]
CallOutcome = Literal["started", "ok", "error", "cancelled", "unknown"]
"""How a nested call ended: ``started`` while it runs (or when a crash cut it off,
until the next start marks it ``unknown``)."""
Decision = Literal["approved", "denied", "expired"]


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
    """The audit of one nested tool call: added as the call starts (``outcome``
    ``started``), completed as it ends (:meth:`~sessions.store.Store.complete_tool_call`)."""

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
    outcome: CallOutcome = "ok"
    decision: Decision | None = None  # an approval's answer, when the call needed one
    decided_by: str | None = None
    wait_ms: float | None = None  # how long the call waited for that answer
    queue_ms: float | None = None  # how long it waited for its server's max_concurrent slot


@dataclass
class RunMetrics:
    """Turn metrics (spec A9) plus token usage, stored on the run row.

    The counters after ``completion_tokens`` have no column of their own: the
    run row's ``extra`` JSON holds those that are set (:meth:`extra`).
    """

    rounds: int = 0
    run_code_calls: int = 0
    nested_calls: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    final_round_forced: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0  # model requests retried after a 429, 5xx or timeout
    tool_errors: int = 0  # tool calls whose result was an error
    text_tool_calls: int = 0  # tool calls the model wrote as text (harness)
    harness_repairs: int = 0  # fixes the harness made to a snippet before running it
    code_blocks: int = 0  # code blocks the harness ran (small-model protocol)
    peeks: int = 0  # looks the harness took at a snippet's variables
    # snippets the harness fixed and ran again itself, no model round (the loop fix; the
    # name is the stored one, from the key fix it began with)
    key_fixes: int = 0
    vote_samples: int = 0  # extra snippets drawn to check a short answer (harness)
    # the reply is the last result: a short one as it stands, or in place of a reply that
    # retold the worked example
    reply_from_result: bool = False
    harness_gave_up: bool = False  # the harness stopped after failed snippets
    # where the run's seconds went (issue 31), by part: total, model_slot, prompt_eval,
    # generation, sandbox, tools, approvals, daemon (daemon.runtime.timing.time_split)
    split: dict[str, float] = field(default_factory=dict)

    def extra(self) -> dict[str, int | bool | dict[str, float]]:
        """The counters of the ``extra`` column that are set, by name."""
        return {
            name: value
            for name in EXTRA_METRICS
            if (value := getattr(self, name)) != _EXTRA_DEFAULTS[name]
        }

    def load_extra(self, stored: Mapping[str, Any]) -> None:
        """Set the counters of a stored ``extra`` object; names or types this
        version does not know are left out."""
        for name, value in stored.items():
            if name == "split" and isinstance(value, dict):
                self.split = {
                    part: float(seconds)
                    for part, seconds in value.items()
                    if isinstance(seconds, int | float) and not isinstance(seconds, bool)
                }
            elif name in _EXTRA_DEFAULTS and type(value) is type(_EXTRA_DEFAULTS[name]):
                setattr(self, name, value)


#: The counters stored in the run row's ``extra`` JSON, in this order.
EXTRA_METRICS = (
    "retries",
    "tool_errors",
    "text_tool_calls",
    "harness_repairs",
    "code_blocks",
    "peeks",
    "key_fixes",
    "vote_samples",
    "reply_from_result",
    "harness_gave_up",
    "split",
)
_EXTRA_DEFAULTS: dict[str, int | bool | dict[str, float]] = {
    name: getattr(RunMetrics(), name) for name in EXTRA_METRICS
}


# ---- what the store hands back (added by the sessions engineer) ----


@dataclass(frozen=True)
class StoredPrompt:
    """An inbound channel message as stored, with where it stands."""

    id: str  # the channel's message id
    channel: str
    thread_id: str
    sender: str
    text: str
    ts: str  # ISO 8601, UTC
    status: PromptStatus
    run_id: str | None

    COLUMNS: ClassVar[str] = (
        "p.id, th.channel, th.thread_id, p.sender, p.text, p.ts, p.status, p.run_id"
        " FROM prompts p JOIN threads th ON th.id = p.thread"
    )
    """The select list and FROM of a prompt with its thread (``p``: prompts, ``th``: threads)."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredPrompt:
        """A ``prompts`` row read with :attr:`COLUMNS`."""
        return cls(*row)


@dataclass(frozen=True)
class SenderRun:
    """One run that answered a sender's prompts: when it started and the tokens it used."""

    started: str  # ISO 8601, UTC (the store's format)
    tokens: int  # prompt + completion tokens spent so far
    answered: bool = True  # False: cut off, its prompts went on to a later run


class HistoryText(NamedTuple):
    """One turn of a thread's earlier user or assistant text (never tool results)."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class ThreadSummary:
    """One thread with its counts, as ``asyncai threads`` lists it."""

    channel: str
    thread_id: str
    session_id: str
    created: str
    last_active: str
    prompts: int
    runs: int
    records: int
    tool_calls: int
    mutating_calls: int
    scope_bytes: int | None = None  # the stored REPL scope's size; None: no scope stored

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ThreadSummary:
        """A ``threads`` row with its counts, in the order of the fields."""
        return cls(*row)


@dataclass(frozen=True)
class AuditEntry:
    """One row of the nested-call audit, with its thread spelled out."""

    id: int
    run_id: str
    channel: str
    thread_id: str
    record_uuid: str | None
    tool: str
    arguments: dict
    is_error: bool
    bytes: int
    mutating: bool
    started: str
    duration_ms: float
    outcome: CallOutcome = "ok"
    decision: Decision | None = None
    decided_by: str | None = None
    wait_ms: float | None = None
    queue_ms: float | None = None  # None: the server has no max_concurrent

    COLUMNS: ClassVar[str] = (
        "t.id, t.run_id, th.channel, th.thread_id, t.record_uuid, t.tool, t.arguments,"
        " t.is_error, t.bytes, t.mutating, t.started, t.duration_ms,"
        " t.outcome, t.decision, t.decided_by, t.wait_ms, t.queue_ms"
    )
    """The select list :meth:`from_row` maps, in the order of the fields (``t``:
    tool_calls, ``th``: its thread)."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> AuditEntry:
        """A ``tool_calls`` row read with :attr:`COLUMNS` (in the order of the fields)."""
        values = list(row)
        values[6:10] = json.loads(row[6]), bool(row[7]), row[8], bool(row[9])
        return cls(*values)


@dataclass(frozen=True)
class StartedCall:
    """One nested call an interrupted run started, in the order it started."""

    tool: str
    arguments: dict
    mutating: bool
    outcome: CallOutcome


@dataclass(frozen=True)
class InterruptedRun:
    """A run cut off (a crash, or a shutdown whose grace ran out) after it had started
    a mutating call: its pending prompts must not run again (recovery's rule)."""

    run_id: str
    channel: str
    thread_id: str
    prompt_ids: tuple[str, ...]  # its prompts still pending, oldest first
    calls: tuple[StartedCall, ...]


@dataclass(frozen=True)
class StoredRecord:
    """A transcript record with its Claude Code envelope, as stored."""

    uuid: str
    parent_uuid: str | None
    session_id: str
    channel: str
    thread_id: str
    run_id: str
    type: Literal["user", "assistant"]
    timestamp: str
    message: dict
    tool_use_result: Any | None
    cwd: str
    version: str
    is_sidechain: bool = False
    user_type: str = "external"

    COLUMNS: ClassVar[str] = (
        "uuid, parent_uuid, session_id, run_id, type, timestamp, message,"
        " tool_use_result, cwd, version, is_sidechain, user_type"
    )
    """The ``records`` columns :meth:`from_row` maps (the thread is the caller's)."""

    @classmethod
    def from_row(cls, row: Sequence[Any], channel: str, thread_id: str) -> StoredRecord:
        """A ``records`` row read with :attr:`COLUMNS`, of the thread ``(channel, thread_id)``."""
        return cls(
            uuid=row[0],
            parent_uuid=row[1],
            session_id=row[2],
            channel=channel,
            thread_id=thread_id,
            run_id=row[3],
            type=row[4],
            timestamp=row[5],
            message=json.loads(row[6]),
            tool_use_result=None if row[7] is None else json.loads(row[7]),
            cwd=row[8],
            version=row[9],
            is_sidechain=bool(row[10]),
            user_type=row[11],
        )
