"""The host loop: drives one snippet through a Monty checkout (spec 0004, Engine loop).

DESIGN.md's adaptation to pydantic-monty 1.4:

| Monty suspension                          | host answer                                   |
|-------------------------------------------|-----------------------------------------------|
| name lookup of a catalog name             | a host function of that name                  |
| name lookup otherwise                     | nothing → ``NameError``                       |
| function call, catalog name, valid args   | ``{'future': ...}``; the call waits to be awaited |
| function call, invalid args               | the catalog's ``CallRejected`` (``TypeError``)|
| function call past the nested-call budget | ``RuntimeError: nested tool call budget exceeded`` |
| function call, unknown name               | ``NameError``                                 |
| ``search_tools``/``describe`` (issue 19)  | their value at once (:mod:`search`), no tool call |
| OS call ``import`` / ``import_stubs``     | ``resume_auto()`` (stdlib imports work)       |
| OS call ``time.sleep`` / ``asyncio.sleep``| ``NotImplementedError`` (:data:`SLEEP_DENIED`)|
| any other OS call                         | ``PermissionError: os access disabled ...``   |
| any host call after the print cap's breach| ``MemoryError`` (the cap's message)           |
| future snapshot                           | start every newly awaited call at once; wait  |
|                                           | for ≥1 to finish; resume with all finished    |
| awaited mutating call, gate says ``deny`` | ``PermissionError(<the verdict's reason>)``   |
| awaited mutating call, gate says ``ask``  | held, not started                             |
| future snapshot, every awaited call held  | dump the session; end with a ``Pause``        |
| past ``max_suspensions`` suspensions      | stop; the checkout is discarded               |

A nested call starts only when the sandbox awaits it (its id is among a
future snapshot's ``pending_call_ids``): gathered calls run concurrently, a
call never awaited never runs (the return contract asks for ``await``). A
snippet that awaits every call where it makes it runs instead on Monty's
own host-call path, one round trip a call (:mod:`daemon.code_mode.sandbox.direct`).

Approvals (issue 13): a call of a mutating tool is judged by the
:data:`~daemon.approvals.ApprovalGate` of its :class:`NestedCalls` as the sandbox
awaits it, to hold it for a person (``ask``); the call asks the gate again
where it is made (issue 26: a refusal is :class:`NestedCalls`'s). A run whose
awaited calls are all finished or held pauses: the session's dump and
:func:`~daemon.code_mode.sandbox.approval.pause_state` hold it; the worker goes back.
:meth:`SnippetRun.resume` loads the dump into a fresh checkout, makes the
approved calls (each still the ``server.tool`` with the arguments the request
showed, else refused), raises ``PermissionError`` at the denied ones, and drives on
exactly as :meth:`SnippetRun.drive` does; it may pause again.

The outcome says whether the checkout must be discarded ("reset"): after a
time-limit ``TimeoutError``, a heap ``MemoryError``, a crashed worker, or a
blown suspension budget. A breach of the print cap keeps it: Monty flushes
buffered output just before every host call, and a print callback raising
in that flush ends the checkout, so :class:`PrintSink` does not raise at
the breach; the snippet gets the ``MemoryError`` at its next host call or
as its result (see :class:`PrintSink` for the runaway print loop).
"""

from __future__ import annotations

import asyncio
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic_monty
import structlog
from pydantic_monty import (
    AsyncFunctionSnapshot,
    AsyncFutureSnapshot,
    AsyncMontySession,
    ExcType,
    ExternalExceptionData,
    ExternalSettledResult,
    MontyComplete,
    MontyCrashedError,
    MontyError,
    MontyRuntimeError,
    MontySyntaxError,
)

