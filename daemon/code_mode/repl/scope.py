"""REPL scopes: one Monty checkout per conversation thread, checked out on first use.

``ScopeState`` is the REPL itself (the checkout, its lock, why it is empty);
the executor (:mod:`daemon.code_mode.executor`) keeps them in an LRU keyed by
:class:`~daemon.tools.ThreadKey` (channel and thread id) and hands out ``ThreadScope`` handles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from pydantic_monty import AsyncMonty, AsyncMontySession

from daemon.code_mode.lazy import snapshot_wrappers_lookup, snapshot_wrappers_source
from daemon.code_mode.repl.note import ScopeVariables
from daemon.code_mode.sandbox import CLOSE_TIMEOUT, new_checkout
from daemon.limits import CodeModeLimits

if TYPE_CHECKING:
    from daemon.code_mode.repl.store import StoredScopeDump
    from daemon.tools import ThreadKey

__all__ = ["Ahead", "ScopeState"]

# (pool, limits, the scope's lock, whether the scope will load nothing) -> a checkout or None
Ahead = Callable[[AsyncMonty, CodeModeLimits, asyncio.Lock, bool], AsyncMontySession | None]

log = structlog.get_logger("asyncai.code_mode")


class ScopeState:
    """One REPL: a checkout that persists variables across snippets.

    ``lock`` is held while a snippet runs (so the LRU never evicts it, and
    two calls on one thread take turns). ``reset_reason`` says why the REPL
    was last emptied: ``"evicted"`` (set on the new scope of an evicted
    thread), ``"restart"``, ``"reset"`` (a crash or a blown limit), or None
    when it never was. ``note`` belongs to the variables-note hook.

    For the stored REPL (issue 14, :mod:`daemon.code_mode.repl.persistence`):
    ``dirty`` says the store no longer holds this REPL (a snippet ran in it,
    or it was emptied by ``restart`` or a reset, since it was last stored or
    loaded); ``restore`` says the next checkout loads the stored dump (a
    thread scope that was never live here; cleared once tried, and by
    ``restart``, a reset or a resumed pause); ``evicted`` says the thread's
    previous scope was evicted, so an empty store means its REPL was lost;
    ``notices`` are lines for the next note, said once. ``held`` says the
    REPL lives in a paused snippet's snapshot, which the next checkout loads.
    ``direct`` says every snippet this REPL ran was eligible for Monty's own
    host-call path (:mod:`daemon.code_mode.sandbox.direct`): set by a new empty REPL
    or a stored one that says so, cleared by an ineligible snippet.
    A checkout that will load nothing (neither ``restore`` nor ``held``) may
    be a warm spare (:mod:`daemon.code_mode.repl.fresh`). ``fetched`` is the dump
    read to know whether there is one, kept for the load that follows.
    """

    def __init__(self, key: ThreadKey | None):
        self.key = key
        self.lock = asyncio.Lock()
        self.session: AsyncMontySession | None = None
        self.reset_reason: str | None = None
        self.note: ScopeVariables | None = None
        self.dirty = False
        self.restore = key is not None
        self.evicted = False
        self.held = False
        self.fetched: StoredScopeDump | None = None
        self.notices: list[str] = []
        # every snippet of this REPL could take Monty's own host-call path (direct.py),
        # and whether the REPL still binds lazy.DIRECT_MARKER, which says so to a dump
        self.direct = False
        self.marked = False

    @property
    def thread_id(self) -> str | None:
        """The thread id of the scope's key (None: the private scope), for logs and the audit."""
        return self.key.thread_id if self.key is not None else None

    @property
    def untouched(self) -> bool:
        """Whether this scope never held a REPL and has nothing to say: no checkout, no
        snapshot, nothing the store lacks, no reason it was emptied, no note or notices,
        and no evicted predecessor. A run that calls no code leaves its thread's scope
        so (the scope is touched when the run starts); evicting it has nothing to store,
        close or tell, and the thread's next scope starts as this one did."""
        return (
            self.session is None
            and not (self.dirty or self.held or self.evicted or self.notices)
            and self.reset_reason is None
            and self.note is None
            and self.fetched is None
        )

    @property
    def running(self) -> bool:
        """Whether a snippet is running (or waiting to run) in this scope."""
        return self.lock.locked()

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id while a checkout is held (diagnostics, tests)."""
        return self.session.worker_pid if self.session is not None else None

    async def checkout(
        self,
        pool: AsyncMonty,
        limits: CodeModeLimits,
        ahead: Ahead | None = None,
    ) -> tuple[AsyncMontySession, bool]:
        """The live session, checking one out when there is none; and whether it is new.

        ``ahead`` (:meth:`FreshScopes.ahead <daemon.code_mode.repl.fresh.FreshScopes.ahead>`)
        is told before a new checkout, and may give one made ahead instead.
        """
        if self.session is not None:
            return self.session, False
        blank, self.held = not (self.restore or self.held), False
        session = ahead(pool, limits, self.lock, blank) if ahead is not None else None
        if session is None:
            session = await new_checkout(pool, limits)
        self.session = session
        return session, True

    async def discard(self, reason: str | None) -> None:
        """Close the checkout (the worker goes back to the pool, or is replaced).

        ``reason`` None: the REPL lives on in a paused snippet's snapshot
        (issue 13), so ``reset_reason`` and ``note`` stay as they are, and
        the store has nothing to do with it (not ``dirty``). ``"restart"``
        and ``"reset"`` empty the REPL for good: the stored dump is stale
        (``dirty``) and is not loaded.
        """
        if reason is None:
            self.dirty, self.held = False, True
        elif reason in ("restart", "reset"):
            self.dirty, self.restore = True, False
        session, self.session = self.session, None
        if reason is not None:
            self.note = None
        if session is None:
            return
        if reason is not None:
            self.reset_reason = reason
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await session.__aexit__(None, None, None)
        except Exception as exc:
            # the checkout is gone either way; the pool replaces a dead worker
            log.warning("code_mode.checkout_close_failed", thread=self.key, error=repr(exc))

    async def leave_direct(self, tools: tuple[str, ...]) -> None:
        """A snippet not eligible for the direct path is next: this REPL leaves it for good.

        Its tool wrappers become the snapshot path's (``tools``: the catalog's
        Python names; :mod:`daemon.code_mode.lazy`), and the marker says so to
        a dump. A failure is logged: the snippet still runs, though a call it
        never awaits would not be named (the marker is then set before the dump).
        """
        self.direct = False
        if not self.marked or self.session is None:
            return
        try:
            await self.session.feed_run(
                snapshot_wrappers_source(tools),
                external_lookup=snapshot_wrappers_lookup(tools),
                print_callback=lambda _stream, _text: None,
                os=_deny_os,
            )
        except Exception as exc:
            log.warning("code_mode.leave_direct_failed", thread=self.key, error=repr(exc))
            return
        self.marked = False

    async def probe(self, code: str) -> Any:
        """Run a tool-free snippet in this REPL and return its value (for hooks).

        Every OS call in it fails at once (a snippet's function the probe
        calls may try to sleep or read a file). Raises
        ``pydantic_monty.MontyError`` when it fails, and RuntimeError when the
        scope holds no checkout.
        """
        if self.session is None:
            raise RuntimeError("the scope has no checkout")
        return await self.session.feed_run(
            code, print_callback=lambda _stream, _text: None, os=_deny_os
        )


def _deny_os(*, name: str, **_: Any) -> None:
    """The probe's ``os=`` handler: no file, clock wait or environment (a sleep would stall it)."""
    raise PermissionError(f"{name} is not available while asyncai inspects the REPL")
