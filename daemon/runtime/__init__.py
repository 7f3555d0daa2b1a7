"""Threads and runs: the scheduler between the channel and the model.

Holds the scheduler (:mod:`daemon.runtime.scheduler`: one run per thread,
coalescing, concurrency, shutdown) and what it shares with its collaborators
(:mod:`daemon.runtime.context`), the thread commands ``!stop`` and ``!reset``
(:mod:`daemon.runtime.commands`), the approval desk (:mod:`daemon.runtime.desk`),
the end of a run (:mod:`daemon.runtime.deliver`), the run request and result
(:mod:`daemon.runtime.runs`), the scheduler's store protocol over the
sessions store (:mod:`daemon.runtime.store`), the channel adapters
(:mod:`daemon.runtime.intake`), the restart note
(:mod:`daemon.runtime.note`), the notice of a run not run again after an
interruption (:mod:`daemon.runtime.interrupted`), the shield around the
reply and the run's record (:mod:`daemon.runtime.complete`), the per-sender
limits (:mod:`daemon.runtime.limits`) and the tokens a run spends
(:mod:`daemon.runtime.usage`), the nested-call audit rows
(:mod:`daemon.runtime.audit`), systemd's watchdog
(:mod:`daemon.runtime.watchdog`) and the one timing source of a run, whose spans
the traces, the metrics and the time split read (:mod:`daemon.runtime.timing`).

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.approvals``, ``daemon.crashpoints``, the
faces of ``daemon.code_mode.catalog`` and ``daemon.code_mode.repl`` (the
restart note's catalog and words), ``channels`` and ``sessions``; never
``daemon.model``, ``daemon.mcp`` or ``daemon.cli``.
"""

from daemon.runtime.audit import AuditedExecutor, audit_observer
from daemon.runtime.commands import ToolsOffered
from daemon.runtime.complete import cancel_until_done
from daemon.runtime.context import Outcome
from daemon.runtime.desk import ApprovalDesk, ApprovalMirror, Shared
from daemon.runtime.intake import ChannelPublisher, ChunkJoiner, inbound
from daemon.runtime.interrupted import report_interrupted
from daemon.runtime.limits import (
    RUN_WINDOW,
    TOKEN_WINDOW,
    LimitReached,
    SenderLimiter,
    SenderLimits,
    SenderUsage,
    limit_reached,
)
from daemon.runtime.note import RestartNoteExecutor
from daemon.runtime.ports import (
    InboundMessage,
    RecordOutcome,
    RuntimeOptions,
    RuntimePublisher,
    RuntimeStore,
    mentions,
    notice_client_id,
    reply_client_id,
)
from daemon.runtime.progress import (
    PROGRESS_GRACE,
    PROGRESS_INTERVAL,
    RunProgress,
    model_request,
    progress_observer,
    showing_progress,
    tool_call_started,
)
from daemon.runtime.runs import (
    HistoryTurn,
    PausedRun,
    Prompt,
    RunRequest,
    RunResult,
    ToolUseContext,
    current_tool_use,
)
from daemon.runtime.scheduler import Runtime
from daemon.runtime.scopes import (
    SignedScopeStore,
    keyed_mac,
    load_or_create_key,
    monty_version,
    scope_mac,
)
from daemon.runtime.store import SessionsRuntimeStore
from daemon.runtime.timing import (
    SPLIT_PARTS,
    RunTimeline,
    Span,
    SpanKind,
    Timelines,
    TimeSplit,
    TimingSink,
    WaitedDecision,
    current_span,
    current_timeline,
    mark,
    run_split,
    snippet_attribute,
    time_split,
    timed,
    timing_observer,
)
from daemon.runtime.usage import tokens_before_request, tokens_spent
from daemon.runtime.watchdog import health_problems, heartbeat
from sessions.model import PromptStatus

__all__ = [
    "PROGRESS_GRACE",
    "PROGRESS_INTERVAL",
    "RUN_WINDOW",
    "SPLIT_PARTS",
    "TOKEN_WINDOW",
    "ApprovalDesk",
    "ApprovalMirror",
    "AuditedExecutor",
    "ChannelPublisher",
    "ChunkJoiner",
    "HistoryTurn",
    "InboundMessage",
    "LimitReached",
    "Outcome",
    "PausedRun",
    "Prompt",
    "PromptStatus",
    "RecordOutcome",
    "RestartNoteExecutor",
    "RunProgress",
    "RunRequest",
    "RunResult",
    "RunTimeline",
    "Runtime",
    "RuntimeOptions",
    "RuntimePublisher",
    "RuntimeStore",
    "SenderLimiter",
    "SenderLimits",
    "SenderUsage",
    "SessionsRuntimeStore",
    "Shared",
    "SignedScopeStore",
    "Span",
    "SpanKind",
    "TimeSplit",
    "Timelines",
    "TimingSink",
    "ToolUseContext",
    "ToolsOffered",
    "WaitedDecision",
    "audit_observer",
    "cancel_until_done",
    "current_span",
    "current_timeline",
    "current_tool_use",
    "health_problems",
    "heartbeat",
    "inbound",
    "keyed_mac",
    "limit_reached",
    "load_or_create_key",
    "mark",
    "mentions",
    "model_request",
    "monty_version",
    "notice_client_id",
    "progress_observer",
    "reply_client_id",
    "report_interrupted",
    "run_split",
    "scope_mac",
    "showing_progress",
    "snippet_attribute",
    "time_split",
    "timed",
    "timing_observer",
    "tokens_before_request",
    "tokens_spent",
    "tool_call_started",
]