from daemon.approvals import Decision, Pause
from daemon.code_mode.catalog import CallRejected, Catalog, helper_result, is_helper
from daemon.code_mode.convert import sandbox_text
from daemon.code_mode.lazy import public_name, without_wrapper_frames
from daemon.code_mode.sandbox.approval import (
    MadeCall,
    PauseStateError,
    denial_message,
    denied_entry,
    pause_state,
    pending_calls,
    restore_state,
    stamp,
    unlike_shown,
)
from daemon.code_mode.sandbox.compat import as_cpython
from daemon.code_mode.sandbox.direct import (
    OS_DENIED,
    SLEEP_DENIED,
    SLEEP_OS_CALLS,
    DirectFeed,
    DirectReset,
    cancel_all,
    checked_call,
    suspension_budget_message,
)
from daemon.code_mode.sandbox.nested import NestedCalls
from daemon.code_mode.sandbox.outcome import SnippetOutcome
from daemon.code_mode.sandbox.prints import PrintSink
from daemon.limits import CodeModeLimits
from daemon.tools import AuditEntry

__all__ = ["SnippetRun"]

log = structlog.get_logger("asyncai.code_mode")

_AUTO_OS_CALLS = frozenset({"import", "import_stubs"})
# Monty's own words for a breached limit (uncatchable in the sandbox; the session is
# spent): a snippet's own `raise MemoryError(...)` or `TimeoutError` is its error alone,
# not a cap to blame nor a reason to reset its REPL
_HEAP_CAP = re.compile(r"memory limit exceeded: \d+ bytes > \d+ bytes\Z")
_TIME_CAP = re.compile(r"(feed|turn) time limit exceeded: ")
_EXC_TYPES = frozenset(typing.get_args(pydantic_monty.ExcType))
# Tool calls are bounded by tool_timeout each; this only guards the engine's
# own wait against a task that never settles.
_WAIT_SLACK = 30.0


def _sandbox_function(name: str) -> Any:
    """A host function the sandbox can hold by ``name``; calls to it arrive as snapshots."""

    async def catalog_function(**kwargs: Any) -> None:  # pragma: no cover - never called
        raise AssertionError("catalog functions are dispatched by the engine")

    catalog_function.__name__ = catalog_function.__qualname__ = name
    return catalog_function


def _exception(exc_type: str, message: str) -> ExternalExceptionData:
    known = typing.cast(ExcType, exc_type) if exc_type in _EXC_TYPES else "TypeError"
    # a lone surrogate would make pydantic-monty raise TypeError at the resume
    return {"exc_type": known, "message": sandbox_text(message)}


@dataclass
class _Done:
    """A direct run's end, read like ``MontyComplete`` (which cannot be made here)."""

    output: Any


class _Reset(Exception):
    """Stop driving; the checkout cannot be used again."""


class _Overflow(Exception):
    """The snippet completed past the print cap: an error result; the checkout is fine."""


