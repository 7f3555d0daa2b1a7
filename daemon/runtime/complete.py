"""``complete``: work that a cancellation must not cut in half.

Only the model run may be cancelled by ``!stop`` or the shutdown grace;
publishing the reply and recording the run (``finish_run``) run to their end,
and the cancellation is passed on after them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import structlog

__all__ = ["cancel_until_done", "complete"]

log = structlog.get_logger("asyncai.runtime")

_T = TypeVar("_T")


async def complete(work: Awaitable[_T]) -> _T:
    """Run ``work`` to its end even when the caller is cancelled meanwhile, then pass
    that cancellation on (the work's own error, if it failed then, is logged).

    For what must not be cut in half by ``!stop`` or the shutdown grace: the
    reply and the run's record. Every such ``work`` is bounded on its own.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True  # the caller was cancelled; the work goes on
        except BaseException:
            if not cancelled:
                raise
    if cancelled:
        if not task.cancelled() and (failure := task.exception()) is not None:
            log.error("runtime.completion_failed", error=f"{type(failure).__name__}: {failure}")
        raise asyncio.CancelledError
    return task.result()


async def cancel_until_done(task: asyncio.Future[Any], *, every: float = 0.1) -> None:
    """Cancel ``task`` and wait for it to end, cancelling it again every ``every``
    seconds while it runs on; its outcome is not raised.

    A library that swallows a cancellation leaves a task running after one
    ``cancel()``: nats-py's publish catches ``CancelledError`` and passes, so a
    cluster daemon's intake, cancelled while it published, went back to reading
    the channel and the shutdown waited for it forever.
    """
    task.cancel()
    while not task.done():
        await asyncio.wait({task}, timeout=every)
        task.cancel()
    if not task.cancelled():
        task.exception()  # retrieved: its failure was the intake's to log
