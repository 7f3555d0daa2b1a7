"""The tool interface every executor implements, and the values it passes.

The backend is handed a :class:`ToolExecutor` and never knows which one:
``McpToolExecutor`` (MCP servers over stdio) or ``CodeModeToolExecutor``
(one ``run_code`` tool whose Python calls an inner executor).

Approvals (issue 13) cross the same boundary: a call that must wait for a
person ends the tool call with a :class:`~daemon.approvals.Pause`, and a
:class:`Resumable` executor goes on with it given one
:class:`~daemon.approvals.Decision` per pending call. Those values, and the
gate that asks for them, are :mod:`daemon.approvals`' (issue 27).

A conversation thread is named by a :class:`ThreadKey`, its channel and its
thread id (issue 26): a thread id alone is only unique within its channel,
so every per-thread thing here (a REPL scope, its note, its stored dump) is
looked up by both, and a prompt of one channel never reaches another's.

A channel sees only the tools its policy lets it see (issue 29): its executor
is a view over the daemon's one MCP executor, an :class:`OffersTools`, whose
definitions leave the others out and which refuses a call of one of them.
Code mode asks it again where a nested call leaves the sandbox.

REPL persistence (issue 14): an executor whose thread REPLs survive eviction
and restart is :class:`PersistentScopes`, which the daemon drives (a
checkpoint after each run and at shutdown, a restore before a run's note, a
reset for ``!reset``). Where it keeps them (``ScopeStore``) is code mode's
(:mod:`daemon.code_mode.repl`), as is where it keeps the return shapes it
learned (``ShapeStore``, :mod:`daemon.code_mode.catalog`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from daemon.approvals import Decision, Pause

__all__ = [
    "OBSERVER_TIMEOUT",
    "AuditEntry",
    "AuditObserver",
    "BaseToolExecutor",
    "CallOutcome",
    "CallSlots",
    "OffersTools",
    "PersistentScopes",
    "ThreadKey",
    "ToolCallOutput",
    "ToolDefinition",
    "ToolExecutor",
    "not_recorded",
    "observe_entry",
]


class ThreadKey(NamedTuple):
    """A conversation thread: its channel and its thread id (the id of its root message).

    A thread id is unique only within its channel, as the sessions tables
    key threads, so every scope, note and stored dump is found by both. A
    tuple, so it equals the runtime's ``(channel, thread_id)`` keys.
    """

    channel: str
    thread_id: str

    def __str__(self) -> str:
        return f"{self.channel} {self.thread_id}"


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as the model (or the sandbox catalog) sees it."""

    name: str
    description: str
    input_schema: dict
    output_schema: dict | None = None
    read_only: bool | None = None  # MCP readOnlyHint
    destructive: bool | None = None  # MCP destructiveHint
    server: str | None = None  # the MCP server that serves it (approval globs are server.tool)
    server_version: str | None = None  # its serverInfo.version from the MCP handshake

    @property
    def mutating(self) -> bool:
        """Whether a call may change something.

        The MCP defaults: an unannotated tool counts as mutating, so only an
        explicit read-only, non-destructive tool is not.
        """
        return self.destructive is True or self.read_only is not True

    @property
    def qualified_name(self) -> str:
        """``server.tool``, what approval globs match (just the name without a server)."""
        return f"{self.server}.{self.name}" if self.server else self.name


@dataclass
class ToolCallOutput:
    """The result of one tool call."""

    content: str  # text: what the model (or the sandbox) receives
    is_error: bool
    structured: Any | None = None  # MCP structuredContent, when the server sent one
    audit: dict | None = None  # run_code: {"nested_calls": [...]}
    pause: Pause | None = None  # set when the call waits for approval (content says so)


CallOutcome = Literal["started", "ok", "error", "cancelled", "unknown"]
"""How a nested call ended; ``started`` while it runs, ``unknown`` when the worker died."""


@dataclass(frozen=True)
class AuditEntry:
    """One nested call as the audit keeps it (spec A7): made by code mode when the
    call starts (``outcome="started"``) and again as it ends, handed to the
    :data:`AuditObserver`, stored as one ``tool_calls`` row (``key`` pairs the two)."""

    tool: str
    arguments: dict[str, Any]
    is_error: bool
    bytes: int  # what the result brought into the sandbox
    mutating: bool  # ToolDefinition.mutating of the tool
    started: str  # ISO 8601, UTC
    duration_ms: float
    outcome: CallOutcome = "ok"
    key: str = ""  # the same for a call's started and ended entries
    decision: Literal["approved", "denied", "expired"] | None = None
    decided_by: str | None = None
    wait_ms: float | None = None
    # how long the call waited for a slot of its server's max_concurrent (None: no limit)
    queue_ms: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The entry as the transcript's ``toolUseResult.nested_calls`` carries it."""
        return asdict(self)


