"""How long to wait before reconnecting (or retrying a rate-limited publish): :data:`Backoff`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

__all__ = ["Backoff", "exponential_backoff"]

Backoff = Callable[[int], Awaitable[bool]]
"""Awaited before reconnect attempt ``n`` (1, 2, …) and before retrying a
rate-limited publish: sleeps as long as it likes, returns False to give up."""


def exponential_backoff(
    *,
    initial: float = 0.2,
    maximum: float = 10.0,
    factor: float = 2.0,
    attempts: int | None = None,
    jitter: float = 0.2,
) -> Backoff:
    """A :data:`Backoff` that sleeps ``initial * factor**(n-1)`` (capped, with jitter).

    ``attempts`` bounds the attempts in a row; ``None`` retries forever, which
    suits a daemon whose hub may restart.
    """

    async def backoff(attempt: int) -> bool:
        if attempts is not None and attempt > attempts:
            return False
        delay = min(maximum, initial * factor ** (attempt - 1))
        await asyncio.sleep(delay * (1 + random.uniform(0, jitter)))
        return True

    return backoff
