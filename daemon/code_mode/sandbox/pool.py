"""The Monty worker pool: sizing, checkout limits, clean shutdown.

One ``AsyncMonty`` pool per daemon. Every thread scope holds one checkout,
which holds one worker process, and the pool's default size is the CPU count:
on 2 cores the third scope would wait forever. So the pool allows
``max_scopes + 3`` workers (the private scope of unscoped calls, one
scope of overshoot while the LRU cannot evict a running scope, and the warm
spare of :mod:`daemon.code_mode.repl.fresh`), and every wait is finite: a
checkout gives up after ``checkout_timeout``, a request after
``limits.request_timeout`` (the snippet limit + 10 s).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_monty import AsyncMonty, AsyncMontySession, OSPolicy, ResourceLimits

from daemon.limits import CodeModeLimits

__all__ = [
    "CHECKOUT_OS_POLICY",
    "checkout_limits",
    "close_pool",
    "create_pool",
    "new_checkout",
    "pool_options",
]

# Sleeps reach the host as OS calls (``time.sleep``, ``asyncio.sleep``): the
# engine refuses them with a message, and the variables probe's ``os=``
# handler refuses them at once. By default the worker sleeps by itself, up to
# 10 s a call, which no handler sees and which can outlast the probe's deadline.
CHECKOUT_OS_POLICY: OSPolicy = {"sleep": "call_host"}

# Monty counts suspensions over a checkout's whole life and cannot disable
# the count; the host enforces the per-snippet budget instead.
UNBOUNDED_SUSPENSIONS = 2**62
# Closing a pool or a checkout is local process work; it should take milliseconds.
CLOSE_TIMEOUT = 10.0
# Lets the pool's Rust runtime threads finish before the interpreter may exit
# (notes/monty.md §10: otherwise a late callback can abort the process).
SHUTDOWN_BREATH = 0.05


def pool_options(limits: CodeModeLimits) -> dict[str, Any]:
    """Keyword arguments for ``AsyncMonty`` sized for ``limits``."""
    return {
        "min_processes": 1,
        "max_processes": limits.max_scopes + 3,
        "checkout_timeout": limits.request_timeout,
        "request_timeout": limits.request_timeout,
    }


def create_pool(limits: CodeModeLimits) -> AsyncMonty:
    """A pool for ``limits``, not yet entered (``await pool.__aenter__()`` spawns workers)."""
    return AsyncMonty(**pool_options(limits))


def checkout_limits(limits: CodeModeLimits) -> ResourceLimits:
    """The ``limits=`` of every checkout."""
    return {
        "max_feed_duration_secs": float(limits.max_feed_duration),
        "max_memory": int(limits.max_memory),
        "max_suspensions": UNBOUNDED_SUSPENSIONS,
    }


async def new_checkout(pool: AsyncMonty, limits: CodeModeLimits) -> AsyncMontySession:
    """A scope's checkout of ``pool``, entered (bounded by the pool's ``checkout_timeout``)."""
    session = pool.checkout(limits=checkout_limits(limits), os_policy=CHECKOUT_OS_POLICY)
    await session.__aenter__()
    return session


async def close_pool(pool: AsyncMonty) -> None:
    """Stop the pool's workers, then let the event loop breathe before exit."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await pool.__aexit__(None, None, None)
    finally:
        await asyncio.sleep(SHUTDOWN_BREATH)