AuditObserver = Callable[[str | None, AuditEntry], Awaitable[None] | None]
"""``observer(thread_id, entry)``, sync or async, called as each call starts and ends.

``thread_id`` is for the observer's logs only; the run (and so the channel)
a call belongs to is ``current_tool_use``'s, set by the backend. It returns
once the entry is recorded durably. For the ``started`` entry of a mutating
call, raising (or not returning in time) means "not recorded": the call is
then not made (issue 26), and the caller reads :func:`not_recorded`.
"""

# How long an observer may take to record one entry (code mode's and direct mode's alike).
OBSERVER_TIMEOUT = 10.0


async def observe_entry(observer: AuditObserver, thread_id: str | None, entry: AuditEntry) -> None:
    """Hand ``entry`` to ``observer`` (sync or async) within :data:`OBSERVER_TIMEOUT`;
    what it raised, or ``TimeoutError`` past the bound, is raised."""
    async with asyncio.timeout(OBSERVER_TIMEOUT):
        maybe = observer(thread_id, entry)
        if inspect.isawaitable(maybe):
            await maybe


def not_recorded(tool: str, error: BaseException) -> str:
    """The error a snippet (or, in direct mode, the model) reads for a mutating call
    that was not made because recording its start failed with ``error``."""
    reason = "no answer in time" if isinstance(error, TimeoutError) else f"{error}"
    return (
        f"{tool} was not called: the call could not be recorded in the audit ({reason}), "
        "and a call that can change something is made only once it is recorded"
    )


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs tools. Built synchronously; servers and pools start lazily."""

    def definitions(self) -> list[ToolDefinition]:
        """The tools offered; valid once started."""
        ...

    async def start(self) -> None:
        """Connect servers or start pools. Idempotent."""
        ...

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call one tool.

        Raises :class:`~daemon.errors.ToolTransportError` when it cannot be made.
        """
        ...

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """An executor bound to one conversation thread, or None (the default)."""
        ...

    def context_note(self, thread: ThreadKey) -> str | None:
        """Text to append to the newest user message of the thread's next run."""
        ...

    async def aclose(self) -> None:
        """Release servers, pools and processes."""
        ...


@runtime_checkable
class CallSlots(Protocol):
    """An executor that bounds how many calls of a server run at once (``max_concurrent``).

    Code mode takes the slot before it starts a call's ``tool_timeout``, so
    waiting for a turn never counts against it, and audits the wait.
    """

    def call_slot(self, name: str) -> AbstractAsyncContextManager[float | None]:
        """Wait for a slot to call ``name``; hold it for the ``async with`` body.

        Yields the milliseconds waited (None: no limit applies to ``name``).
        A ``call_tool(name)`` made inside the body uses this slot.
        """
        ...


@runtime_checkable
class OffersTools(Protocol):
    """An executor that offers only some of the tools behind it (a channel's view, issue 29).

    A tool it does not offer is not there: not in :meth:`ToolExecutor.definitions`,
    and code mode answers a call of it as it answers any undefined name, with a
    ``NameError``, asking :meth:`offers` where the call leaves the sandbox.
    """

    def offers(self, name: str) -> bool:
        """Whether the tool called ``name`` exists for this executor's callers."""
        ...


@runtime_checkable
class Resumable(Protocol):
    """An executor that can go on with a tool call it ended in a :class:`Pause`."""

    async def resume(
        self, thread: ThreadKey | None, pause: Pause, decisions: Mapping[int, Decision]
    ) -> ToolCallOutput:
        """Make (approved) or refuse (denied) the pending calls and finish the call."""
        ...


@runtime_checkable
class PersistentScopes(Protocol):
    """An executor whose thread REPLs survive eviction and restart (code mode with a store)."""

    async def restore_scope(self, thread: ThreadKey, *, new: bool = False) -> None:
        """Load the thread's stored REPL now, if it is not live, so the next note tells of it.
        ``new``: the thread has just begun, so nothing is stored: no store read, now or at
        its first snippet."""
        ...

    async def checkpoint(self, thread: ThreadKey) -> None:
        """Store the thread's REPL if a snippet changed it since it was last stored."""
        ...

    async def checkpoint_all(self) -> None:
        """:meth:`checkpoint` every live REPL (at shutdown, before ``aclose``)."""
        ...

    async def forget(self, thread: ThreadKey) -> None:
        """Drop the thread's live REPL without storing it: the stored one is newer (in a
        cluster, another daemon ran the thread since); the next snippet loads that."""
        ...

    async def reset(self, thread: ThreadKey) -> None:
        """Drop the thread's REPL and its stored dump (``!reset``).

        The next snippet starts empty and loads nothing.
        """
        ...


class BaseToolExecutor:
    """Defaults for the optional parts of :class:`ToolExecutor`."""

    async def start(self) -> None:
        """Nothing to start."""

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """No per-thread scope."""
        return None

    def context_note(self, thread: ThreadKey) -> str | None:
        """No note."""
        return None

    async def aclose(self) -> None:
        """Nothing to close."""
