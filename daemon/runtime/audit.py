"""The durable audit of nested tool calls: one ``tool_calls`` row per call, as it happens.

The code-mode executor reports each nested call as it starts and as it ends;
:func:`audit_observer` turns those reports into rows of the sessions store,
so a crash mid-call leaves the row of what had begun.
"""

from __future__ import annotations

import asyncio

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.runs import current_tool_use
from daemon.tools import AuditEntry, AuditObserver
from sessions.errors import StoreError
from sessions.model import ToolCallRow
from sessions.store import Store

__all__ = ["audit_observer"]

log = structlog.get_logger("asyncai.daemon")


def audit_observer(store: Store) -> AuditObserver:
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
