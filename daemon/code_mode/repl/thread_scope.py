"""``ThreadScope``: the handle a conversation thread gets on its code-mode REPL.

It holds only the thread (a :class:`~daemon.tools.ThreadKey`) and asks its
parent (a :class:`ScopeHost`, in practice
:class:`~daemon.code_mode.executor.CodeModeToolExecutor`) on every call, so a
handle outlives the scope's eviction.
"""

from __future__ import annotations

from typing import Protocol

from daemon.tools import (
    BaseToolExecutor,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
    ToolExecutor,
)

__all__ = ["ScopeHost", "ThreadScope"]


class ScopeHost(Protocol):
    """What a :class:`ThreadScope` needs of the executor that owns the scopes."""

    def channel_definitions(self, channel: str) -> list[ToolDefinition]:
        """Exactly ``[run_code]``, with the shapes learned in ``channel``."""
        ...

    async def start(self) -> None:
        """Start the inner executor and the pool."""
        ...

    async def call_in_scope(self, thread: ThreadKey, name: str, arguments: dict) -> ToolCallOutput:
        """Run ``name`` in ``thread``'s REPL."""
        ...

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """The handle of another thread's scope."""
        ...

    def context_note(self, thread: ThreadKey) -> str | None:
        """The note for the thread's next run."""
        ...

    def worker_pid(self, thread: ThreadKey) -> int | None:
        """The pid of the worker holding the thread's REPL, if checked out."""
        ...


class ThreadScope(BaseToolExecutor):
    """The code-mode executor bound to one conversation thread's REPL.

    Offers the same single ``run_code`` tool; its variables persist across
    calls and runs of the thread until eviction, ``restart`` or a reset. It
    holds only the thread and looks its state up on every call, so a handle
    outlives an eviction and simply finds an empty REPL next time. The parent
    executor owns everything: ``aclose()`` here does nothing.
    """

    def __init__(self, parent: ScopeHost, thread: ThreadKey):
        self._parent = parent
        self.thread = thread

    def definitions(self) -> list[ToolDefinition]:
        """Exactly ``[run_code]``, as the parent offers it to the thread's channel (its
        stubs show the shapes learned in that channel only, issue 29)."""
        return self._parent.channel_definitions(self.thread.channel)

    async def start(self) -> None:
        """Start the parent (inner executor and pool)."""
        await self._parent.start()

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Run ``run_code`` in this thread's REPL."""
        return await self._parent.call_in_scope(self.thread, name, arguments)

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """Another thread's scope, from the parent."""
        return self._parent.thread_scope(thread)

    def context_note(self, thread: ThreadKey) -> str | None:
        """The parent's note for ``thread``."""
        return self._parent.context_note(thread)

    @property
    def worker_pid(self) -> int | None:
        """The pid of the worker holding this thread's REPL, if checked out (diagnostics)."""
        return self._parent.worker_pid(self.thread)

    async def aclose(self) -> None:
        """Nothing: the parent executor owns the checkout and closes it."""
