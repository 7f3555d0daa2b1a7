"""The warm spare of new scopes (daemon/code_mode/repl/fresh.py, issue 17), on a real pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic_monty import AsyncMonty, MontyRuntimeError

from daemon.code_mode import CodeModeLimits
from daemon.code_mode.repl.fresh import FreshScopes
from daemon.code_mode.repl.scope import ScopeState
from daemon.code_mode.repl.scopes import ScopeTable
from daemon.code_mode.sandbox.outcome import SnippetOutcome
from daemon.tools import ThreadKey

TEST_LIMITS = {"max_feed_duration": 5.0, "max_wall": 20.0, "tool_timeout": 10.0}
LIMITS = CodeModeLimits(**TEST_LIMITS)


@pytest.fixture
async def fresh() -> AsyncIterator[FreshScopes]:
    """A FreshScopes without an operator's preamble, closed afterwards."""
    scopes = FreshScopes("")
    yield scopes
    await scopes.aclose()


async def open_scope(fresh: FreshScopes, pool: AsyncMonty, key: str) -> ScopeState:
    """What the executor does for a new scope: check out, then prepare (feed ``X = 41``)."""
    state = ScopeState(key)
    _, new = await state.checkout(pool, LIMITS, fresh.ahead)
    assert new

    async def feed() -> SnippetOutcome:
        assert state.session is not None
        await state.session.feed_run("X = 41")
        return SnippetOutcome()

    await fresh.prepare(state, feed)
    return state


async def test_a_new_scope_takes_the_spare_and_its_checkout_becomes_the_next(monty_pool, fresh):
    """The third scope runs in the spare made while the second opened; the third's own
    checkout is loaded in the background and is what the fourth scope gets."""
    states = [await open_scope(fresh, monty_pool, "a")]  # fed; its REPL is dumped
    states.append(await open_scope(fresh, monty_pool, "b"))  # loads the dump; a spare is made
    assert await fresh.settle()
    third = ScopeState("c")
    await third.checkout(monty_pool, LIMITS, fresh.ahead)
    own = third.session
    assert await fresh.prepare(third, feed=_never) is None
    assert third.session is not own  # the spare
    states.append(third)
    assert await fresh.settle()
    fourth = await open_scope(fresh, monty_pool, "d")
    assert fourth.session is own
    states.append(fourth)
    for state in states:
        assert state.session is not None
        # the same feed count as a fed scope: the first snippet is <python-input-1>
        with pytest.raises(MontyRuntimeError) as failed:
            await state.session.feed_run("1 / 0")
        assert '"<python-input-1>", line 1' in failed.value.display()
        assert await state.session.feed_run("X + 1") == 42
    pids = {state.worker_pid for state in states}
    assert None not in pids
    assert len(pids) == 4
    for state in states:
        await state.discard("closed")


async def test_closing_gives_the_spare_back(monty_pool, fresh):
    """aclose ends the spare's checkout, and no spare is made after it."""
    first = await open_scope(fresh, monty_pool, "a")
    second = await open_scope(fresh, monty_pool, "b")
    assert await fresh.settle()
    third = ScopeState("c")
    await third.checkout(monty_pool, LIMITS, fresh.ahead)
    own = third.session
    assert own is not None
    await fresh.prepare(third, feed=_never)
    spare = third.session
    await fresh.aclose()  # cancels the load of `own` (or closes it, loaded)
    assert own.worker_pid is None
    assert fresh.ahead(monty_pool, LIMITS, asyncio.Lock(), True) is None
    assert not await fresh.settle()
    assert spare is not None
    assert await spare.feed_run("X") == 41  # the scope keeps what it was given
    for state in (first, second, third):
        await state.discard("closed")


async def test_an_operators_preamble_means_no_spare(monty_pool):
    """With an operator's preamble every scope feeds it: nothing is dumped or kept warm."""
    fresh = FreshScopes("PRE = 1")
    try:
        states = [await open_scope(fresh, monty_pool, k) for k in ("a", "b", "c")]
        assert not await fresh.settle()
        for state in states:
            await state.discard("closed")
    finally:
        await fresh.aclose()


async def _never() -> SnippetOutcome:
    raise AssertionError("a scope given the spare feeds nothing")


async def test_a_scope_that_loads_nothing_takes_the_spare_at_its_checkout(monty_pool, fresh):
    """Without a stored REPL to load, the checkout itself is the spare (no feed, no load);
    after a pause (the REPL is in the snapshot) the next checkout is a fresh one."""
    first = await open_scope(fresh, monty_pool, "a")
    second = await open_scope(fresh, monty_pool, "b")
    assert await fresh.settle()
    blank = ScopeState("c")
    blank.restore = False  # what a scope table without a store makes
    session, new = await blank.checkout(monty_pool, LIMITS, fresh.ahead)
    assert new
    assert await fresh.prepare(blank, feed=_never) is None
    assert blank.session is session
    assert await session.feed_run("X + 1") == 42
    assert await fresh.settle()  # the next spare, made once the scope's lock is free
    await blank.discard(None)  # paused: the next checkout loads the snapshot
    again, _ = await blank.checkout(monty_pool, LIMITS, fresh.ahead)
    with pytest.raises(MontyRuntimeError):
        await again.feed_run("X")  # an empty REPL, not the spare
    for state in (first, second, blank):
        await state.discard("closed")


async def test_an_evicted_checkout_is_closed_by_the_time_the_table_is_drained(monty_pool):
    """close_evicted only starts the close; drain (and checkpoint_all) waits for it."""
    table = ScopeTable(CodeModeLimits(max_scopes=1, **TEST_LIMITS), None)
    first = table.touch(ThreadKey("#c", "a"))
    assert not first.restore  # no store: nothing to load, so a spare may serve it
    session, _ = await first.checkout(monty_pool, LIMITS)
    table.touch(ThreadKey("#c", "b"))  # evicts "a"
    await table.close_evicted()
    await table.checkpoint_all()
    assert first.session is None
    assert session.worker_pid is None  # its checkout has ended
