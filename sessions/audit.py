"""The audit of nested tool calls in the ``tool_calls`` table: written as calls run, read back.

Each nested call's row is added as the call starts (``outcome`` ``started``)
and completed as it ends, each in one autocommitted statement, so a crash
mid-call leaves the evidence of every call that began (the daemon's audit
observer is the writer). ``asyncai audit`` reads the rows back
(:meth:`AuditLog.entries`, its SQL built by :func:`audit_query` with every
filter bound), and recovery reads the calls an interrupted run started
(:meth:`AuditLog.started_calls`). :func:`audit_entry` is the table's one
row mapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .connection import Connection, canonical_timestamp, json_text, sql_limit
from .errors import StoreError
from .ids import thread_key
from .model import AuditEntry, StartedCall, ToolCallRow

__all__ = ["AuditLog", "audit_query"]


class AuditLog:
    """The tool_calls table: add a call's row as it starts, complete it as it ends, read."""

    def __init__(self, db: Connection):
        self._db = db

    async def add_tool_call(self, row: ToolCallRow) -> int:
        """Commit one nested call's audit row now (it survives a crash mid-run); return its id.

        The daemon adds the row as the call starts (``outcome="started"``)
        and completes it with :meth:`complete_tool_call` as it ends, so a
        crash leaves the evidence of every call that began. The thread is
        taken from the run row, which must exist.
        """
        started = canonical_timestamp(row.started, f"tool call {row.tool} started")
        arguments = json_text(row.arguments)
        async with self._db.statement(f"adding tool call {row.tool} of run {row.run_id}") as db:
            cursor = await db.execute(
                "INSERT INTO tool_calls (run_id, thread, record_uuid, tool, arguments, is_error,"
                " bytes, mutating, started, duration_ms, outcome, decision, decided_by, wait_ms,"
                " queue_ms)"
                " SELECT id, thread, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM runs WHERE id = ?",
                (
                    row.record_uuid,
                    row.tool,
                    arguments,
                    int(row.is_error),
                    int(row.bytes),
                    int(row.mutating),
                    started,
                    float(row.duration_ms),
                    row.outcome,
                    row.decision,
                    row.decided_by,
                    row.wait_ms,
                    row.queue_ms,
                    row.run_id,
                ),
            )
        if cursor.rowcount != 1:
            raise StoreError(f"tool call {row.tool}: no run {row.run_id!r} (start it first)")
        return int(cursor.lastrowid or 0)

    async def complete_tool_call(self, call_id: int, row: ToolCallRow) -> None:
        """Complete the row :meth:`add_tool_call` returned ``call_id`` for, as its call ended.

        Sets how it ended (``outcome``, ``is_error``, ``bytes``, ``duration_ms``,
        the decision fields and ``queue_ms``); what was called and when stay as added.
        """
        async with self._db.statement(f"completing tool call {row.tool} of run {row.run_id}") as db:
            cursor = await db.execute(
                "UPDATE tool_calls SET outcome = ?, is_error = ?, bytes = ?, duration_ms = ?,"
                " decision = ?, decided_by = ?, wait_ms = ?, queue_ms = ? WHERE id = ?",
                (
                    row.outcome,
                    int(row.is_error),
                    int(row.bytes),
                    float(row.duration_ms),
                    row.decision,
                    row.decided_by,
                    row.wait_ms,
                    row.queue_ms,
                    call_id,
                ),
            )
        if cursor.rowcount != 1:
            raise StoreError(f"completing tool call {row.tool}: no row {call_id}")

    async def started_calls(self, run_id: str) -> list[StartedCall]:
        """The nested calls a run started, in the order they started, with their outcomes."""
        rows = await self._db.read(
            f"reading the calls of run {run_id}",
            f"SELECT {AuditEntry.COLUMNS} FROM tool_calls t JOIN threads th ON th.id = t.thread"
            " WHERE t.run_id = ? ORDER BY t.id",
            (run_id,),
        )
        return [
            StartedCall(entry.tool, entry.arguments, entry.mutating, entry.outcome)
            for entry in map(AuditEntry.from_row, rows)
        ]

    async def entries(
        self,
        *,
        thread: str | None = None,
        channel: str | None = None,
        tool: str | None = None,
        mutating: bool | None = None,
        since: str | None = None,
        limit: int | None = 100,
        tools: Sequence[str] | None = None,
        outcome: str | None = None,
        sender: str | None = None,
        until: str | None = None,
    ) -> list[AuditEntry]:
        """Nested tool calls, newest first, filtered by every argument that is not None.

        ``thread`` is a thread id (in any channel unless ``channel`` is
        given); ``since`` an ISO timestamp (calls started at or after it),
        ``until`` one (calls started before it); ``tools`` any of these tool
        names (a server's tools: the rows name the tool, not its server);
        ``sender`` a nick whose prompt the call's run answered. Every value is
        a bound parameter.
        """
        keys: list[str] | None = None
        if thread is not None:
            if channel is not None:
                keys = [thread_key(channel, thread)]
            else:
                # Resolved first so that one thread (the usual case) is an
                # equality on the index and "newest first" needs no sort.
                found = await self._db.read(
                    "looking up a thread",
                    "SELECT id FROM threads WHERE thread_id = ? ORDER BY id",
                    (thread,),
                )
                keys = [row[0] for row in found]
                if not keys:
                    return []
        sql, params = audit_query(
            thread_keys=keys,
            channel=None if thread is not None else channel,
            tool=tool,
            mutating=mutating,
            since=since,
            limit=limit,
            tools=tools,
            outcome=outcome,
            sender=sender,
            until=until,
        )
        rows = await self._db.read("reading the audit", sql, params)
        return [AuditEntry.from_row(row) for row in rows]


