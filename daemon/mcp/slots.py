"""Per-server bounds on calls in flight: ``[mcp_servers.NAME] max_concurrent`` (issue 19).

A server with ``max_concurrent = N`` runs at most N calls at once, counted
across every thread and run of the daemon (there is one executor). A call
beyond that waits for a slot, first come first served (``asyncio.Semaphore``
wakes its waiters in order); the wait is measured and handed back so the
audit can record it (``queue_ms``). A server without a limit takes no slot
and reports no wait (None).

The caller takes the slot *before* it starts the call's timeout, so waiting
for a turn never counts against ``tool_timeout`` (code mode) or the
executor's ``call_timeout`` (direct mode). Code mode takes the slot itself
(:meth:`McpToolExecutor.call_slot <daemon.mcp.executor.McpToolExecutor.call_slot>`,
:class:`daemon.tools.CallSlots`) and then calls ``call_tool`` inside it; a
context variable tells ``call_tool`` that its task already holds that
server's slot, so it does not wait for a second one (which, with a limit of
1, would wait forever). It names the holding task too: a task started while
a slot is held inherits the variable but not the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar

__all__ = ["ServerSlots"]

# The server whose slot the current task holds, and that task, while it holds it.
_HELD: ContextVar[tuple[str, asyncio.Task[object] | None] | None] = ContextVar(
    "asyncai_mcp_slot_held", default=None
)
# No limit, or the slot is already held: nothing to wait for.
_NO_SLOT: AbstractAsyncContextManager[float | None] = contextlib.nullcontext(None)


class ServerSlots:
    """One semaphore per server that has a ``max_concurrent``; the others run freely."""

    def __init__(self, limits: Mapping[str, int | None]) -> None:
        self._limits = {name: n for name, n in limits.items() if n is not None}
        self._semaphores = {name: asyncio.Semaphore(n) for name, n in self._limits.items()}
        self._in_flight = dict.fromkeys(self._limits, 0)
        self._waiting = dict.fromkeys(self._limits, 0)

    def limit(self, server: str) -> int | None:
        """The server's ``max_concurrent``, or None (unlimited)."""
        return self._limits.get(server)

    def in_flight(self, server: str) -> int:
        """Calls of a limited server holding a slot now (0 for an unlimited one)."""
        return self._in_flight.get(server, 0)

    def waiting(self, server: str) -> int:
        """Calls of a limited server waiting for a slot now."""
        return self._waiting.get(server, 0)

    def hold(self, server: str) -> AbstractAsyncContextManager[float | None]:
        """Wait for one of ``server``'s slots and hold it for the ``async with`` body.

        Yields the milliseconds waited (0.0 when a slot was free), or None
        when the server has no limit or this task already holds its slot.
        """
        semaphore = self._semaphores.get(server)
        if semaphore is None or _HELD.get() == (server, asyncio.current_task()):
            return _NO_SLOT
        return self._acquire(server, semaphore)

    @contextlib.asynccontextmanager
    async def _acquire(self, server: str, semaphore: asyncio.Semaphore) -> AsyncIterator[float]:
        waited = 0.0
        if semaphore.locked():
            t0 = time.monotonic()
            self._waiting[server] += 1
            try:
                await semaphore.acquire()
            finally:
                self._waiting[server] -= 1
            waited = round((time.monotonic() - t0) * 1000, 3)
        else:
            await semaphore.acquire()  # free: returns at once
        self._in_flight[server] += 1
        token = _HELD.set((server, asyncio.current_task()))
        try:
            yield waited
        finally:
            _HELD.reset(token)
            self._in_flight[server] -= 1
            semaphore.release()
