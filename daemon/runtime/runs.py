"""What the runtime hands the backend for one run, and what comes back.

``RunRequest``/``RunResult`` are DESIGN.md's; ``current_tool_use`` lets code
that runs inside a tool call (the code-mode audit observer) learn which run
and which transcript record the call belongs to without widening the
``ToolExecutor.call_tool`` signature: the backend sets it around each
``call_tool``, and tasks started inside inherit it.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from daemon.approvals import Pause
from daemon.tools import ThreadKey
from sessions.model import Record, RunMetrics

__all__ = [
    "HistoryTurn",
    "PausedRun",
    "Prompt",
    "RunRequest",
    "RunResult",
    "RunStatus",
    "ToolUseContext",
    "current_tool_use",
    "opens_thread",
]


@dataclass(frozen=True)
class Prompt:
    """One inbound channel message that the run answers."""

    id: str  # the channel's message id
    sender: str
    text: str


@dataclass(frozen=True)
class HistoryTurn:
    """Earlier user or assistant text of the thread (never tool results)."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class RunRequest:
    """One run: the prompts to answer (coalesced into one user message, in order)."""

    run_id: str
    channel: str
    thread_id: str
    history: list[HistoryTurn]
    prompts: list[Prompt]

    @property
    def thread(self) -> ThreadKey:
        """The run's thread, its channel and thread id: what its REPL scope is keyed by."""
        return ThreadKey(self.channel, self.thread_id)

    @property
    def opens_thread(self) -> bool:
        """Whether the run answers its thread's root (:func:`opens_thread`)."""
        return opens_thread(self.thread_id, self.prompts)


def opens_thread(thread_id: str, prompts: Iterable[Prompt]) -> bool:
    """Whether ``prompts`` hold the root of thread ``thread_id`` (a root's id is its
    thread's id: the hub's rule and NATS mapping's). A run that answers a root has no
    earlier turn and no stored REPL to read: nothing of its thread was answered before
    (its root would be done, not run), and a REPL is stored only by a run that replied."""
    return any(p.id == thread_id for p in prompts)


RunStatus = Literal["done", "failed", "interrupted", "paused"]


@dataclass(frozen=True)
class PausedRun:
    """A run stopped before calls that need a person's approval (status ``paused``).

    ``pause`` holds the calls and, in code mode, the snippet's Monty snapshot;
    ``conversation`` is the model loop's state (JSON), enough to go on in
    another process after a restart.
    """

    pause: Pause
    conversation: dict[str, Any]


@dataclass
class RunResult:
    """The reply and everything to store about the run.

    A ``paused`` run has no reply yet: ``paused`` says what it waits for, and
    its records and metrics so far travel in ``paused.conversation``.
    """

    reply: str
    records: list[Record] = field(default_factory=list)
    metrics: RunMetrics = field(default_factory=RunMetrics)
    status: RunStatus = "done"
    error: str | None = None
    paused: PausedRun | None = None


@dataclass(frozen=True)
class ToolUseContext:
    """The model tool call currently executing (set by the backend)."""

    run_id: str
    thread_id: str
    tool_use_id: str
    record_uuid: str  # the assistant record that carries the tool_use block
    channel: str = ""  # the run's channel: whose [approvals] the gate applies (issue 29)


current_tool_use: ContextVar[ToolUseContext | None] = ContextVar("current_tool_use", default=None)
