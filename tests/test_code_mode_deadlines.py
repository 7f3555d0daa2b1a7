"""One timer for every nested call's tool_timeout (daemon/code_mode/sandbox/deadlines.py)."""

from __future__ import annotations

import asyncio

import pytest

from daemon.code_mode.sandbox.deadlines import Deadlines


async def _sleeper(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


async def test_each_call_expires_at_its_own_deadline_and_only_it():
    """Calls started at different times expire in order; a finished one is never cancelled."""
    deadlines = Deadlines(0.05)
    fast = asyncio.create_task(_sleeper(0.0))
    slow1 = asyncio.create_task(_sleeper(10))
    flags = {name: [False] for name in ("fast", "slow1", "slow2")}
    tokens = {"fast": deadlines.start(fast, flags["fast"])}
    tokens["slow1"] = deadlines.start(slow1, flags["slow1"])
    assert await fast == "done"
    deadlines.done(tokens["fast"])
    await asyncio.sleep(0.03)
    slow2 = asyncio.create_task(_sleeper(10))
    deadlines.start(slow2, flags["slow2"])
    await asyncio.sleep(0.035)  # past slow1's deadline (0.05), before slow2's (0.08)
    assert slow1.cancelled() or slow1.cancelling()
    assert not slow2.done()
    assert flags == {"fast": [False], "slow1": [True], "slow2": [False]}
    await asyncio.sleep(0.04)
    assert flags["slow2"] == [True]
    for task in (slow1, slow2):
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_call_done_before_its_deadline_leaves_nothing_to_cancel():
    deadlines = Deadlines(0.02)
    task = asyncio.create_task(_sleeper(10))
    flag = [False]
    token = deadlines.start(task, flag)
    deadlines.done(token)
    await asyncio.sleep(0.04)
    assert not task.done()
    assert flag == [False]
    task.cancel()
