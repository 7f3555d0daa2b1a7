"""The durable audit of tool calls: one ``tool_calls`` row per call, as it happens.

The code-mode executor reports each nested call as it starts and as it ends;
:func:`audit_observer` turns those reports into rows of the sessions store,
so a crash mid-call leaves the row of what had begun. In direct tool mode
(the model calls the MCP tools itself) :class:`AuditedExecutor` makes the
same two reports around each call, with the same rule: a mutating call is
made only once its ``started`` row is committed (issue 26), so recovery's
no-re-run rule and the interrupted notice hold in both modes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.runs import current_tool_use
from daemon.tools import (
    AuditEntry,
    AuditObserver,
    CallOutcome,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
    ToolExecutor,
    not_recorded,
    observe_entry,
)
from sessions.audit import AuditLog
from sessions.errors import StoreError
from sessions.model import ToolCallRow

__all__ = ["AuditedExecutor", "audit_observer"]

log = structlog.get_logger("asyncai.daemon")


def audit_observer(store: AuditLog) -> AuditObserver:
    """The code-mode observer: a ``tool_calls`` row added as each nested call starts,
    completed as it ends, so a crash mid-call leaves the row (``started``).

    The run and the transcript record come from ``current_tool_use``
    (:mod:`daemon.runtime.runs`), which the backend sets around each
    ``call_tool``; the nested calls run in tasks started inside it and inherit
    it. Code mode itself knows only the thread: the run identity stays out of
    the ``ToolExecutor`` interface.

    The row id of each started call is kept by the entry's ``key`` until its
    end arrives (a call always ends: code mode reports cancelled calls too).
    The insert runs as its own task so a cancellation that lands while it is
    written cannot lose the id: the end then completes that row instead of
    adding a second one. An end without a known start (no key, or the start
    was never observed) is added as a whole row.
    """
    started: dict[str, asyncio.Task[int]] = {}

    async def observe(thread_id: str | None, entry: AuditEntry) -> None:
        context = current_tool_use.get()
        if context is None:
            log.warning("daemon.audit_without_run", thread=thread_id, tool=entry.tool)
            if entry.mutating and entry.outcome == "started":
                raise StoreError(f"no run to record the call of {entry.tool} under")
            return
        row = ToolCallRow(
            run_id=context.run_id,
            thread_id=context.thread_id,
            tool=entry.tool,
            arguments=entry.arguments,
            is_error=entry.is_error,
            bytes=entry.bytes,
            mutating=entry.mutating,
            started=entry.started,
            duration_ms=entry.duration_ms,
            record_uuid=context.record_uuid,
            outcome=entry.outcome,
            decision=entry.decision,
            decided_by=entry.decided_by,
            wait_ms=entry.wait_ms,
            queue_ms=entry.queue_ms,
        )
        if entry.outcome == "started" and entry.key:
            insert = asyncio.create_task(store.add_tool_call(row), name=f"audit {entry.tool}")
            started[entry.key] = insert
            await asyncio.shield(insert)
            crash_point("audit_started")
            return
        pending = started.pop(entry.key, None) if entry.key else None
        row_id: int | None = None
        if pending is not None:
            try:
                row_id = await asyncio.shield(pending)
            except StoreError:
                row_id = None  # the start was not stored: store the whole call now
        if row_id is None:
            await store.add_tool_call(row)
        else:
            await store.complete_tool_call(row_id, row)
        crash_point("audit_completed")

    return observe


class AuditedExecutor:
    """Direct mode's executor: ``inner``'s calls reported to ``observer`` as they start and end.

    The started entry goes first; for a mutating tool the call is made only
    when the observer returned (within :data:`~daemon.tools.OBSERVER_TIMEOUT`), else the
    model gets an error result saying the call was not recorded and not
    made. Everything else is ``inner``'s.
    """

    def __init__(self, inner: ToolExecutor, observer: AuditObserver):
        self.inner = inner
        self._observer = observer
        self._tools: dict[str, ToolDefinition] = {}

    def definitions(self) -> list[ToolDefinition]:
        """The inner executor's tools."""
        return self.inner.definitions()

    async def start(self) -> None:
        """Start the inner executor."""
        await self.inner.start()

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """None: direct mode has no thread scopes."""
        return None

    def context_note(self, thread: ThreadKey) -> str | None:
        """The inner executor's note."""
        return self.inner.context_note(thread)

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()

    def _mutating(self, name: str) -> bool:
        definition = self._tools.get(name)
        if definition is None:
            self._tools = {d.name: d for d in self.inner.definitions()}
            definition = self._tools.get(name)
        # a tool no server lists is not made by any; counted as mutating all the same
        return definition is None or definition.mutating

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Record the start, make the call, record how it ended."""
        context = current_tool_use.get()
        thread = context.thread_id if context is not None else None
        mutating = self._mutating(name)
        key = uuid.uuid4().hex
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        t0 = time.monotonic()

        def entry(outcome: CallOutcome, is_error: bool = False, size: int = 0) -> AuditEntry:
            ms = 0.0 if outcome == "started" else round((time.monotonic() - t0) * 1000, 3)
            return AuditEntry(name, arguments, is_error, size, mutating, stamp, ms, outcome, key)

        try:
            await observe_entry(self._observer, thread, entry("started"))
        except Exception as exc:
            if mutating:
                log.error("daemon.mutating_not_recorded", tool=name, error=repr(exc))
                await self._report_quietly(thread, entry("error", True))
                return ToolCallOutput(f"Error: {not_recorded(name, exc)}.", is_error=True)
            log.exception("daemon.audit_failed", tool=name)
        try:
            output = await self.inner.call_tool(name, arguments)
        except (asyncio.CancelledError, TimeoutError):
            await self._report_quietly(thread, entry("cancelled", True))
            raise
        except Exception:
            await self._report_quietly(thread, entry("error", True))
            raise
        size = len(output.content.encode())
        ended = entry("error" if output.is_error else "ok", output.is_error, size)
        await self._report_quietly(thread, ended)
        return output

    async def _report_quietly(self, thread: str | None, entry: AuditEntry) -> None:
        """The end of a call: a failure to record it is logged (the call was made)."""
        try:
            await asyncio.shield(observe_entry(self._observer, thread, entry))
        except Exception:
            log.exception("daemon.audit_failed", tool=entry.tool, outcome=entry.outcome)
