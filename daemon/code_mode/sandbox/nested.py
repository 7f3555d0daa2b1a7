"""Nested tool calls: one sandbox call → one inner ``call_tool``, gated, logged and audited.

Every path's call goes through :meth:`NestedCalls.value`, so what a call must
pass (the approval gate) and leave behind (the audit, the log) is kept where it
leaves the sandbox, not split over modules a path could skip.

Each call is bounded by ``limits.tool_timeout`` and answered into the sandbox
per spec 0004's nested-result table. When the inner executor bounds a
server's calls in flight (:class:`daemon.tools.CallSlots`, an MCP server's
``max_concurrent``), the call first waits for a slot, outside
``tool_timeout``; the audit records the wait (``queue_ms``), and ``started``
and ``duration_ms`` are those of the call itself, from when it got its slot:

| inner outcome                | sandbox sees                                  |
|------------------------------|-----------------------------------------------|
| ``is_error``                 | ``RuntimeError(<text>)``, catchable           |
| JSON text, or ``structured`` when there is no text | the parsed value        |
| a list, dict or tuple in Python literal syntax (``str(rows)``) | that value (a tuple as a list) |
| other text                   | ``str``                                       |
| ``ToolTransportError``       | ``RuntimeError("tool error: ...")``           |
| no answer in ``tool_timeout``| ``RuntimeError("tool X timed out after 120s")`` |

A successful result of a tool without an output schema is shown to the
:class:`~daemon.code_mode.catalog.learned.ShapeBook` of the run's channel (a
:class:`~daemon.code_mode.catalog.learned.ChannelShapes`), when there is one; the shapes it
learned from them are in :attr:`NestedCalls.learned` (issue 19).

Every call that reaches the inner executor, finished or dropped, becomes one
:class:`daemon.tools.AuditEntry` (spec A7). The optional observer sees each
call twice, with the same ``key``: an entry with outcome ``started`` before
the inner call is made (so a crash leaves the evidence that it began; a
mutating call whose start it could not record is not made), and the final
entry as it ends. Calls are logged as ``mcp.tool_call`` /
``mcp.tool_result`` with ``via="code_mode"``: at ``info``, or at ``warning``
with ``mutating=True`` when the tool may change something (A6: always on).

The approval gate (issue 26) is asked here, where the call leaves the
sandbox, whatever path brought it (the snapshot engine, Monty's direct
host-call path, a wrapper, an alias): a call of a mutating tool runs only on
``allow``; an approved call resumed after a pause carries the person's
decision instead (its ``NestedCalls`` has no gate). ``deny``, and ``ask``
(only the engine can hold a call for a person; :mod:`~daemon.code_mode.sandbox.direct`
keeps such snippets off its path), raise :class:`CallRefused`, a
``PermissionError`` in the sandbox, before anything is made; the refusal is
audited (``decision="denied"``, ``decided_by="policy"``) in :attr:`NestedCalls.refused`.

A channel's tools (issue 29): when the inner executor offers only some of
its tools (:class:`daemon.tools.OffersTools`, a channel's view), a call of a
tool it does not offer is not there, whatever path brought it: it raises
:class:`ToolNotOffered`, a ``NameError`` in the sandbox as for any undefined
name, before the gate is asked and before anything is made or audited. The
catalog never shows such a tool, so only a function kept from before (a
stored REPL, a paused snippet) could try; this is the check that holds anyway.

How a call ended, as :attr:`NestedCalls.started` and the audit keep it:

| the call                                              | outcome     |
|-------------------------------------------------------|-------------|
| answered, not ``is_error``                            | ``ok``      |
| answered ``is_error``, timed out, transport error     | ``error``   |
| cancelled by the host (the snippet ended, a limit, a  | ``cancelled`` |
| dead worker's reset, ``!stop``)                       |             |
| its end never observed (still ``started`` when the    | ``unknown`` |
| report is read; after a daemon crash, set at start)   |             |

The host cancels every call still in flight when a snippet ends, whatever
ended it (a worker crash included), and sees that cancellation: such a call
is ``cancelled``. Whether the server had already acted on it cannot be known
from here; the error report says so for mutating calls.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic_monty import ExternalExceptionData, ExternalSettledResult

from daemon.approvals import ApprovalGate, Verdict
from daemon.code_mode.catalog import CatalogEntry, ChannelShapes, LearnedShape
from daemon.code_mode.contract import StartedCall
from daemon.code_mode.convert import (
    ConversionError,
    log_content,
    nested_value,
    result_bytes,
    sandbox_text,
)
from daemon.code_mode.lazy import TEXT_MIN, text_marker
from daemon.code_mode.sandbox.approval import policy_denial, refused_entry
from daemon.code_mode.sandbox.deadlines import Deadlines
from daemon.errors import ToolTransportError
from daemon.limits import CodeModeLimits
from daemon.tools import (
    AuditEntry,
    AuditObserver,
    CallOutcome,
    CallSlots,
    OffersTools,
    ToolCallOutput,
    ToolExecutor,
    not_recorded,
    observe_entry,
)

__all__ = ["CallRefused", "NestedCalls", "ToolNotOffered"]

log = structlog.get_logger("asyncai.code_mode")

# How often a tool's results fit its learned shape in one run_code before no more are checked.
SHAPE_CHECKS = 3
_UNSET = object()
_ALLOW = Verdict("allow")


_second: tuple[int, str] = (-1, "")  # the last whole second _utc formatted


def _utc(now: float) -> str:
    """``now`` (a ``time.time()``) as ISO 8601 with milliseconds, ``Z``: formatting a whole
    second once is a third of the cost of ``datetime.isoformat(...)`` on every call."""
    global _second
    whole = int(now)
    if whole != _second[0]:
        _second = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S."))
    return f"{_second[1]}{_MILLIS[int((now - whole) * 1000)]}Z"


# "000" to "999", and "999" again should a product round up to 1000
_MILLIS = (*(f"{ms:03d}" for ms in range(1000)), "999")


class _ToolFailed(RuntimeError):
    """A call that failed: the ``RuntimeError`` the sandbox gets (Monty sends the nearest
    builtin type), its message without lone surrogates."""

    def __init__(self, message: str):
        super().__init__(sandbox_text(message))


class CallRefused(PermissionError):
    """The approval gate refused a call, so it was not made: ``PermissionError`` in the sandbox."""


class ToolNotOffered(NameError):
    """The inner executor does not offer the tool (not in this channel): ``NameError``."""

    def __init__(self, py_name: str):
        super().__init__(f"name {py_name!r} is not defined")


def _runtime_error(message: str) -> ExternalExceptionData:
    # a lone surrogate would make pydantic-monty raise TypeError at the resume
    return {"exc_type": "RuntimeError", "message": sandbox_text(message)}


def _logger(mutating: bool) -> Any | None:
    """A bound logger for one call's two lines, or None when their level is off.

    Binding once per call, and not building (or decoding) fields that would be
    dropped, is most of what logging used to cost a nested call.
    """
    bound = log.bind()
    enabled = getattr(bound, "is_enabled_for", None)
    if enabled is None or enabled(logging.WARNING if mutating else logging.INFO):
        return bound
    return None


def _log(logger: Any, event: str, mutating: bool, **fields: Any) -> None:
    # A6: a call that may change something is a warning, so it is always shown
    if mutating:
        logger.warning(event, mutating=True, **fields)
    else:
        logger.info(event, **fields)


# AuditEntry is frozen: its __init__ sets each of its fields through object.__setattr__,
# about 1.8 µs, a tenth of our host Python per small nested call. Giving a new instance
# its __dict__ (the fields in their order) makes the same entry in a quarter of that
# (tests/test_code_mode_contract.py compares the two).
_new, _set = object.__new__, object.__setattr__


def _entry(
    call: StartedCall,
    started: str,
    duration_ms: float,
    outcome: CallOutcome,
    is_error: bool = False,
    nbytes: int = 0,
) -> AuditEntry:
    """The audit entry of ``call``: as it is made (``outcome="started"``), or as it ended."""
    entry = _new(AuditEntry)
    _set(
        entry,
        "__dict__",
        {
            "tool": call.tool,
            "arguments": call.arguments,
            "is_error": is_error,
            "bytes": nbytes,
            "mutating": call.mutating,
            "started": started,
            "duration_ms": duration_ms,
            "outcome": outcome,
            "key": call.key,
            "decision": None,
            "decided_by": None,
            "wait_ms": None,
            "queue_ms": call.queue_ms,
        },
    )
    return entry


class NestedCalls:
    """Runs the nested calls of one ``run_code`` call and keeps their audit entries.

    ``entries``: the final entry of each call, in the order calls ended (the
    transcript's audit). ``started``: every call in the order it started,
    with its outcome so far (the error result's report).
    """

    def __init__(
        self,
        inner: ToolExecutor,
        limits: CodeModeLimits,
        *,
        thread_id: str | None,
        observer: AuditObserver | None = None,
        started: list[StartedCall] | None = None,
        shapes: ChannelShapes | None = None,
        gate: ApprovalGate | None = None,
    ):
        self._inner = inner
        self._gate = gate  # asked of every mutating call (None: approved calls, or no policy)
        self.refused: list[AuditEntry] = []  # calls the gate refused, never made
        self._shapes = shapes
        self.learned: list[LearnedShape] = []  # shapes these calls taught (issue 19)
        self._limits = limits
        self._thread_id = thread_id
        self._observer = observer
        self._slot = inner.call_slot if isinstance(inner, CallSlots) else None
        self._offers = inner.offers if isinstance(inner, OffersTools) else None
        self._loggers: dict[bool, Any | None] = {}  # by mutating: bound once per run_code
        self._deadlines = Deadlines(limits.tool_timeout)
        # results of a tool that fit its learned shape, in this run_code (see _observe)
        self._fitted: dict[str, int] = {}
        self._entries: list[AuditEntry] = []
        # calls ended but not yet made entries: (call, time.time() at start, seconds it
        # took, outcome, is_error, bytes); without an observer nobody reads an entry
        # before the run ends, and making them then, together, is off each call's way
        self._ended: list[tuple[StartedCall, float, float, CallOutcome, bool, int]] = []
        # a key per call: random per run_code, then counted (os.urandom is a system call)
        self._key_prefix, self._serial = os.urandom(8).hex(), itertools.count()
        # shared when several NestedCalls serve one snippet (approved calls after a
        # resume), so the report lists every call in the order it started
        self.started: list[StartedCall] = started if started is not None else []

    @property
    def entries(self) -> list[AuditEntry]:
        """The final entry of each call, in the order calls ended (the transcript's audit)."""
        if self._ended:
            ended, self._ended = self._ended, []
            self._entries.extend(
                _entry(call, _utc(stamp), round(seconds * 1000, 3), outcome, is_error, nbytes)
                for call, stamp, seconds, outcome, is_error, nbytes in ended
            )
        return self._entries

    async def run(
        self, entry: CatalogEntry, arguments: dict, *, text: bool = False
    ) -> ExternalSettledResult:
        """Call the tool; return the settled answer for the sandbox (never raises but cancel).

        ``text``: the call came through a scope's wrapper, so a large JSON
        result may go in as text for the sandbox to parse (:mod:`~daemon.code_mode.lazy`).
        """
        try:
            return {"return_value": await self.value(entry, arguments, text=text)}
        except _ToolFailed as exc:
            return _runtime_error(str(exc))
        except CallRefused as exc:
            return {"exc_type": "PermissionError", "message": str(exc)}
        except ToolNotOffered as exc:
            return {"exc_type": "NameError", "message": str(exc)}

    def verdict(self, entry: CatalogEntry, arguments: dict) -> Verdict:
        """The gate's verdict on a call (``allow`` without a gate or for a read-only tool);
        a gate that fails says ``deny``: a broken policy must not let a call through."""
        definition = entry.definition
        if self._gate is None or not definition.mutating:
            return _ALLOW
        try:
            return self._gate(definition, arguments)
        except Exception:
            log.exception("code_mode.gate_failed", tool=definition.name)
            return Verdict("deny", "the approval check failed, so the call was not made")

    async def refuse(
        self, entry: CatalogEntry, arguments: dict, verdict: Verdict
    ) -> ExternalExceptionData:
        """Audit a call the gate did not allow (it is not made); its ``PermissionError``."""
        if verdict.action == "deny":
            message = policy_denial(verdict.reason)
        else:  # ask: only the snapshot engine can hold a call for a person
            message = (
                f"{entry.definition.qualified_name} needs a person's approval, which this "
                "call cannot wait for, so it was not made; run the snippet again to wait for it"
            )
        log.warning("code_mode.call_refused", tool=entry.tool_name, reason=message)
        refused = refused_entry(entry, arguments, "denied", "policy", None)
        self.refused.append(refused)
        await self._notify(refused)
        return {"exc_type": "PermissionError", "message": sandbox_text(message)}

    async def value(
        self,
        entry: CatalogEntry,
        arguments: dict,
        *,
        text: bool = False,
        calls: set[asyncio.Task[Any]] | None = None,
    ) -> Any:
        """:meth:`run` for Monty's own host-call path: the value, or the sandbox's
        ``RuntimeError`` (:class:`CallRefused`: ``PermissionError``) raised; ``calls``
        holds the call's task while it runs.

        One coroutine for the whole call: in place, each frame less is a few
        percent of our cost of a small call.
        """
        if self._offers is not None and not self._offers(entry.definition.name):
            log.warning("code_mode.tool_not_offered", tool=entry.definition.qualified_name)
            raise ToolNotOffered(entry.py_name)
        if self._gate is not None and entry.definition.mutating:
            verdict = self.verdict(entry, arguments)
            if verdict.action != "allow":
                raise CallRefused((await self.refuse(entry, arguments, verdict))["message"])
        task = asyncio.current_task()
        assert task is not None
        if calls is not None:
            calls.add(task)
        try:
            definition = entry.definition
            tool, mutating = definition.name, definition.mutating
            key = f"{self._key_prefix}{next(self._serial):016x}"  # 32 hex digits, like a uuid4's
            call = StartedCall(key, tool, arguments, mutating)
            self.started.append(call)
            stamp, t0 = time.time(), time.monotonic()
            logger = self._loggers.get(mutating, _UNSET)
            if logger is _UNSET:
                logger = self._loggers[mutating] = _logger(mutating)
            if logger is not None:
                _log(
                    logger,
                    "mcp.tool_call",
                    mutating,
                    via="code_mode",
                    tool=tool,
                    arguments=arguments,
                )
            output: ToolCallOutput | None = None
            expired = [False]  # set when tool_timeout ran out
            try:
                # most servers: no slot to wait for (and no context to enter)
                if self._slot is None:
                    if self._observer is not None:
                        await self._record_start(call, stamp)
                    # _timed, inline: most calls take this way, and a coroutine less is 3% of them
                    token = self._deadlines.start(task, expired)
                    try:
                        output = await self._inner.call_tool(tool, arguments)
                    except asyncio.CancelledError:
                        if expired[0] and task.uncancel() == 0:
                            raise TimeoutError from None
                        raise
                    finally:
                        self._deadlines.done(token)
                else:
                    # a server's max_concurrent: the wait for a slot is not part of tool_timeout
                    call.queued = True
                    async with self._slot(tool) as queue_ms:
                        call.queued, call.queue_ms = False, queue_ms
                        if queue_ms:  # it waited: the call itself starts now
                            stamp, t0 = time.time(), time.monotonic()
                        # the started row lands before the call is made: a crash leaves the evidence
                        if self._observer is not None:
                            await self._record_start(call, stamp)
                        output = await self._timed(task, tool, arguments, expired)
            except asyncio.CancelledError:
                if call.queued:  # dropped while it waited for a slot: never made
                    now = time.monotonic()
                    call.queued, call.queue_ms, t0 = False, round((now - t0) * 1000, 3), now
                # dropped: max_wall, the snippet ended first, a reset, or the run was stopped
                await self._finish(call, stamp, t0, "cancelled", 0, "call dropped", logger=logger)
                raise
            except _ToolFailed:
                raise  # its start could not be recorded: not made (_record_start)
            except TimeoutError:
                if not expired[0]:
                    message = f"tool error: {tool} raised TimeoutError"
                else:
                    message = f"tool {tool} timed out after {self._limits.tool_timeout:g}s"
                await self._finish(call, stamp, t0, "error", 0, message, logger=logger)
                raise _ToolFailed(message) from None
            except ToolTransportError as exc:
                message = f"tool error: {exc}"
                await self._finish(call, stamp, t0, "error", 0, message, logger=logger)
                raise _ToolFailed(message) from None
            except Exception as exc:
                # a broken inner executor must not take the snippet down with it
                log.exception("code_mode.inner_failed", tool=tool)
                message = f"tool error: {type(exc).__name__}: {exc}"
                await self._finish(call, stamp, t0, "error", 0, message, logger=logger)
                raise _ToolFailed(message) from None

            if output.is_error:
                await self._finish(
                    call, stamp, t0, "error", result_bytes(output), output, logger=logger
                )
                raise _ToolFailed(output.content or f"tool {tool} failed")
            marker = text_marker(output, tool) if text and len(output.content) >= TEXT_MIN else None
            try:
                value = marker if marker is not None else nested_value(output)
            except ConversionError as exc:
                message = f"tool {tool} returned a value the sandbox cannot take: {exc}"
                await self._finish(call, stamp, t0, "error", 0, message, logger=logger)
                raise _ToolFailed(message) from None
            if self._shapes is not None and self._fitted.get(tool, 0) < SHAPE_CHECKS:
                self._observe(entry, output, None if marker is not None else value)
            if logger is None and self._observer is None:  # _end, inline: the usual call
                call.outcome = "ok"
                seconds = time.monotonic() - t0
                self._ended.append((call, stamp, seconds, "ok", False, result_bytes(output)))
                return value
            ended = self._end(call, stamp, t0, "ok", result_bytes(output), output, logger=logger)
            if ended is not None:
                await self._notify(ended)
            return value
        finally:
            if calls is not None:
                calls.discard(task)

    async def _timed(
        self, task: asyncio.Task[Any], tool: str, arguments: dict, expired: list[bool]
    ) -> ToolCallOutput:
        """The inner call within ``tool_timeout``: ``TimeoutError`` and ``expired[0]`` past it."""
        token = self._deadlines.start(task, expired)
        try:
            return await self._inner.call_tool(tool, arguments)
        except asyncio.CancelledError:
            # ours alone, not also a cancel from outside (a stop, max_wall): a timeout
            if expired[0] and task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            self._deadlines.done(token)

    def _observe(self, entry: CatalogEntry, output: ToolCallOutput, value: Any) -> None:
        """Show a result to the shape book (``value``: None when the host did not parse it).

        Checking a result against the learned shape walks all of it: a fifth
        of our cost of a small nested call. A tool whose results fit
        :data:`SHAPE_CHECKS` times in one ``run_code`` is not checked again in
        it (a loop's results have one shape); the next ``run_code`` checks anew.
        """
        tool = entry.tool_name
        fitted = self._fitted.get(tool, 0)
        if fitted >= SHAPE_CHECKS or self._shapes is None:
            return
        learned = self._shapes.observe(entry.definition, entry.py_name, output, value)
        if learned is not None:
            self.learned.append(learned)
        elif self._shapes.shape_for(entry.definition) is not None:
            self._fitted[tool] = fitted + 1

    async def _finish(
        self,
        call: StartedCall,
        stamp: float,
        t0: float,
        outcome: CallOutcome,
        nbytes: int,
        content: str | ToolCallOutput,
        *,
        logger: Any | None,
    ) -> None:
        """End ``call`` (:meth:`_end`) and show its entry to the observer."""
        entry = self._end(call, stamp, t0, outcome, nbytes, content, logger=logger)
        if entry is not None:
            await self._notify(entry)

    def _end(
        self,
        call: StartedCall,
        stamp: float,
        t0: float,
        outcome: CallOutcome,
        nbytes: int,
        content: str | ToolCallOutput,
        *,
        logger: Any | None,
    ) -> AuditEntry | None:
        """End ``call``: its log line (``content``: the result or what went wrong; decoded
        only when the line is logged) and its audit entry, made now when there is an
        observer to show it to (returned), else when :attr:`entries` is read."""
        call.outcome = outcome
        is_error = outcome != "ok"
        seconds = time.monotonic() - t0
        if logger is not None:
            _log(
                logger,
                "mcp.tool_result",
                call.mutating,
                via="code_mode",
                tool=call.tool,
                is_error=is_error,
                outcome=outcome,
                bytes=nbytes,
                content=log_content(content) if isinstance(content, ToolCallOutput) else content,
            )
        if self._observer is None:
            self._ended.append((call, stamp, seconds, outcome, is_error, nbytes))
            return None
        entry = _entry(call, _utc(stamp), round(seconds * 1000, 3), outcome, is_error, nbytes)
        self.entries.append(entry)
        return entry

    def waiting_for_slot(self) -> bool:
        """Whether a call still waits for its server's slot (its ``tool_timeout`` has not begun)."""
        return any(call.queued for call in self.started)

    async def record(self, entry: AuditEntry) -> None:
        """Audit a call this object did not make (refused, so never made)."""
        await self._notify(entry)

    async def _record_start(self, call: StartedCall, stamp: float) -> None:
        """The call's ``started`` entry to the observer, before the call is made: a
        mutating call whose start is not recorded (the observer raised, or said
        nothing in :data:`~daemon.tools.OBSERVER_TIMEOUT`) is not made (:func:`not_recorded`)."""
        try:
            await self._notify(_entry(call, _utc(stamp), 0.0, "started"), strict=call.mutating)
        except Exception as exc:
            log.error("code_mode.mutating_not_recorded", tool=call.tool, error=repr(exc))
            call.outcome = "error"
            await self._notify(_entry(call, _utc(stamp), 0.0, "error", True))
            raise _ToolFailed(not_recorded(call.tool, exc)) from None

    async def _notify(self, entry: AuditEntry, *, strict: bool = False) -> None:
        """Hand ``entry`` to the observer, bounded; its failure is logged (raised if ``strict``)."""
        if self._observer is None:
            return
        try:
            await observe_entry(self._observer, self._thread_id, entry)
        except Exception:
            if strict:
                raise
            # the audit sink failing must not break the snippet; the log keeps the entry
            log.exception("code_mode.observer_failed", tool=entry.tool, entry=entry)
