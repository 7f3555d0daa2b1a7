"""``CodeModeToolExecutor``: one ``run_code`` tool whose Python runs on a Monty pool.

It wraps any inner :class:`~daemon.tools.ToolExecutor` and exposes only
``run_code``; the snippet calls the inner tools as ``async def`` functions.
Built synchronously, it starts lazily: the first call (or ``start()``)
starts the inner executor and the pool. It is the one place that orders a
call's steps (below) under the scope's lock and one ``max_wall``; the rooms it
calls (catalog, sandbox, repl) each do one step.

Scopes (spec A10, DESIGN.md): ``thread_scope(thread)`` returns the REPL of a
:class:`~daemon.tools.ThreadKey` (channel and thread id), one checkout each, in
an LRU of ``max_scopes``. The evicted scope's checkout is closed before the next
checkout; a scope with a snippet running is never evicted (the LRU overshoots).

One ``run_code`` call, in order:

1. ``restart`` (discard the checkout);
2. the pre-run checks (``hooks.vet_snippet``: the size limit, then
   ``hooks.check_snippet`` off the loop);
3. closing evicted checkouts;
4. a checkout if the scope has none, then ``hooks.scope_preamble`` with the
   tools' wrappers (:mod:`~daemon.code_mode.lazy`), fed or loaded
   (:mod:`~daemon.code_mode.repl.fresh`);
5. the snippet (:mod:`~daemon.code_mode.sandbox.engine`);
6. a reset if the snippet broke the checkout;
7. ``hooks.after_snippet``;
8. the result (:mod:`daemon.code_mode.report`: the return contract with
   ``hooks.error_hints``, and the audit).

Everything after the pre-run checks is bounded by ``max_wall``. The seams for
the helpers and the variables note are documented in
:mod:`daemon.code_mode.repl.hooks`.

Approvals (issue 13): with a ``gate``, a snippet may stop before calls that
need a person. The run then ends with a :class:`~daemon.approvals.Pause` in
``ToolCallOutput.pause``, its checkout goes back to the pool (the snapshot
holds the REPL), and no hook runs. :meth:`CodeModeToolExecutor.resume`
loads the snapshot into the scope's next checkout and drives the snippet on
under the same steps, from the checkout on, with ``max_wall`` counted anew.

Stored REPLs (issue 14): with ``scopes`` (a :class:`~daemon.code_mode.repl.ScopeStore`),
a thread's REPL is stored (:mod:`~daemon.code_mode.repl.persistence`), when a
snippet changed it, by ``checkpoint`` (after each run), ``checkpoint_all``
and ``aclose`` (shutdown), and before an evicted scope is closed
(:mod:`~daemon.code_mode.repl.scopes`). A scope never live here loads it into its
first checkout instead of the preamble (at its first snippet, or in
``restore_scope`` before a run's note, so the note tells of it). ``restart``, a
reset and ``reset()`` (``!reset``) empty the REPL for good: its dump is dropped.

A paused snippet and the stored REPL are one state, the snapshot: the pause gives
the checkout back and leaves the scope clean, so nothing is dumped over anything
while it waits (there is no live REPL); ``resume`` loads the snapshot, never the
stored dump; the resumed snippet makes the scope dirty, and the next checkpoint
stores the REPL it left. A run made while paused loads the stored REPL; ``resume`` replaces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import structlog
from pydantic_monty import AsyncMonty, AsyncMontySession, MontyError

from daemon.approvals import ApprovalGate, Decision, Pause
from daemon.code_mode.catalog import RUN_CODE, Catalog, ShapeBook, ShapeStore, python_name
from daemon.code_mode.contract import render_error, with_started_calls
from daemon.code_mode.errors import SandboxUnavailable
from daemon.code_mode.lazy import scope_source
from daemon.code_mode.offer import ToolOffer
from daemon.code_mode.repl import (
    FreshScopes,
    ScopePersistence,
    ScopeState,
    ScopeStore,
    ScopeTable,
    ThreadScope,
    hooks,
)
from daemon.code_mode.report import audit_json, render_outcome
from daemon.code_mode.sandbox import (
    NestedCalls,
    SnippetOutcome,
    SnippetRun,
    close_pool,
    create_pool,
    eligible,
    pool_options,
    render_paused,
    stamping_observer,
)
from daemon.limits import CodeModeLimits
from daemon.tools import (
    AuditObserver,
    BaseToolExecutor,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
    ToolExecutor,
)

__all__ = ["CodeModeToolExecutor"]


def _channel(state: ScopeState) -> str:
    """The channel of the scope's runs, whose learned shapes they see ("" outside any thread)."""
    return state.key.channel if state.key is not None else ""


