"""The thread scopes of one executor: an LRU of ``max_scopes`` REPLs, evicted and stored.

:class:`ScopeTable` holds a :class:`~daemon.code_mode.repl.scope.ScopeState` per
thread, keyed by :class:`~daemon.tools.ThreadKey` (its channel and thread id:
a thread id alone would let one channel's prompt reach another's REPL), most
recently used last. A new scope may push the least recently used idle one
out; a scope with a snippet running is never evicted (the table overshoots
until it ends). An evicted scope's REPL is
stored, when there is a store (issue 14, :mod:`daemon.code_mode.repl.persistence`),
before the executor's next checkout (:meth:`ScopeTable.close_evicted`), and
its checkout is closed in the background from then on (issue 17); the
thread's next scope then loads it. A scope that never held a REPL (its
thread's runs called no code: ``ScopeState.untouched``) is dropped with no
more: there is nothing to store or close, and nothing was lost.

Without a store, evicted threads are remembered (a bounded number) so the
thread's next note can say its REPL is gone.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import structlog
from pydantic_monty import AsyncMontySession

from daemon.code_mode.repl.persistence import LoadResult, ScopePersistence
from daemon.code_mode.repl.scope import ScopeState
from daemon.limits import CodeModeLimits
from daemon.tools import ThreadKey

__all__ = ["ScopeTable"]

log = structlog.get_logger("asyncai.code_mode")

# Threads whose scope was evicted, remembered so the next run can say the
# REPL is empty; bounded because threads are unbounded over a daemon's life.
_EVICTED_MEMORY = 1024


class ScopeTable:
    """The LRU of thread scopes, and the stored REPLs behind it (``persistence`` None: none)."""

    def __init__(self, limits: CodeModeLimits, persistence: ScopePersistence | None):
        self._limits = limits
        self.persistence = persistence
        self._scopes: OrderedDict[ThreadKey, ScopeState] = OrderedDict()
        self._to_close: list[ScopeState] = []
        self._evicting: dict[ThreadKey, ScopeState] = {}  # victims until their REPL is stored
        self._closing: set[asyncio.Task[None]] = set()  # evicted checkouts being closed
        self._evicted: OrderedDict[ThreadKey, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._scopes)

    def get(self, thread: ThreadKey) -> ScopeState | None:
        """The thread's scope if the table holds it, without touching it."""
        return self._scopes.get(thread)

    def lost(self, thread: ThreadKey) -> bool:
        """Whether the thread's REPL was evicted and not stored (its next run starts empty)."""
        return thread in self._evicted and self.persistence is None

    def touch(self, thread: ThreadKey) -> ScopeState:
        """The thread's scope, made the most recently used; a new one may evict another."""
        state = self._scopes.get(thread)
        if state is None:
            state = ScopeState(thread)
            state.restore = self.persistence is not None  # nothing is stored without a store
            if thread in self._evicted:
                del self._evicted[thread]
                if self.persistence is None:
                    state.reset_reason = "evicted"
                else:
                    state.evicted = True  # "evicted" only if nothing was stored
            self._scopes[thread] = state
        self._scopes.move_to_end(thread)
        self.evict_overflow(keep=state)
        return state

    def evict_overflow(self, keep: ScopeState | None = None) -> None:
        """Evict idle scopes, least recently used first, down to ``max_scopes``."""
        while len(self._scopes) > self._limits.max_scopes:
            victim = next(
                (s for s in self._scopes.values() if s is not keep and not s.running), None
            )
            if victim is None:
                return  # every other scope is running: overshoot until one ends
            assert victim.key is not None
            del self._scopes[victim.key]
            if victim.untouched:
                continue  # it holds no REPL: nothing to store, close, remember or log
            self._to_close.append(victim)  # stored and closed before the next checkout
            self._evicting[victim.key] = victim
            self._evicted[victim.key] = None
            while len(self._evicted) > _EVICTED_MEMORY:
                self._evicted.popitem(last=False)
            log.info(
                "code_mode.scope_evicted", channel=victim.key.channel, thread=victim.key.thread_id
            )

    async def close_evicted(self) -> None:
        """Store (with a store) the REPLs of evicted scopes, and start closing their checkouts.

        The close runs in the background (:meth:`drain` waits for it): it is
        pool work, about a third of a new scope's first run, and nothing needs
        it done before the new scope's own checkout (the pool has room, and a
        checkout that finds none waits for a worker to come back).
        """
        while self._to_close:
            victim = self._to_close.pop()
            # locked with no await since the pop: settle() waits for it to be stored
            async with victim.lock:
                try:
                    if self.persistence is not None:
                        await self.persistence.save(victim)
                    task = asyncio.create_task(victim.discard("evicted"), name="code_mode:evicted")
                    self._closing.add(task)
                    task.add_done_callback(self._closing.discard)
                finally:
                    if victim.key is not None and self._evicting.get(victim.key) is victim:
                        del self._evicting[victim.key]

    async def drain(self) -> None:
        """Wait until the evicted scopes' checkouts are closed."""
        while self._closing:
            await asyncio.wait(list(self._closing))

    async def settle(self, thread: ThreadKey) -> None:
        """Return once the thread's evicted scope, if any, is stored and closed."""
        await self.close_evicted()
        victim = self._evicting.get(thread)
        if victim is not None:
            async with victim.lock:  # another task is storing it
                pass

    async def restore(self, state: ScopeState, session: AsyncMontySession) -> LoadResult:
        """Load the stored REPL into ``session``, ``state``'s fresh checkout, if the scope may.

        Only once per scope, and never for one emptied for good or resumed
        from a pause (``state.restore``); waits for the thread's evicted
        scope to be stored first. ``"empty"`` when nothing was loaded.
        """
        if self.persistence is None or not state.restore or state.key is None:
            return "empty"
        state.restore = False
        await self.settle(state.key)
        return await self.persistence.load(state, session)

    async def may_load(self, state: ScopeState) -> bool:
        """Whether ``state``'s first checkout may load a stored REPL (see :meth:`restore`).

        When the store holds none, the scope is settled as :meth:`restore`
        would leave it (``state.restore`` off; an evicted thread's note says
        its REPL is gone) without a checkout: a run that calls no tool never
        takes a worker (issue 17). True when the store could not say: the
        load proper tells why.
        """
        if self.persistence is None or not state.restore or state.key is None:
            return False
        await self.settle(state.key)
        try:
            stored = await self.persistence.store.load(state.key)
        except Exception:
            return True  # restore() reads it again, and its notice says why it cannot load
        if stored is not None:
            state.fetched = stored  # for the load that follows: not read twice
            return True
        state.restore = False
        if state.evicted:
            state.reset_reason = "evicted"
        return False

    async def checkpoint(self, thread: ThreadKey) -> None:
        """Store the thread's REPL if the table holds it, it is idle and a snippet changed it."""
        state = self._scopes.get(thread)
        if self.persistence is None or state is None or state.running or not state.dirty:
            return
        async with state.lock:  # not running: taken at once, so it cannot be evicted meanwhile
            await self.persistence.save(state)

    async def checkpoint_all(self) -> None:
        """:meth:`checkpoint` every scope, store the evicted ones not yet closed, and
        wait for their checkouts to close (so it may come before closing the pool)."""
        if self.persistence is not None:
            for thread in list(self._scopes):
                await self.checkpoint(thread)
            await self.close_evicted()
        await self.drain()

    async def reset(self, thread: ThreadKey) -> None:
        """Empty the thread's REPL for good: close its checkout, drop its stored dump."""
        state = self._scopes.get(thread)
        if state is not None:
            async with state.lock:
                await state.discard("restart")
                state.notices = []
        self._evicted.pop(thread, None)
        if self.persistence is None:
            return
        await self.settle(thread)
        try:
            await self.persistence.store.drop(thread)
        except Exception as exc:
            # a live scope still starts empty (restore is off); one not live may load it
            log.warning(
                "code_mode.scope_drop_failed",
                channel=thread.channel,
                thread=thread.thread_id,
                error=repr(exc),
            )
        else:
            if state is not None:
                state.dirty = False

    async def forget(self, thread: ThreadKey) -> None:
        """Drop the thread's REPL here, live or evicted, without storing it: the stored
        one is newer (another daemon of a cluster ran the thread meanwhile), and the
        thread's next scope loads that. Waits for a snippet running in it to end."""
        states = [s for s in (self._scopes.get(thread), self._evicting.get(thread)) if s]
        self._to_close = [s for s in self._to_close if s.key != thread]
        self._evicting.pop(thread, None)
        for state in states:
            async with state.lock:
                if self._scopes.get(thread) is state:
                    del self._scopes[thread]
                state.dirty = False  # never stored from here
                await state.discard("evicted")

    def take_all(self) -> list[ScopeState]:
        """Every scope, live or evicted, removed from the table (to close them)."""
        states = [*self._scopes.values(), *self._to_close]
        self._scopes.clear()
        self._to_close.clear()
        self._evicting.clear()
        return states
