"""A bound on the local model server's memory: restart it between runs when it grew.

llama-cpp-python's server was seen growing from 3.0 to 6.7 GB resident over
about 430 requests. Until the cause is found and fixed upstream, the daemon
checks the child's resident memory now and then and, above
``[model] local_max_rss``, restarts it while no run is using it (same port,
so the backend's URL stays valid; the prompt cache is warmed again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

__all__ = ["RestartableServer", "guard_memory"]

log = structlog.get_logger("asyncai.local_model")

CHECK_INTERVAL = 15.0  # seconds between two looks at the server's memory


class RestartableServer(Protocol):
    """What the guard needs of :class:`~daemon.local_model.server.LocalModelServer`."""

    def rss(self) -> int | None:
        """Resident bytes, or None when unknown."""
        ...

    async def restart(self) -> None:
        """Stop and start again on the same port."""
        ...


async def guard_memory(
    server: RestartableServer,
    limit: int,
    idle: Callable[[], bool],
    *,
    after_restart: Callable[[], Awaitable[object]] | None = None,
    interval: float = CHECK_INTERVAL,
) -> None:
    """Forever: above ``limit`` bytes and while ``idle()``, restart the server (then
    ``after_restart``). Runs until cancelled; a failed restart is logged and tried
    again at the next look."""
    while True:
        await asyncio.sleep(interval)
        rss = server.rss()
        if rss is None or rss <= limit or not idle():
            continue
        log.warning("local_model.restart_for_memory", rss=rss, limit=limit)
        try:
            await server.restart()
            if after_restart is not None:
                await after_restart()
        except Exception as exc:
            log.error("local_model.restart_failed", error=f"{type(exc).__name__}: {exc}")
