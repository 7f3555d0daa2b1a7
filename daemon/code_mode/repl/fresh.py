"""New scopes start from one stored copy of the preamble's REPL, kept warm (issue 17).

Every new scope starts with the helpers and the tools' wrappers
(:func:`daemon.code_mode.repl.hooks.scope_preamble`, :mod:`daemon.code_mode.lazy`):
a feed of a few hundred lines, about 0.7 ms on a 2-core machine, against
0.3 ms to load the session dumped after the first such feed (same REPL,
same feed count, so tracebacks name the same ``<python-input-N>``). The
first new scope feeds the preamble and keeps the dump; the next ones load it.

Loading still took a new scope's first ``run_code`` to about three times a
bare checkout and feed, so one checkout is made ahead: a *spare*, checked out
with that REPL loaded. A scope that will load nothing else (no stored REPL to
try, no paused snapshot: ``ScopeState.held``) takes it as its checkout
(:meth:`FreshScopes.ahead`), and the next spare is made once its run has
ended. A scope that first asked the store in vain takes it in place of its
own fresh checkout (:meth:`FreshScopes.prepare`), which is loaded in the
background to be the next spare. There is at most one spare; it holds a
worker of the pool, which has room for it
(:func:`daemon.code_mode.sandbox.pool.pool_options`). :meth:`FreshScopes.aclose`
gives it back.

Only without an operator's preamble (``limits.preamble``): its code may call
tools or read the clock, and must run in each scope. A dump that fails to
load is dropped, and that scope feeds the preamble; a spare that fails is
dropped, and the next new scope checks out as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from pydantic_monty import AsyncMonty, AsyncMontySession, MontyError

from daemon.code_mode.sandbox import CLOSE_TIMEOUT, new_checkout
from daemon.limits import CodeModeLimits

if TYPE_CHECKING:
    from daemon.code_mode.repl.scope import ScopeState
    from daemon.code_mode.sandbox import SnippetOutcome

__all__ = ["FreshScopes"]

log = structlog.get_logger("asyncai.code_mode")


async def _close(session: AsyncMontySession) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await session.__aexit__(None, None, None)
    except Exception as exc:
        # the checkout is gone either way; the pool replaces a dead worker
        log.warning("code_mode.spare_close_failed", error=repr(exc))


class FreshScopes:
    """Prepares new checkouts: the preamble fed once, its REPL loaded after that, one kept warm."""

    def __init__(self, operator_preamble: str):
        self._enabled = not operator_preamble.strip()
        self._blob: bytes | None = None
        self._spare: AsyncMontySession | None = None  # checked out, the REPL loaded
        self._filling: asyncio.Task[None] | None = None
        self._loading: AsyncMontySession | None = None  # the spare being made
        self._handed: AsyncMontySession | None = None  # the spare a checkout took
        self._closed = False

    def ahead(
        self, pool: AsyncMonty, limits: CodeModeLimits, lock: asyncio.Lock, blank: bool
    ) -> AsyncMontySession | None:
        """A scope is about to check out: the spare when it will load nothing (``blank``).

        Makes the next spare, once the run holding ``lock`` has ended, when
        there is none (the spare was taken, or was never made).
        """
        spare = self._spare
        taken = blank and spare is not None and spare.worker_pid is not None and self._idle()
        if taken:
            self._spare, self._handed = None, spare
        if self._spare is None and self._blob is not None and self._idle():
            self._filling = asyncio.create_task(
                self._load(self._blob, pool, limits, after=lock), name="code_mode:spare"
            )
        return spare if taken else None

    def _idle(self) -> bool:
        """Whether a spare may be made now (one at a time, none after :meth:`aclose`)."""
        return (
            self._enabled and not self._closed and (self._filling is None or self._filling.done())
        )

    async def _load(
        self,
        blob: bytes,
        pool: AsyncMonty | None = None,
        limits: CodeModeLimits | None = None,
        *,
        after: asyncio.Lock | None = None,
    ) -> None:
        """Load ``blob`` into ``self._loading`` or a new checkout of ``pool``: the next spare.

        ``self._loading`` holds the checkout meanwhile, so :meth:`aclose` can
        give it back whenever the task is cancelled. With ``after`` (a scope's
        lock), the load waits for the run holding it to end.
        """
        if after is not None:
            async with after:
                pass
        try:
            session = self._loading
            if session is None:
                assert pool is not None
                assert limits is not None
                session = self._loading = await new_checkout(pool, limits)
            await session.load_session(blob)
        except (TimeoutError, MontyError, RuntimeError, OSError) as exc:
            # a failure only costs the head start: the next scope loads the dump itself
            log.warning("code_mode.spare_failed", error=repr(exc))
            await self._drop_loading()
            return
        self._loading = None
        if self._closed or self._spare is not None:
            await _close(session)
        else:
            self._spare = session

    async def _drop_loading(self) -> None:
        session, self._loading = self._loading, None
        if session is not None:
            await _close(session)

    async def prepare(
        self, state: ScopeState, feed: Callable[[], Awaitable[SnippetOutcome]]
    ) -> SnippetOutcome | None:
        """Give ``state`` the preamble's REPL; the feed's outcome, or None when loaded.

        ``state.session`` is a fresh checkout. With a spare ready, the spare
        takes its place, and the fresh checkout becomes the next spare once the
        dump is loaded into it, in the background after the run (which holds
        ``state.lock``). Else ``feed()`` runs the preamble in it, or the dump
        is loaded.
        """
        session = state.session
        assert session is not None
        if session is self._handed:
            self._handed = None
            return None  # the spare, taken at the checkout
        spare, blob = self._spare, self._blob
        if spare is not None and blob is not None and self._idle():
            self._spare = None
            if spare.worker_pid is not None:
                state.session = spare
                self._loading = session  # the fresh checkout: the next spare
                # once this scope's run has ended: its snippet gets the cores first
                self._filling = asyncio.create_task(
                    self._load(blob, after=state.lock), name="code_mode:spare"
                )
                return None
            await _close(spare)  # its worker died while it waited
        if self._blob is not None:
            try:
                await session.load_session(self._blob)
                return None
            except (MontyError, RuntimeError, OSError) as exc:
                # the dump came from this process; failing to load it means a broken worker
                log.warning("code_mode.fresh_scope_load_failed", error=repr(exc))
                self._blob = None
        outcome = await feed()
        if self._enabled and outcome.ok and self._blob is None:
            try:
                self._blob = await session.dump()
            except (MontyError, RuntimeError, OSError) as exc:
                log.warning("code_mode.fresh_scope_dump_failed", error=repr(exc))
        return outcome

    async def settle(self) -> bool:
        """Wait for the spare being made, if any; whether a spare is ready (tests, benchmarks)."""
        filling = self._filling
        if filling is not None:
            await asyncio.wait([filling])
        return self._spare is not None

    async def aclose(self) -> None:
        """Stop making spares and give the spare's worker back to the pool."""
        self._closed = True
        filling, self._filling = self._filling, None
        if filling is not None:
            filling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await filling
        await self._drop_loading()
        spare, self._spare, self._handed = self._spare, None, None
        if spare is not None:
            await _close(spare)