def audit_query(
    *,
    thread_keys: Sequence[str] | None = None,
    channel: str | None = None,
    tool: str | None = None,
    mutating: bool | None = None,
    since: str | None = None,
    limit: int | None = 100,
    tools: Sequence[str] | None = None,
    outcome: str | None = None,
    sender: str | None = None,
    until: str | None = None,
) -> tuple[str, list[Any]]:
    """The audit's SQL and parameters. Filters are bound, never spliced into the text.

    ``thread_keys`` are thread keys (``ids.thread_key``); an empty list
    matches nothing, and so does an empty ``tools``.
    """
    where: list[str] = []
    params: list[Any] = []
    if thread_keys is not None:
        where.append(f"t.thread IN ({','.join('?' * len(thread_keys))})")
        params.extend(thread_keys)
        if len(thread_keys) == 1:
            where[-1] = "t.thread = ?"
    if channel is not None:
        where.append("th.channel = ?")
        params.append(channel)
    if tool is not None:
        where.append("t.tool = ?")
        params.append(tool)
    if mutating is not None:
        where.append("t.mutating = ?")
        params.append(int(mutating))
    if tools is not None:
        where.append(f"t.tool IN ({','.join('?' * len(tools))})" if tools else "0")
        params.extend(tools)
    if outcome is not None:
        where.append("t.outcome = ?")
        params.append(outcome)
    if sender is not None:
        # the run's senders (run_senders' key starts with the sender, so this is a seek)
        where.append(
            "EXISTS (SELECT 1 FROM run_senders s WHERE s.sender = ? AND s.run_id = t.run_id)"
        )
        params.append(sender)
    if since is not None:
        where.append("t.started >= ?")
        params.append(canonical_timestamp(since, "since"))
    if until is not None:
        where.append("t.started < ?")
        params.append(canonical_timestamp(until, "until"))
    sql = (
        f"SELECT {AuditEntry.COLUMNS}"
        # CROSS JOIN keeps tool_calls the outer loop, so "newest first" walks
        # an index and stops at the limit even when filtering on the channel.
        " FROM tool_calls t CROSS JOIN threads th ON th.id = t.thread"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.started DESC, t.id DESC LIMIT ?"
    params.append(sql_limit(limit))
    return sql, params