log = structlog.get_logger("asyncai.code_mode")


class CodeModeToolExecutor(BaseToolExecutor):
    """Exposes exactly one tool, ``run_code``, over an inner executor's tools.

    ``pool``: an entered ``AsyncMonty`` to use instead of creating one (the
    executor then never closes it; size it with
    :func:`daemon.code_mode.sandbox.pool.pool_options`). ``observer``: called as
    ``observer(thread_id, entry)`` (sync or async) as each nested call ends,
    with its :class:`daemon.tools.AuditEntry`; ``thread_id`` is None for unscoped calls. An
    observer failure is logged and never breaks the snippet. ``gate``: the
    approval policy for calls of mutating tools (issue 13; None: every call
    runs); a call it sends to a person pauses the run (the result carries a
    :class:`~daemon.approvals.Pause`), and :meth:`resume` continues it.
    ``scopes``: where thread REPLs are stored across evictions and restarts
    (issue 14; None: a REPL lives only as long as its checkout). ``shapes``: where
    return shapes learned from results are kept (issue 19; None: only in memory).
    """

    def __init__(
        self,
        inner: ToolExecutor,
        limits: CodeModeLimits | None = None,
        *,
        pool: AsyncMonty | None = None,
        observer: AuditObserver | None = None,
        gate: ApprovalGate | None = None,
        scopes: ScopeStore | None = None,
        shapes: ShapeStore | None = None,
    ):
        self._inner = inner
        self._gate = gate
        self._limits = limits if limits is not None else CodeModeLimits()
        self._pool = pool
        self._owns_pool = pool is None
        self._observer = observer
        self._offer = ToolOffer(inner, self._limits, shapes)
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()
        persistence = ScopePersistence(scopes, self._limits) if scopes is not None else None
        self._scopes = ScopeTable(self._limits, persistence)
        self._private, self._fresh = ScopeState(None), FreshScopes(self._limits.preamble)

    @property
    def limits(self) -> CodeModeLimits:
        """The limits this executor enforces."""
        return self._limits

    @property
    def pool_processes(self) -> tuple[int, int] | None:
        """The Monty pool's workers, at least and at most (the console's Health page);
        None when the pool was handed in (its owner sized it)."""
        if not self._owns_pool:
            return None
        options = pool_options(self._limits)
        return int(options["min_processes"]), int(options["max_processes"])

    @property
    def hidden_functions(self) -> list[str]:
        """The sandbox names of the tools its inner executor hides (a channel's view of the
        daemon's tools, issue 29); none for an executor that hides nothing."""
        hidden: list[str] = getattr(self._inner, "hidden_tools", None) or []
        return [python_name(name) for name in hidden]

    @property
    def catalog(self) -> Catalog | None:
        """The inner tools behind ``run_code``: None until :meth:`definitions` or :meth:`start`.

        With the shapes learned outside any thread only: a run of a thread is shown
        :meth:`channel_catalog` of its channel (issue 29).
        The small-model harness reads it (:class:`~daemon.code_mode.catalog.CatalogSource`).
        """
        return self._offer.built()

    @property
    def shapes(self) -> ShapeBook:
        """The return shapes learned from results (issue 19), by channel."""
        return self._offer.shapes

    def channel_catalog(self, channel: str) -> Catalog | None:
        """:attr:`catalog` with the shapes learned in ``channel`` (issue 29)."""
        return self._offer.built(channel)

    def channel_definitions(self, channel: str) -> list[ToolDefinition]:
        """:meth:`definitions` with the shapes learned in ``channel`` (issue 29): what a
        thread of the channel is offered."""
        return [self._offer.definition(channel)]

    # -- the ToolExecutor interface ----------------------------------------

    def definitions(self) -> list[ToolDefinition]:
        """Exactly ``[run_code]``; its description lists the inner tools.

        Valid once the inner executor can list its tools (for MCP, once started).
        """
        return [self._offer.definition()]  # outside any thread: channel ""

    async def start(self) -> None:
        """Start the inner executor and the pool. Idempotent.

        Raises :class:`SandboxUnavailable` when the pool cannot start.
        """
        if self._closed:
            raise SandboxUnavailable("the code-mode executor is closed")
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            await self._inner.start()
            # the inner tools are final only now (MCP servers listed them on start)
            catalog = await self._offer.start()
            if (stored := self._scopes.persistence) is not None:  # its notes skip the wrappers
                stored.tools = tuple(catalog.entries)
            if self._pool is None:
                pool = create_pool(self._limits)
                try:
                    await pool.__aenter__()
                except (OSError, MontyError, RuntimeError) as exc:
                    raise SandboxUnavailable(f"the Monty worker pool did not start: {exc}") from exc
                self._pool = pool
            self._started = True
            log.info("code_mode.started", max_scopes=self._limits.max_scopes)

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Run ``run_code`` in this executor's private scope.

        The private scope is one REPL shared by every call made on the
        unscoped executor (outside any thread; the observer sees thread id
        None); such calls take turns. Conversations should use
        :meth:`thread_scope`.
        """
        await self.start()
        return await self._run(self._private, name, arguments)

    def thread_scope(self, thread: ThreadKey) -> ThreadScope:
        """The REPL scope of ``thread``, its channel and thread id (an LRU of ``max_scopes``).

        Synchronous: the scope checks out its worker on its first call. Touching a
        scope makes it the most recently used; a new one may evict the LRU idle one.
        """
        self._scopes.touch(thread)
        return ThreadScope(self, thread)

    @property
    def live_scopes(self) -> int:
        """How many thread scopes the LRU holds now (systemd's STATUS= line)."""
        return len(self._scopes)

    def scope_variables(self, thread: ThreadKey) -> list[tuple[str, str, str]] | None:
        """The variables of the thread's live REPL as the variables note's probe last
        described them (``("rows", "list[3]", "[1, 2, 3]")``: name, description,
        preview); None when no REPL of it is live here.
        Read-only: the note's notices stay for the next run."""
        state = self._scopes.get(thread)
        if state is None or state.session is None:
            return None
        return state.note.described if state.note is not None else []

    def context_note(self, thread: ThreadKey) -> str | None:
        """The note for the thread's next run (the variables note, from the hook).

        Says the scope's notices (restored, not restored, not saved) once.
        With a store, a thread not live here has no note: its next run may
        restore it (call :meth:`restore_scope` first to know).
        """
        state = self._scopes.get(thread)
        note = hooks.context_note(state, evicted=self._scopes.lost(thread))
        if state is not None:
            state.notices = []
        return note

    async def aclose(self) -> None:
        """Close every checkout, the pool if this executor created it, and the inner executor."""
        if self._closed:
            return
        if self._started:
            await self.checkpoint_all()
        self._closed = True
        for state in [*self._scopes.take_all(), self._private]:
            await state.discard("closed")
        await self._fresh.aclose()  # the spare's checkout
        pool, self._pool = self._pool, None
        if pool is not None and self._owns_pool and self._started:
            await close_pool(pool)
        await self._inner.aclose()

    # -- scopes --------------------------------------------------------------

    def worker_pid(self, thread: ThreadKey) -> int | None:
        """The pid of the worker holding ``thread``'s REPL, if checked out (diagnostics)."""
        state = self._scopes.get(thread)
        return state.worker_pid if state is not None else None

    async def call_in_scope(self, thread: ThreadKey, name: str, arguments: dict) -> ToolCallOutput:
        """Run ``name`` in ``thread``'s REPL (what :class:`ThreadScope` calls)."""
        await self.start()
        # no await between touching the scope and locking it: an idle scope is evictable
        return await self._run(self._scopes.touch(thread), name, arguments)

    # -- stored REPLs (issue 14) -----------------------------------------------

    async def restore_scope(self, thread: ThreadKey, *, new: bool = False) -> None:
        """Load the thread's stored REPL now, so the next :meth:`context_note` tells of it.

        Only for a scope never live here with a stored REPL (else nothing, and no
        worker taken); it restores as the first snippet would, keeping the checkout.
        ``new``: the thread has just begun (its run answers its root), so nothing is
        stored: the scope is settled empty without reading the store, now or at its
        first snippet. Raises :class:`SandboxUnavailable` as :meth:`call_tool` would.
        """
        if self._scopes.persistence is None:
            return
        await self.start()
        state = self._scopes.touch(thread)
        if new:
            async with state.lock:
                if state.session is None:
                    state.restore = False
            return
        async with state.lock:
            if state.session is not None or not await self._scopes.may_load(state):
                return
            nested = self._nested_calls(state)

            async def open_scope() -> SnippetOutcome:
                opened = await self._open(state, nested)
                return opened if isinstance(opened, SnippetOutcome) else SnippetOutcome()

            await self._bounded(state, open_scope)

    async def checkpoint(self, thread: ThreadKey) -> None:
        """Store the thread's REPL if a snippet changed it since it was last stored.

        Call after each run of the thread. Does nothing without a store, for
        a thread not live here, or while a snippet runs in it (that run's own
        checkpoint follows). A REPL over ``max_scope_dump`` is not stored and
        its next note says so; a failure is logged, never raised.
        """
        await self._scopes.checkpoint(thread)

    async def checkpoint_all(self) -> None:
        """:meth:`checkpoint` every thread's REPL, evicted ones not yet closed too (shutdown)."""
        await self._scopes.checkpoint_all()

    async def forget(self, thread: ThreadKey) -> None:
        """Drop the thread's REPL here, unstored: the stored one is newer (a cluster takeover)."""
        await self._scopes.forget(thread)

    async def reset(self, thread: ThreadKey) -> None:
        """``!reset``: close the thread's REPL and drop its stored dump: the next snippet
        starts empty, loading nothing. Waits for a running snippet; a failed drop is logged."""
        await self._scopes.reset(thread)
        log.info("code_mode.scope_reset", channel=thread.channel, thread=thread.thread_id)

    # -- one run_code call -----------------------------------------------------

    async def _run(self, state: ScopeState, name: str, arguments: dict) -> ToolCallOutput:
        """Run one call in ``state``; the executor is started and nothing awaits before the lock."""
        if name != RUN_CODE:
            return ToolCallOutput(
                f"unknown tool {name!r}: the only tool is {RUN_CODE}", True, audit=audit_json([])
            )
        code = arguments.get("code") if isinstance(arguments, dict) else None
        restart = arguments.get("restart", False) if isinstance(arguments, dict) else False
        if not isinstance(code, str):
            return ToolCallOutput(
                f"{RUN_CODE} needs a string argument `code` (the Python to run)",
                True,
                audit=audit_json([]),
            )
        async with state.lock:
            nested = self._nested_calls(state)
            output = await self._run_locked(state, code, restart is True, nested)
        # a scope that was running may have kept the LRU over its size
        self._scopes.evict_overflow()
        return output

    async def resume(
        self, thread: ThreadKey | None, pause: Pause, decisions: Mapping[int, Decision]
    ) -> ToolCallOutput:
        """Continue the snippet that ``pause`` stopped, in ``thread``'s scope (None: private).

        ``decisions`` maps each held call's ``call_id`` to its decision; see
        :meth:`SnippetRun.resume <daemon.code_mode.sandbox.engine.SnippetRun.resume>`
        for what approved, denied and undecided calls do, and
        :func:`~daemon.code_mode.sandbox.approval.denial_message` for the text a
        denied call raises. The snapshot replaces whatever checkout the
        scope holds (the REPL is the paused one, helpers included); the
        snapshot bytes suffice, so this works after a restart, in a new
        executor over the same tools. ``max_wall`` counts from this call.
        The result is like :meth:`call_tool`'s, and may carry a new pause.
        """
        await self.start()
        state = self._private if thread is None else self._scopes.touch(thread)
        async with state.lock:
            nested = self._nested_calls(state)
            state.restore = False  # the snapshot is the REPL, never the stored dump
            if state.session is not None:
                state.note = None  # a run made while paused: its names are not the paused REPL's
            await state.discard(None)
            run = SnippetRun(self._offer.catalog(_channel(state)), self._limits, nested)

            def nested_for(decision: Decision) -> NestedCalls:
                # approved calls join the snippet's started calls; a person decided: no gate
                observer = stamping_observer(self._observer, decision)
                return self._offer.calls(
                    _channel(state), state.thread_id, observer, nested.started, None
                )

            async def resume_run() -> SnippetOutcome:
                checked_out = await self._checkout(state)
                if isinstance(checked_out, SnippetOutcome):
                    return checked_out
                state.dirty = True
                return await run.resume(checked_out[0], pause, decisions, nested_for)

            outcome = await self._bounded(state, resume_run)
            output = await self._conclude(state, run.code, outcome, nested)
        self._scopes.evict_overflow()
        return output

    def _nested_calls(self, state: ScopeState) -> NestedCalls:
        """The nested calls of one run in ``state``: audited, and asking the gate at each call."""
        return self._offer.calls(_channel(state), state.thread_id, self._observer, None, self._gate)

    async def _run_locked(
        self, state: ScopeState, code: str, restart: bool, nested: NestedCalls
    ) -> ToolCallOutput:
        limits = self._limits
        if restart:
            await state.discard("restart")
        try:
            rejection = await hooks.vet_snippet(code, limits, self._offer.helpers(_channel(state)))
        except Exception:
            # a broken check must not block every snippet; the sandbox still guards
            log.exception("code_mode.check_failed", thread=state.key)
            rejection = None
        if rejection is not None:
            rendered = render_error(rejection, max_result_chars=limits.max_result_chars)
            return ToolCallOutput(
                rendered.text, rendered.is_error, audit=audit_json(nested.entries)
            )
        outcome = await self._bounded(state, lambda: self._execute(state, code, nested))
        return await self._conclude(state, code, outcome, nested)

    async def _bounded(
        self, state: ScopeState, run: Callable[[], Awaitable[SnippetOutcome]]
    ) -> SnippetOutcome:
        """``run()`` within ``max_wall``; then let go of a checkout it broke or paused."""
        limits = self._limits
        outcome: SnippetOutcome | None = None
        try:
            async with asyncio.timeout(limits.max_wall) as wall:
                outcome = await run()
        except TimeoutError:
            if not wall.expired():
                raise
            outcome = SnippetOutcome(
                error=(
                    f"TimeoutError: run_code exceeded its {limits.max_wall:g}s wall-clock limit; "
                    "tool calls still in flight were dropped"
                ),
                reset=True,
            )
        finally:
            if outcome is None or outcome.reset:
                # a reset, or cancellation mid-feed: the checkout cannot be fed again
                await state.discard("reset")
            elif outcome.pause is not None:
                # the snapshot holds the REPL; the worker goes back to the pool
                await state.discard(None)
        return outcome

    async def _conclude(
        self, state: ScopeState, code: str, outcome: SnippetOutcome, nested: NestedCalls
    ) -> ToolCallOutput:
        """The tool result of a run that ended or paused (after the hook, when it ended)."""
        audit = audit_json(nested.entries, [*nested.refused, *outcome.denied])
        await self._offer.settle(nested.learned, state.notices if state.key else None)
        for entry in outcome.denied:  # refused calls have an audit row too, with the decision
            await nested.record(entry)
        if outcome.pause is not None:
            text = render_paused(outcome.pause.calls)
            return ToolCallOutput(text, False, audit=audit, pause=outcome.pause)
        await self._after_snippet(state, code, outcome)
        rendered = render_outcome(
            outcome, max_result_chars=self._limits.max_result_chars, thread=state.thread_id
        )
        # a failed snippet ends with the calls it started, so none is repeated blindly
        rendered = with_started_calls(rendered, nested.started, self._limits.max_result_chars)
        return ToolCallOutput(rendered.text, rendered.is_error, audit=audit)

    async def _checkout(self, state: ScopeState) -> tuple[AsyncMontySession, bool] | SnippetOutcome:
        """The scope's session and whether it is new, or the error outcome when none is free."""
        assert self._pool is not None
        await self._scopes.close_evicted()
        try:
            return await state.checkout(self._pool, self._limits, self._fresh.ahead)
        except (TimeoutError, MontyError, RuntimeError, OSError) as exc:
            log.warning("code_mode.checkout_failed", thread=state.key, error=repr(exc))
            return SnippetOutcome(
                error=f"the sandbox has no free worker right now ({exc!r}); try again shortly"
            )

    async def _open(
        self, state: ScopeState, nested: NestedCalls
    ) -> tuple[AsyncMontySession, bool] | SnippetOutcome:
        """The scope's session and whether it is new, or the error outcome.

        A new checkout loads the stored REPL when the scope may, else runs the preamble.
        """
        catalog = self._offer.catalog(_channel(state))
        checked_out = await self._checkout(state)
        if isinstance(checked_out, SnippetOutcome):
            return checked_out
        session, fresh = checked_out
        if fresh and (loaded := await self._scopes.restore(state, session)) != "empty":
            if loaded == "restored":  # persistence read state.direct from the REPL
                return session, False
            await state.discard(None)  # a failed load may have changed it: start on a fresh one
            return await self._open(state, nested)
        if fresh:
            preamble = SnippetRun(catalog, self._limits, nested)
            source = scope_source(hooks.scope_preamble(self._limits), tuple(catalog.entries))
            setup = await self._fresh.prepare(state, lambda: preamble.drive(session, source))
            if setup is not None and not setup.ok:
                log.error("code_mode.preamble_failed", thread=state.key, error=setup.error)
                return SnippetOutcome(
                    error=f"the scope preamble failed, so the snippet did not run:\n{setup.error}",
                    reset=True,
                )
            state.direct = state.marked = True
        return state.session or session, fresh  # prepare() may give the scope a warm spare

    async def _execute(self, state: ScopeState, code: str, nested: NestedCalls) -> SnippetOutcome:
        opened = await self._open(state, nested)
        if isinstance(opened, SnippetOutcome):
            return opened
        session, fresh = opened
        state.dirty = True
        catalog, gated = self._offer.catalog(_channel(state)), self._gate is not None
        if state.direct and not eligible(code, catalog, gated):  # for good (direct.py)
            await state.leave_direct(tuple(catalog.entries))
        run = SnippetRun(catalog, self._limits, nested)
        outcome = await run.drive(session, code, direct=state.direct)
        if state.direct and nested.refused and not outcome.reset:
            # a gated call reached the direct path (a function a stored REPL kept): the next
            # snippet takes the snapshots, which can hold such a call for a person
            await state.leave_direct(tuple(catalog.entries))
        outcome.fresh = fresh
        return outcome

    async def _after_snippet(self, state: ScopeState, code: str, outcome: SnippetOutcome) -> None:
        try:
            async with asyncio.timeout(self._limits.request_timeout):
                await hooks.after_snippet(state, code, outcome)
        except Exception:
            # a probe failing only costs the note
            log.exception("code_mode.after_snippet_failed", thread=state.key)
