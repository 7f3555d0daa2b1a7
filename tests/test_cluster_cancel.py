"""A cluster loop stops at a cancel that a library swallowed (``honour_cancel``), no I/O."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from daemon.cluster.errors import honour_cancel


async def test_a_loop_stops_at_a_cancel_a_library_swallowed() -> None:
    """Python 3.11's wait_for (in nats-py's requests) can return instead of raising when
    the task is cancelled; the loop's next round raises the cancel it lost."""
    rounds = 0

    async def swallowing() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # what wait_for's race does on 3.11
            await asyncio.sleep(10)

    async def loop() -> None:
        nonlocal rounds
        while True:
            honour_cancel()
            rounds += 1
            await swallowing()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # in its first round
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(2):
            await task
    assert rounds == 1
    assert task.cancelled()