class SnippetRun:
    """Drives one snippet (or the scope preamble) through a checked-out session.

    ``nested``'s gate judges each awaited call of a mutating tool (none: every
    call runs). One instance drives one run: :meth:`drive` a new snippet, or
    :meth:`resume` a paused one.
    """

    def __init__(
        self,
        catalog: Catalog,
        limits: CodeModeLimits,
        nested: NestedCalls,
    ):
        self._catalog = catalog
        self._limits = limits
        self._nested = nested
        self.suspensions = 0
        self.nested_calls = 0
        self._code = ""
        self._pending: dict[int, MadeCall] = {}  # called, not yet awaited
        # awaited, not yet delivered
        self._tasks: dict[int, asyncio.Task[ExternalSettledResult]] = {}
        self._held: dict[int, MadeCall] = {}  # awaited, waiting for a person
        self._answers: dict[int, ExternalSettledResult] = {}  # settled before delivery
        self._denied: list[AuditEntry] = []
        # calls made through a scope's wrapper, which may answer with text (lazy.py)
        self._text_ok: set[int] = set()

    @property
    def code(self) -> str:
        """The snippet's text (known once :meth:`drive` or :meth:`resume` started)."""
        return self._code

    async def drive(
        self, session: AsyncMontySession, code: str, *, direct: bool = False
    ) -> SnippetOutcome:
        """Run ``code`` to its end, an error or a pause; cancelling leaves the session unusable.

        ``direct``: the snippet may take Monty's own host-call path
        (:func:`~daemon.code_mode.sandbox.direct.direct_ok` said so); it never pauses.
        """
        code = as_cpython(code)  # valid Python Monty runs otherwise (compat.py)
        self._code = code
        sink = PrintSink(self._limits.max_print_bytes)
        if not direct:
            return await self._drive(
                session, sink, lambda: session.feed_start(code, print_callback=sink)
            )
        feed = DirectFeed(self._catalog, self._limits, self._nested, sink)

        async def start() -> _Done:
            try:
                return _Done(await feed.run(session, code))
            finally:
                self.suspensions, self.nested_calls = feed.suspensions, feed.nested_calls

        return await self._drive(session, sink, start)

    async def resume(
        self,
        session: AsyncMontySession,
        pause: Pause,
        decisions: Mapping[int, Decision],
        nested_for: Callable[[Decision], NestedCalls],
    ) -> SnippetOutcome:
        """Continue a paused snippet in ``session``, a fresh checkout, with the decisions.

        Approved calls run through ``nested_for(decision)`` (whose audit
        entries are stamped with the decision and join this run's), each
        only if the catalog still resolves it to the ``server.tool`` and
        arguments of ``pause.calls`` (what the approver saw: else it raises
        ``PermissionError`` saying what differs, and nothing is called); denied
        and expired ones raise ``PermissionError(``:func:`denial_message```)``
        where the snippet awaits them. A held call without a decision stays
        held, so the snippet pauses again before it. The limits apply as to
        a new snippet, except the suspension and nested-call budgets, which
        the paused part already used.
        """
        try:
            if pause.snapshot is None:
                raise PauseStateError("the pause carries no snapshot")
            restored = restore_state(pause.state, self._catalog)
        except PauseStateError as exc:
            return SnippetOutcome(
                error=f"RuntimeError: the paused snippet cannot be resumed: {exc}", reset=True
            )
        blob = pause.snapshot
        self._code, self._pending = restored.code, restored.pending
        self.suspensions, self.nested_calls = restored.suspensions, restored.nested_calls
        for cid, name in restored.gone.items():
            self._answers[cid] = _exception(
                "RuntimeError", f"{name}() is no longer offered, so the call was not made"
            )
        approved: dict[int, tuple[MadeCall, Decision]] = {}
        shown = {c.call_id: c for c in pause.calls}  # what the request showed the approver
        for cid, call in restored.held.items():
            decision = decisions.get(cid)
            if decision is None:
                self._held[cid] = call
            elif decision.approved and (why := unlike_shown(call, shown.get(cid))) is not None:
                log.warning("code_mode.approved_call_changed", tool=call.entry.tool_name, why=why)
                message = f"the approved call was not made: {why}"
                self._answers[cid] = _exception("PermissionError", message)
                self._denied.append(denied_entry(call, "denied", "resume check", None))
            elif decision.approved:
                approved[cid] = (call, decision)
            else:
                self._answers[cid] = _exception("PermissionError", denial_message(decision))
                self._denied.append(
                    denied_entry(call, decision.kind, decision.by, decision.waited_ms)
                )
        sink = PrintSink(self._limits.max_print_bytes, restored.prints)
        loaded = False

        async def start() -> Any:
            nonlocal loaded
            snap = await session.load_snapshot(blob, print_callback=sink)
            loaded = True
            # only now: a snapshot that cannot load must not leave a call made
            for cid, (call, decision) in approved.items():
                self._tasks[cid] = asyncio.create_task(
                    self._run_approved(call, nested_for(decision), decision),
                    name=f"code_mode:{call.py_name}",
                )
            return snap

        outcome = await self._drive(session, sink, start)
        if not loaded:
            outcome.reset = True  # the fresh checkout holds no scope (not even the helpers)
        return outcome

    async def _drive(
        self,
        session: AsyncMontySession,
        sink: PrintSink,
        start: Callable[[], Awaitable[Any]],
    ) -> SnippetOutcome:
        """The loop of :meth:`drive` and :meth:`resume`; ``start`` gives the first snapshot."""
        outcome = SnippetOutcome(denied=self._denied)
        try:
            snap = await start()
            while not isinstance(snap, (MontyComplete, _Done)):
                self.suspensions += 1
                if self.suspensions > self._limits.max_suspensions:
                    raise _Reset(suspension_budget_message(self._limits))
                if isinstance(snap, AsyncFunctionSnapshot):
                    if sink.overflowed:
                        snap = await snap.resume(_exception("MemoryError", sink.message))
                    else:
                        snap = await self._on_function(snap)
                elif isinstance(snap, AsyncFutureSnapshot):
                    following = await self._on_future(snap)
                    if following is None:
                        outcome.pause = await self._pause(session, sink)
                        break
                    snap = following
                else:
                    snap = await self._on_name_lookup(snap)
            else:
                if sink.overflowed:
                    raise _Overflow(sink.message)
                outcome.value = snap.output
                outcome.unawaited = [c.py_name for c in self._pending.values()]
        except (_Reset, DirectReset) as exc:
            outcome.error, outcome.reset = str(exc), True
        except _Overflow as exc:
            outcome.error = f"MemoryError: {exc}"
        except MontySyntaxError as exc:
            outcome.error = exc.display()
        except MontyRuntimeError as exc:
            outcome.error, outcome.reset = self._runtime_error(exc, sink)
        except MontyCrashedError as exc:
            outcome.error, outcome.reset = f"the sandbox worker died: {exc}", True
        except MontyError as exc:
            # conversion and typing errors: the snippet did not run to completion,
            # the worker is fine
            outcome.error = f"{type(exc).__name__}: {exc}"
        except RuntimeError as exc:
            # pydantic_monty's own plain RuntimeErrors ("this checkout has already
            # been finished", protocol errors) mean the checkout is unusable
            log.warning("code_mode.session_error", error=str(exc))
            outcome.error, outcome.reset = f"the sandbox session failed: {exc}", True
        finally:
            await self._cancel_tasks()
        if outcome.error is not None:
            outcome.unawaited = [c.py_name for c in self._pending.values()]
            if not outcome.reset and session.worker_pid is None:
                outcome.reset = True  # Monty ended the checkout on its own
        outcome.prints = sink.text
        return outcome

    def _runtime_error(self, exc: MontyRuntimeError, sink: PrintSink) -> tuple[str, bool]:
        text = without_wrapper_frames(exc.display())
        inner = exc.exception()
        message = str(inner)
        if isinstance(inner, MemoryError) and _HEAP_CAP.match(message):
            if sink.overflowed:
                return text, False
            return (
                f"{text}\nThe sandbox heap is capped at {self._limits.max_memory:,} bytes.",
                True,
            )
        if isinstance(inner, TimeoutError) and _TIME_CAP.match(message):
            return (
                f"{text}\nThe snippet ran longer than the {self._limits.max_feed_duration:g}s "
                "execution limit (time waiting for tools is not counted).",
                True,
            )
        return text, False

    async def _on_function(self, snap: AsyncFunctionSnapshot) -> Any:
        name = str(snap.function_name)
        if snap.is_os_function:
            if name in _AUTO_OS_CALLS:
                return await snap.resume_auto()
            if name in SLEEP_OS_CALLS:
                return await snap.resume(_exception("NotImplementedError", SLEEP_DENIED))
            return await snap.resume(_exception("PermissionError", OS_DENIED))
        if is_helper(self._catalog, name):  # search_tools/describe: answered at once
            return await snap.resume(helper_result(self._catalog, name, snap.args, snap.kwargs))
        name, wrapped = public_name(name)
        entry = self._catalog.lookup(name)
        if entry is None:
            return await snap.resume(_exception("NameError", f"name '{name}' is not defined"))
        try:
            arguments = checked_call(
                self._catalog, self._limits, self.nested_calls, entry, tuple(snap.args), snap.kwargs
            )
        except CallRejected as exc:
            return await snap.resume(_exception(exc.exc_type, exc.message))
        made = MadeCall(entry, name, arguments)
        self.nested_calls += 1
        self._pending[snap.call_id] = made
        if wrapped:
            self._text_ok.add(snap.call_id)
        return await snap.resume({"future": ...})

    async def _on_future(self, snap: AsyncFutureSnapshot) -> Any:
        """Start newly awaited calls, deliver what settled; None when every awaited call is held."""
        ids = list(snap.pending_call_ids)
        results: dict[int, ExternalSettledResult] = {}
        starting: list[tuple[int, MadeCall]] = []
        for cid in ids:
            if cid in self._answers:
                results[cid] = self._answers.pop(cid)
                continue
            if cid in self._tasks or cid in self._held:
                continue
            call = self._pending.pop(cid, None)
            if call is None:
                # an awaitable kept from an earlier snippet: its call id is stale
                results[cid] = _exception(
                    "RuntimeError", "this call was made in an earlier snippet; call it again"
                )
                continue
            # to know whether to hold it; the call asks again where it is made (NestedCalls)
            verdict = self._nested.verdict(call.entry, call.arguments)
            if verdict.action == "allow":
                starting.append((cid, call))
            elif verdict.action == "deny":
                results[cid] = await self._nested.refuse(call.entry, call.arguments, verdict)
            else:
                call.why = verdict.reason
                self._held[cid] = call
        if len(ids) == 1 and len(starting) == 1:
            # the common case, one call awaited and nothing else in flight: run it
            # here, not as a task, which saves the loop round trips of a task and a wait
            # (NestedCalls.run bounds itself: tool_timeout, and OBSERVER_TIMEOUT per notice)
            cid, call = starting[0]
            results[cid] = await self._nested.run(
                call.entry, call.arguments, text=cid in self._text_ok
            )
            return await snap.resume(results)
        for cid, call in starting:
            # the sandbox awaits it now: start it, alongside every other awaited call
            self._tasks[cid] = asyncio.create_task(
                self._nested.run(call.entry, call.arguments, text=cid in self._text_ok),
                name=f"code_mode:{call.py_name}",
            )
        if not results:
            waiting = [self._tasks[cid] for cid in ids if cid in self._tasks]
            if not waiting:
                return None  # everything awaited waits for a person: pause
            done, _ = await asyncio.wait(
                waiting,
                timeout=self._limits.tool_timeout + _WAIT_SLACK,
                return_when=asyncio.FIRST_COMPLETED,
            )
            while not done and self._nested.waiting_for_slot():
                # a call waiting for its server's max_concurrent slot has not begun its
                # tool_timeout: the guard starts again
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=self._limits.tool_timeout + _WAIT_SLACK,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if not done:
                raise _Reset("RuntimeError: tool calls did not settle within their timeout")
        for cid in ids:
            task = self._tasks.get(cid)
            if task is not None and task.done():
                del self._tasks[cid]
                results[cid] = task.result()
        return await snap.resume(results)

    async def _pause(self, session: AsyncMontySession, sink: PrintSink) -> Pause:
        """Dump the suspended session with the bookkeeping to resume it."""
        state = pause_state(
            code=self._code,
            prints=sink.text,
            pending=self._pending,
            held=self._held,
            suspensions=self.suspensions,
            nested_calls=self.nested_calls,
        )
        # the session's dump is awaitable (the snapshot's own dump() blocks the loop)
        blob = await session.dump()
        return Pause(calls=pending_calls(self._held), snapshot=blob, state=state)

    async def _run_approved(
        self, call: MadeCall, calls: NestedCalls, decision: Decision
    ) -> ExternalSettledResult:
        try:
            return await calls.run(call.entry, call.arguments)
        finally:
            self._nested.entries.extend(stamp(e, decision) for e in calls.entries)

    async def _on_name_lookup(self, snap: Any) -> Any:
        name = snap.variable_name
        tool, wrapped = public_name(name)
        # a wrapper's host function is bound even for a tool gone since: its call says so
        if wrapped or self._catalog.lookup(tool) is not None or is_helper(self._catalog, name):
            return await snap.resume(value=_sandbox_function(name))
        return await snap.resume()

    async def _cancel_tasks(self) -> None:
        """Drop calls still in flight (the snippet ended or was stopped without them)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_all(tasks)
