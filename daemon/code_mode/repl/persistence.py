"""Stored REPLs (issue 14): a thread's scope dumped into a ``ScopeStore``.

:class:`ScopePersistence` does the two transfers, and the executor
(:mod:`daemon.code_mode.executor`) decides when, holding the scope's lock:

- :meth:`ScopePersistence.save`: when the store no longer holds the REPL
  (``ScopeState.dirty``): ``await session.dump()`` and, within
  ``limits.max_scope_dump``, ``store.save()``. A larger REPL is not stored
  (the stale dump is dropped, so a restart cannot bring back an older
  state) and the next note says so; a REPL emptied by ``restart`` or a
  reset drops its stored dump. A failure is logged, never raised: the
  worst case is a REPL that does not survive a restart.
- :meth:`ScopePersistence.load`: into a fresh checkout, before anything
  else (Monty loads only into a fresh session). The dump already holds the
  helpers and the operator's preamble as they were when it was saved, so
  the preamble is not run again. Whether the REPL may take the direct path
  (:mod:`~daemon.code_mode.sandbox.direct`) is read from it: a scope that left it
  sets :data:`~daemon.code_mode.lazy.DIRECT_MARKER` False before its dump. The
  names bound in the restored REPL (``list(locals())``, less the helpers
  and the preamble's own names) seed the variables note, which says the REPL
  was restored and when it was saved. A dump the store rejects (``ScopeRejected``: its MAC, another
  Monty version, its size) or that Monty cannot load leaves the REPL empty,
  and the note says why in one line.

Monty does not authenticate dumps: only the store's bytes are loaded, and
the store checks their MAC.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import structlog
from pydantic_monty import AsyncMontySession

from daemon.code_mode.bindings import module_bindings
from daemon.code_mode.lazy import DIRECT_MARKER, UNMARK_SOURCE, scope_source
from daemon.code_mode.repl import hooks
from daemon.code_mode.repl.note import (
    ScopeVariables,
    format_size,
    not_restored_note,
    not_saved_note,
    one_line,
    restored_note,
)
from daemon.code_mode.repl.scope import ScopeState
from daemon.code_mode.repl.store import ScopeStore
from daemon.crashpoints import crash_point
from daemon.errors import ScopeRejected
from daemon.limits import CodeModeLimits

__all__ = ["LoadResult", "ScopePersistence"]

log = structlog.get_logger("asyncai.code_mode")

LoadResult = Literal["restored", "empty", "spoiled"]
"""What :meth:`ScopePersistence.load` left: the REPL restored; the session
untouched (nothing stored, or a dump not to load); or a session that a
failed load may have changed, to be discarded for a fresh one."""

# A tool-free snippet whose value is the names bound at module level.
_NAMES_PROBE = "list(locals())"


class ScopePersistence:
    """Dumps thread scopes into ``store`` and loads them back; the caller holds the scope's lock."""

    def __init__(self, store: ScopeStore, limits: CodeModeLimits):
        self.store = store
        self._limits = limits
        self.tools: tuple[str, ...] = ()  # the catalog's Python names (their scope wrappers)

    async def save(self, state: ScopeState) -> bool:
        """Make the store hold ``state``'s REPL; whether it now does (False: logged, or too large).

        Nothing to do unless ``state.dirty``. The scope must not be running.
        """
        key = state.key
        if key is None or not state.dirty:
            return True
        session = state.session
        if session is None:
            # emptied by restart or a reset (a paused scope is not dirty): the dump is stale
            return await self.drop(state)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._limits.request_timeout):
                if state.marked and not state.direct:
                    await session.feed_run(UNMARK_SOURCE)
                    state.marked = False
                data = await session.dump()
        except Exception as exc:
            # a dump that fails costs only the REPL's survival; the next run tries again
            log.warning("code_mode.scope_dump_failed", thread=key, error=repr(exc))
            return False
        limit = self._limits.max_scope_dump
        if len(data) > limit:
            state.notices = [n for n in state.notices if "max_scope_dump" not in n]
            state.notices.append(not_saved_note(len(data), limit))
            log.warning("code_mode.scope_too_large", thread=key, bytes=len(data), limit=limit)
            await self.drop(state)  # an older, smaller REPL must not come back after a restart
            return False
        try:
            await self.store.save(key, data)
        except Exception as exc:
            # never raised: the run is over, and its REPL is still live here
            log.warning("code_mode.scope_save_failed", thread=key, error=repr(exc))
            return False
        state.dirty = False
        log.info(
            "code_mode.scope_saved",
            thread=key,
            bytes=len(data),
            ms=round((time.monotonic() - started) * 1000, 1),
        )
        return True

    async def drop(self, state: ScopeState) -> bool:
        """Forget ``state``'s stored dump; whether that worked (a failure is logged)."""
        assert state.key is not None
        try:
            await self.store.drop(state.key)
        except Exception as exc:
            log.warning("code_mode.scope_drop_failed", thread=state.key, error=repr(exc))
            return False
        state.dirty = False
        return True

    async def load(self, state: ScopeState, session: AsyncMontySession) -> LoadResult:
        """Load ``state``'s stored REPL into ``session``, a fresh checkout held by ``state``.

        On success the REPL is the stored one (helpers and preamble
        included), ``state.note`` lists its names and a notice gives the
        time of the save. Otherwise a notice says why, unless nothing was
        stored (then an evicted thread's note says its REPL is gone).
        """
        key = state.key
        assert key is not None
        stored, state.fetched = state.fetched, None
        try:
            if stored is None:
                stored = await self.store.load(key)
        except ScopeRejected as exc:
            return self._not_restored(state, exc.reason, "empty")
        except Exception as exc:
            log.exception("code_mode.scope_load_failed", thread=key)
            return self._not_restored(state, f"the store could not be read ({exc!r})", "empty")
        if stored is None:
            if state.evicted:
                state.reset_reason = "evicted"
            return "empty"
        limit = self._limits.max_scope_dump
        if len(stored.data) > limit:
            size = format_size(len(stored.data))
            reason = f"it is {size}, over code_mode.max_scope_dump ({format_size(limit)})"
            return self._not_restored(state, reason, "empty")
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._limits.request_timeout):
                await session.load_session(stored.data)
        except Exception as exc:
            # MontyError for bytes Monty cannot read; the session may be half-loaded
            return self._not_restored(state, _exception_line(exc), "spoiled")
        state.dirty = False
        state.reset_reason = None
        state.notices.append(restored_note(stored.saved_at))
        state.note = await self._variables(state)
        log.info(
            "code_mode.scope_restored",
            thread=key,
            bytes=len(stored.data),
            saved_at=stored.saved_at,
            ms=round((time.monotonic() - started) * 1000, 1),
        )
        crash_point("scope_restored")
        return "restored"

    def _not_restored(self, state: ScopeState, reason: str, result: LoadResult) -> LoadResult:
        log.warning("code_mode.scope_not_restored", thread=state.key, reason=reason)
        state.notices.append(not_restored_note(reason))
        # the store holds a REPL that is not this one: the next checkpoint replaces it
        state.dirty = True
        return result

    async def _variables(self, state: ScopeState) -> ScopeVariables:
        """What the note lists of a restored REPL, probed (a failure costs only the note)."""
        variables = ScopeVariables()
        state.direct = state.marked = False  # unless the REPL says otherwise
        try:
            async with asyncio.timeout(self._limits.request_timeout):
                names = await state.probe(_NAMES_PROBE)
                if DIRECT_MARKER in _strings(names):
                    state.direct = state.marked = await state.probe(DIRECT_MARKER) is True
                source = scope_source(hooks.scope_preamble(self._limits), self.tools)
                preamble = {b.name for b in module_bindings(source)}
                variables.remember(
                    n for n in _strings(names) if n not in preamble and not n.startswith("__")
                )
                probe = variables.probe()
                if probe is not None:
                    variables.update(await state.probe(probe))
        except Exception:
            log.exception("code_mode.scope_names_failed", thread=state.key)
        return variables


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _exception_line(exc: BaseException) -> str:
    """``RuntimeError: not a monty dump``-like text of a failed load, on one line."""
    display = getattr(exc, "display", None)
    text = display("type-msg") if callable(display) else f"{type(exc).__name__}: {exc}"
    return one_line(str(text))
