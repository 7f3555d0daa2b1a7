"""systemd's watchdog and status line for the daemon: ``WATCHDOG=1`` only while healthy.

:func:`heartbeat` sends ``STATUS=`` every few seconds and, when systemd asks
for a watchdog (``WATCHDOG_USEC``), ``WATCHDOG=1`` every half of it, but only
while nothing in :func:`health_problems` is wrong: the intake task is alive,
the channel client is not broken for good, and the runtime is not wedged. When
one of them fails the pings stop, so systemd restarts the daemon after
``WatchdogSec=``; ``STATUS=`` names the problem, and a log line says when it
began and when it ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from channels.client import Channel
from channels.notify import notify, watchdog_interval
from daemon.runtime.scheduler import Runtime

__all__ = ["STATUS_INTERVAL", "health_problems", "heartbeat"]

log = structlog.get_logger("asyncai.daemon")

# STATUS= is refreshed this often even without a watchdog.
STATUS_INTERVAL = 5.0


def health_problems(
    intake: asyncio.Task[None] | None, channel: Channel | None, runtime: Runtime | None
) -> list[str]:
    """What is wrong with the daemon now, in a few words each; empty when healthy.

    ``channel.broken`` (no I/O) is true once the client gave up reconnecting
    or the task that owns its connection died; while it reconnects it is not
    broken, and the watchdog goes on (the hub keeps what is published meanwhile).
    """
    problems = []
    if intake is None or intake.done():
        problems.append("the channel intake ended")
    if channel is not None and channel.broken:
        problems.append("the channel is broken")
    if runtime is not None and runtime.wedged():
        problems.append("a run outlived its deadline (wedged)")
    return problems


async def heartbeat(
    problems: Callable[[], list[str]],
    status: Callable[[], str],
    *,
    env: Mapping[str, str] | None = None,
) -> None:
    """Forever: ``STATUS=`` (with the problems, if any) and, while healthy, ``WATCHDOG=1``."""
    interval = watchdog_interval(env=env)
    period = min(interval, STATUS_INTERVAL) if interval else STATUS_INTERVAL
    reported: list[str] = []
    while True:
        await asyncio.sleep(period)
        found = problems()
        if found != reported:
            if found:
                log.error("daemon.unhealthy", problems=found, watchdog=bool(interval))
            else:
                log.warning("daemon.healthy_again")
            reported = found
        state = f"STATUS={'unhealthy: ' + '; '.join(found) + '; ' if found else ''}{status()}"
        if interval and not found:
            state = "WATCHDOG=1\n" + state
        notify(state, env=env)
