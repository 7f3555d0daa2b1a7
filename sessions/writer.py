"""The write side of the store: prompts, runs, tool calls and cursors.

``StoreWriter`` adds every change to ``StoreConnections``: recording and
claiming prompts, starting and finishing runs, committing the nested-call
audit row by row, recovering after a restart and advancing channel
cursors. Each public method is exactly one transaction (or one
autocommitted statement) on the writer connection; those of every prompt
(recording it, starting and finishing its run, the cursor) run whole on
the writer's thread in one job (``StoreConnections._batch``), their
statements in the plain functions below.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from .connection import StoreConnections, canonical_timestamp
from .errors import StoreError
from .ids import now_iso, session_id, thread_key
from .model import PromptStatus, Record, RunMetrics, ToolCallRow
from .outbox import OutboxReply, ScopeWrite, put_reply, put_scope
from .queries import PAUSED_RUN

__all__ = ["CURSOR_SPACE", "FIRST_START", "PROMPT_STATUSES", "RUN_STATUSES", "StoreWriter"]

PROMPT_STATUSES: tuple[PromptStatus, ...] = ("queued", "running", "done", "failed")
RUN_STATUSES = ("running", "done", "failed", "interrupted")
FIRST_START = "*"
"""The ``cursors`` row of the daemon's first start (no channel name is ``*``)."""
CURSOR_SPACE = "@"
"""The ``cursors`` row naming whose ids the channel cursors are (``hub``, ``nats``)."""


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (json.loads lets "\ud800" through from a model or a
        # tool) cannot be stored as UTF-8; JSON escapes keep it exactly.
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def _scalar(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def _ensure_thread(conn: sqlite3.Connection, channel: str, thread_id: str) -> str:
    key = thread_key(channel, thread_id)
    now = now_iso()
    conn.execute(
        "INSERT INTO threads (id, channel, thread_id, session_id, created, last_active)"
        " VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET last_active = excluded.last_active",
        (key, channel, thread_id, session_id(channel, thread_id), now, now),
    )
    return key


def _claim(conn: sqlite3.Connection, ids: list[str], run_id: str) -> int:
    now = now_iso()
    cursor = conn.executemany(
        "UPDATE prompts SET status = 'running', run_id = ?, updated = ?"
        " WHERE id = ? AND status != 'done'",
        [(run_id, now, prompt_id) for prompt_id in ids],
    )
    claimed = cursor.rowcount
    # The run's senders stay its senders, wherever their prompts go next.
    conn.executemany(
        "INSERT OR IGNORE INTO run_senders (sender, started, run_id)"
        " SELECT p.sender, r.started, r.id FROM prompts p JOIN runs r ON r.id = p.run_id"
        " WHERE p.id = ? AND p.run_id = ?",
        [(prompt_id, run_id) for prompt_id in ids],
    )
    return claimed


def _mark(conn: sqlite3.Connection, ids: list[str], status: str) -> int:
    now = now_iso()
    cursor = conn.executemany(
        "UPDATE prompts SET status = ?, updated = ? WHERE id = ?",
        [(status, now, prompt_id) for prompt_id in ids],
    )
    return cursor.rowcount


def _advance_cursor(conn: sqlite3.Connection, channel: str, message_id: str) -> bool:
    cursor = conn.execute(
        "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
        " ON CONFLICT (channel) DO UPDATE"
        " SET message_id = excluded.message_id, updated = excluded.updated"
        " WHERE excluded.message_id > cursors.message_id",
        (channel, message_id, now_iso()),
    )
    return cursor.rowcount == 1


class StoreWriter(StoreConnections):
    """Every write the store makes, each one transaction on the serialized writer."""

    # ---- prompts ---------------------------------------------------------

    async def record_prompt(
        self,
        channel: str,
        thread_id: str,
        message_id: str,
        sender: str,
        text: str,
        ts: str,
        *,
        advance_cursor: bool = False,
    ) -> bool:
        """Store an inbound prompt as ``queued``; False when this message id is already stored.

        Idempotent by the channel's message id, so a replayed message is
        never queued twice. With ``advance_cursor`` the channel's cursor
        moves to ``message_id`` in the same transaction (never backwards).
        """
        ts = canonical_timestamp(ts, f"prompt {message_id} ts")

        def record(conn: sqlite3.Connection) -> bool:
            if _scalar(conn, "SELECT 1 FROM prompts WHERE id = ?", (message_id,)):
                new = False
            else:
                key = _ensure_thread(conn, channel, thread_id)
                now = now_iso()
                conn.execute(
                    "INSERT INTO prompts (id, thread, sender, text, ts, received, status, updated)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                    (message_id, key, sender, text, ts, now, now),
                )
                new = True
            if advance_cursor:
                _advance_cursor(conn, channel, message_id)
            return new

        return await self._batch(f"recording prompt {message_id}", record)

    async def claim_prompts(self, ids: Iterable[str], run_id: str) -> int:
        """Mark prompts ``running`` under ``run_id`` (which must be started); return how many.

        Prompts already ``done`` are left alone: a prompt is answered once.
        """
        listed = list(ids)
        return await self._batch(
            f"claiming prompts for run {run_id}", lambda conn: _claim(conn, listed, run_id)
        )

    async def mark_prompts(self, ids: Iterable[str], status: PromptStatus) -> int:
        """Set the status of these prompts; return how many exist."""
        if status not in PROMPT_STATUSES:
            raise StoreError(f"unknown prompt status {status!r}")
        listed = list(ids)
        return await self._batch(
            f"marking prompts {status}", lambda conn: _mark(conn, listed, status)
        )

    async def requeue_prompts(self, ids: Iterable[str]) -> int:
        """Put unfinished prompts back to ``queued`` with no run (a run was cancelled)."""
        now = now_iso()
        async with self._transaction("requeueing prompts") as db:
            cursor = await db.executemany(
                "UPDATE prompts SET status = 'queued', run_id = NULL, updated = ?"
                " WHERE id = ? AND status != 'done'",
                [(now, prompt_id) for prompt_id in ids],
            )
            return cursor.rowcount

    async def recover(self, error: str = "the daemon stopped before the run ended") -> list[str]:
        """After a restart: close runs left ``running`` as ``interrupted``, queue their
        unfinished prompts again, and mark calls left ``started`` as ``unknown``.
        Returns the interrupted run ids.

        Prompts keep their ``run_id``, so :meth:`interrupted_runs` can tell
        which ones a cut-off run had started mutating calls for. A run paused
        for approval (``PAUSED_RUN``) is left exactly as it is: the approval
        resumes it. Call once at start-up, before any run starts, then read
        ``interrupted_runs()`` and ``pending_prompts()``.
        """
        now = now_iso()
        async with self._transaction("recovering interrupted runs") as db:
            runs = [
                row[0]
                for row in await db.execute_fetchall(
                    f"SELECT r.id FROM runs r WHERE r.status = 'running' AND NOT {PAUSED_RUN}"
                    " ORDER BY r.started"
                )
            ]
            marks = ",".join("?" * len(runs))
            await db.execute(
                f"UPDATE runs SET status = 'interrupted', finished = ?, error = ?"
                f" WHERE id IN ({marks})",
                (now, error, *runs),
            )
            await db.execute(
                "UPDATE prompts SET status = 'queued', updated = ? WHERE status = 'running'"
                " AND (run_id IS NULL OR run_id NOT IN"
                f" (SELECT r.id FROM runs r WHERE {PAUSED_RUN}))",
                (now,),
            )
            # Nothing runs yet, so a call still 'started' was cut off: its end was never seen.
            await db.execute(
                "UPDATE tool_calls SET outcome = 'unknown' WHERE outcome = 'started'"
                f" AND run_id IN (SELECT r.id FROM runs r WHERE NOT {PAUSED_RUN})"
            )
            return runs

    # ---- runs ------------------------------------------------------------

    async def start_run(
        self, run_id: str, channel: str, thread_id: str, prompt_ids: Iterable[str] = ()
    ) -> None:
        """Write the run row (status ``running``) and claim ``prompt_ids`` for it, at once."""
        ids = list(prompt_ids)

        def start(conn: sqlite3.Connection) -> None:
            key = _ensure_thread(conn, channel, thread_id)
            conn.execute(
                "INSERT INTO runs (id, thread, started, status) VALUES (?, ?, ?, 'running')",
                (run_id, key, now_iso()),
            )
            if ids:
                _claim(conn, ids, run_id)

        await self._batch(f"starting run {run_id}", start)

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one model response's tokens to the run's row now, as they are spent.

        So a run that is stopped, paused, cut off at shutdown or killed still
        counts them (the per-sender token limit reads them); :meth:`finish_run`
        never lowers them.
        """
        async with self._statement(f"adding the tokens of run {run_id}") as db:
            await db.execute(
                "UPDATE runs SET prompt_tokens = prompt_tokens + ?,"
                " completion_tokens = completion_tokens + ? WHERE id = ?",
                (prompt_tokens, completion_tokens, run_id),
            )

    async def add_tool_call(self, row: ToolCallRow) -> int:
        """Commit one nested call's audit row now (it survives a crash mid-run); return its id.

        The daemon adds the row as the call starts (``outcome="started"``)
        and completes it with :meth:`complete_tool_call` as it ends, so a
        crash leaves the evidence of every call that began. The thread is
        taken from the run row, which must exist.
        """
        started = canonical_timestamp(row.started, f"tool call {row.tool} started")
        arguments = _dumps(row.arguments)
        async with self._statement(f"adding tool call {row.tool} of run {row.run_id}") as db:
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
        async with self._statement(f"completing tool call {row.tool} of run {row.run_id}") as db:
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

    async def finish_run(
        self,
        run_id: str,
        status: str,
        records: Sequence[Record],
        metrics: RunMetrics,
        prompt_ids: Iterable[str],
        prompt_status: PromptStatus,
        *,
        error: str | None = None,
        reply: OutboxReply | None = None,
        scope: ScopeWrite | None = None,
    ) -> None:
        """Store a run's records, metrics, status and its prompts' status in ONE transaction.

        With ``reply`` the reply goes into the outbox in the same transaction
        (published after it, :mod:`sessions.outbox`), and with ``scope`` the
        thread's REPL dump that reflects this run.

        Records are chained in the order given: the first one's
        ``parentUuid`` is the thread's last record, each next one's the
        record before it. On any failure nothing of this call lands; the
        tool-call rows committed during the run stay. The token counts never
        go down: what :meth:`add_run_tokens` added as the run went stays when
        ``metrics`` knows less (a stopped run's).
        """
        if status not in RUN_STATUSES or status == "running":
            raise StoreError(f"a run cannot finish as {status!r}")
        if prompt_status not in PROMPT_STATUSES:
            raise StoreError(f"unknown prompt status {prompt_status!r}")
        # Serialize before taking the lock: a value that is not JSON fails here, cheaply.
        prepared = [
            (
                record.uuid,
                record.type,
                canonical_timestamp(record.timestamp, f"record {record.uuid} timestamp"),
                _dumps(record.message),
                None if record.tool_use_result is None else _dumps(record.tool_use_result),
            )
            for record in records
        ]
        counters = metrics.extra()
        extra = _dumps(counters) if counters else None
        ids = list(prompt_ids)
        now = now_iso()

        def finish(conn: sqlite3.Connection) -> None:
            found = conn.execute(
                "SELECT r.thread, th.session_id FROM runs r"
                " JOIN threads th ON th.id = r.thread WHERE r.id = ?",
                (run_id,),
            ).fetchone()
            if found is None:
                raise StoreError(f"finishing run {run_id}: no such run (start it first)")
            key, session = found
            parent = _scalar(
                conn,
                "SELECT uuid FROM records WHERE thread = ? ORDER BY seq DESC LIMIT 1",
                (key,),
            )
            rows = []
            for uuid, kind, timestamp, message, tool_use_result in prepared:
                rows.append(
                    (
                        uuid,
                        parent,
                        key,
                        session,
                        run_id,
                        kind,
                        timestamp,
                        message,
                        tool_use_result,
                        self.cwd,
                        self.version,
                    )
                )
                parent = uuid
            conn.executemany(
                "INSERT INTO records (uuid, parent_uuid, thread, session_id, run_id, type,"
                " timestamp, message, tool_use_result, cwd, version)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute(
                "UPDATE runs SET finished = ?, status = ?, rounds = ?, run_code_calls = ?,"
                " nested_calls = ?, bytes_in = ?, bytes_out = ?, final_round_forced = ?,"
                " prompt_tokens = max(prompt_tokens, ?),"
                " completion_tokens = max(completion_tokens, ?), extra = ?, error = ? WHERE id = ?",
                (
                    now,
                    status,
                    metrics.rounds,
                    metrics.run_code_calls,
                    metrics.nested_calls,
                    metrics.bytes_in,
                    metrics.bytes_out,
                    int(metrics.final_round_forced),
                    metrics.prompt_tokens,
                    metrics.completion_tokens,
                    extra,
                    error,
                    run_id,
                ),
            )
            _mark(conn, ids, prompt_status)
            conn.execute("UPDATE threads SET last_active = ? WHERE id = ?", (now, key))
            if reply is not None:
                put_reply(conn, reply)
            if scope is not None:
                put_scope(conn, scope)

        await self._batch(f"finishing run {run_id}", finish)

    # ---- cursors ---------------------------------------------------------

    async def set_cursor(self, channel: str, message_id: str) -> bool:
        """Advance the channel's cursor to ``message_id``; False when that would move it back.

        Message ids are sortable (ULID-style), so "back" is text order.
        """
        return await self._batch(
            f"setting the cursor of {channel}",
            lambda conn: _advance_cursor(conn, channel, message_id),
            transaction=False,
        )

    async def first_start_cursor(self, message_id: str) -> str:
        """The cursor of the daemon's first start: ``message_id`` when none is stored
        yet (then stored, in row :data:`FIRST_START`), else the one stored.

        A channel without a cursor of its own is read from there, so what was
        published after the first start is answered even if no message of it
        was handled before the daemon stopped.
        """
        async with self._transaction("recording the first start") as db:
            await db.execute(
                "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (channel) DO NOTHING",
                (FIRST_START, message_id, now_iso()),
            )
            stored = await self._scalar(
                db, "SELECT message_id FROM cursors WHERE channel = ?", (FIRST_START,)
            )
        return str(stored)

    async def claim_cursor_space(self, space: str) -> int:
        """Make the channel cursors ``space``'s ids; drop them if they were another's.

        A hub's ids (ULIDs) and NATS's (stream sequences) are different
        spaces: a cursor of one would skip or replay the other's messages.
        Returns how many cursors were dropped (their channels are then read
        from the first start, and prompts stored already are not run again).
        A database without the row has a hub's cursors. The first start's
        row is a time, good in both spaces, and stays.
        """
        async with self._transaction(f"claiming the cursors for {space}") as db:
            stored = await self._scalar(
                db, "SELECT message_id FROM cursors WHERE channel = ?", (CURSOR_SPACE,)
            )
            dropped = 0
            if (stored or "hub") != space:
                cursor = await db.execute(
                    "DELETE FROM cursors WHERE channel NOT IN (?, ?)", (FIRST_START, CURSOR_SPACE)
                )
                dropped = cursor.rowcount
            await db.execute(
                "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (channel) DO UPDATE"
                " SET message_id = excluded.message_id, updated = excluded.updated",
                (CURSOR_SPACE, space, now_iso()),
            )
        return dropped
