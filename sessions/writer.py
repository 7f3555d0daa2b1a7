"""The prompt and run writer: what the runtime writes as a prompt goes through.

``RunWriter`` records and claims prompts, starts and finishes runs (a run's
end stores its records, metrics, prompt statuses, reply and REPL dump at
once), adds the tokens a run spends as it goes, and recovers after a
restart. Each public method is exactly one transaction (or one
autocommitted statement) on the shared writer connection; those of every
prompt (recording it, starting and finishing its run) run whole on the
writer's thread in one job (``Connection.batch``), their statements in the
plain functions below.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .approvals import PAUSED_RUN
from .connection import Connection, canonical_timestamp, json_text
from .cursors import move_cursor
from .errors import StoreError
from .ids import now_iso, session_id, thread_key
from .model import PromptStatus, Record, RunMetrics
from .outbox import Ack, OutboxReply, ScopeWrite, mark_acked, put_reply, put_scope

__all__ = ["PROMPT_STATUSES", "RUN_STATUSES", "RunWriter"]

PROMPT_STATUSES: tuple[PromptStatus, ...] = ("queued", "running", "done", "failed")
RUN_STATUSES = ("running", "done", "failed", "interrupted")


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


@dataclass(eq=False)
class _PromptRecord:
    """A prompt's record put off (``record_prompt`` with ``defer``): the prompt row,
    the cursor's move and the acks it carries. Called, it writes them as ``queued``;
    its run's end may write them in their final form instead (:class:`_Finish`)."""

    channel: str
    thread_id: str
    message_id: str
    sender: str
    text: str
    ts: str
    advance_cursor: bool
    acked: Sequence[Ack]

    def __call__(self, conn: sqlite3.Connection) -> bool:
        if _scalar(conn, "SELECT 1 FROM prompts WHERE id = ?", (self.message_id,)):
            new = False
        else:
            key = _ensure_thread(conn, self.channel, self.thread_id)
            now = now_iso()
            conn.execute(
                "INSERT INTO prompts (id, thread, sender, text, ts, received, status, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                (self.message_id, key, self.sender, self.text, self.ts, now, now),
            )
            new = True
        self.carried(conn)
        return new

    def carried(self, conn: sqlite3.Connection) -> None:
        """The cursor's move and the acks that go with the prompt."""
        if self.advance_cursor:
            move_cursor(conn, self.channel, self.message_id)
        if self.acked:
            mark_acked(conn, self.acked)


@dataclass(eq=False)
class _RunStart:
    """A run's row and its prompts' claim put off (``start_run`` with ``defer``)."""

    run_id: str
    channel: str
    thread_id: str
    ids: list[str]
    started: str

    def __call__(self, conn: sqlite3.Connection) -> None:
        key = _ensure_thread(conn, self.channel, self.thread_id)
        conn.execute(
            "INSERT INTO runs (id, thread, started, status) VALUES (?, ?, ?, 'running')",
            (self.run_id, key, self.started),
        )
        if self.ids:
            _claim(conn, self.ids, self.run_id)


_RECORD = (
    "INSERT INTO records (uuid, parent_uuid, thread, session_id, run_id, type,"
    " timestamp, message, tool_use_result, cwd, version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(eq=False)
class _Finish:
    """A run's end (``RunWriter.finish_run``), run whole on the writer's thread.

    When the run's start and its prompts' records are still deferred, all in the
    transaction this end goes in (the usual case at a channel's live edge: a run
    that wrote nothing before its end), it :meth:`absorb` them and writes their
    rows in their final form: the prompts inserted with their final status, the
    run's row with its end, the thread once; not inserted ``queued`` and
    ``running`` to be updated a moment later in the same transaction (23
    statements a prompt become 12: bench/daemon.py's writer thread). The same
    rows either way, in one transaction either way."""

    run_id: str
    status: str
    prepared: Sequence[tuple[str, str, str, str, str | None]]
    metrics: RunMetrics
    extra: str | None
    ids: list[str]
    prompt_status: str
    error: str | None
    reply: OutboxReply | None
    scope: ScopeWrite | None
    cwd: str
    version: str
    start: _RunStart | None = None
    records: tuple[_PromptRecord, ...] = ()

    def absorb(self, deferred: Sequence[Any]) -> Sequence[Any]:
        """From the deferred writes of this transaction: this run's start and the
        records of all its prompts, which this end then writes; else none."""
        start = next(
            (d for d in deferred if isinstance(d, _RunStart) and d.run_id == self.run_id), None
        )
        if start is None or start.ids != self.ids:
            return ()
        records = {
            d.message_id: d
            for d in reversed(deferred)  # the first record of an id wins
            if isinstance(d, _PromptRecord) and d.message_id in self.ids
        }
        if len(records) != len(set(self.ids)):
            return ()
        self.start, self.records = start, tuple(records[i] for i in dict.fromkeys(self.ids))
        return (start, *self.records)

    def __call__(self, conn: sqlite3.Connection) -> None:
        now = now_iso()
        if self.start is not None:
            key, session = self._started(conn, now)
        else:
            found = conn.execute(
                "SELECT r.thread, th.session_id FROM runs r"
                " JOIN threads th ON th.id = r.thread WHERE r.id = ?",
                (self.run_id,),
            ).fetchone()
            if found is None:
                raise StoreError(f"finishing run {self.run_id}: no such run (start it first)")
            key, session = found
        parent = _scalar(
            conn, "SELECT uuid FROM records WHERE thread = ? ORDER BY seq DESC LIMIT 1", (key,)
        )
        rows = []
        for uuid, kind, timestamp, message, tool_use_result in self.prepared:
            rows.append(
                (
                    uuid,
                    parent,
                    key,
                    session,
                    self.run_id,
                    kind,
                    timestamp,
                    message,
                    tool_use_result,
                    self.cwd,
                    self.version,
                )
            )
            parent = uuid
        conn.executemany(_RECORD, rows)
        if self.start is None:
            conn.execute(
                "UPDATE runs SET finished = ?, status = ?, rounds = ?, run_code_calls = ?,"
                " nested_calls = ?, bytes_in = ?, bytes_out = ?, final_round_forced = ?,"
                " prompt_tokens = max(prompt_tokens, ?),"
                " completion_tokens = max(completion_tokens, ?), extra = ?, error = ? WHERE id = ?",
                (*self._end(now), self.run_id),
            )
            _mark(conn, self.ids, self.prompt_status)
            conn.execute("UPDATE threads SET last_active = ? WHERE id = ?", (now, key))
        if self.reply is not None:
            put_reply(conn, self.reply)
        if self.scope is not None:
            put_scope(conn, self.scope)

    def _end(self, now: str) -> tuple[Any, ...]:
        """The run's end: the runs table's columns from ``finished`` to ``error``."""
        m = self.metrics
        return (
            now,
            self.status,
            m.rounds,
            m.run_code_calls,
            m.nested_calls,
            m.bytes_in,
            m.bytes_out,
            int(m.final_round_forced),
            m.prompt_tokens,
            m.completion_tokens,
            self.extra,
            self.error,
        )

    def _started(self, conn: sqlite3.Connection, now: str) -> tuple[str, str]:
        """The absorbed start and records in their final form; the thread's key and
        session."""
        start = self.start
        assert start is not None
        key = _ensure_thread(conn, start.channel, start.thread_id)
        session = session_id(start.channel, start.thread_id)
        conn.execute(
            "INSERT INTO runs (id, thread, started, finished, status, rounds, run_code_calls,"
            " nested_calls, bytes_in, bytes_out, final_round_forced, prompt_tokens,"
            " completion_tokens, extra, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.run_id, key, start.started, *self._end(now)),
        )
        for record in self.records:
            inserted = conn.execute(
                "INSERT INTO prompts"
                " (id, thread, sender, text, ts, received, status, run_id, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (
                    record.message_id,
                    key,
                    record.sender,
                    record.text,
                    record.ts,
                    now,
                    self.prompt_status,
                    self.run_id,
                    now,
                ),
            ).rowcount
            if inserted:
                conn.execute(
                    "INSERT OR IGNORE INTO run_senders (sender, started, run_id) VALUES (?, ?, ?)",
                    (record.sender, start.started, self.run_id),
                )
            else:  # stored after all: claimed and marked as the start and the end would
                _claim(conn, [record.message_id], self.run_id)
                _mark(conn, [record.message_id], self.prompt_status)
            record.carried(conn)
        return key, session


def _mark(conn: sqlite3.Connection, ids: list[str], status: str) -> int:
    now = now_iso()
    cursor = conn.executemany(
        "UPDATE prompts SET status = ?, updated = ? WHERE id = ?",
        [(status, now, prompt_id) for prompt_id in ids],
    )
    return cursor.rowcount


class RunWriter:
    """The prompt and run writer: each change one transaction on the shared writer."""

    def __init__(self, db: Connection):
        self._db = db

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
        acked: Sequence[Ack] = (),
        defer: bool = False,
    ) -> bool:
        """Store an inbound prompt as ``queued``; False when this message id is already stored.

        Idempotent by the channel's message id, so a replayed message is
        never queued twice. With ``advance_cursor`` the channel's cursor
        moves to ``message_id`` in the same transaction (never backwards);
        ``acked`` replies are marked acknowledged in it too (written later
        than their ack: one transaction fewer).

        With ``defer`` all of it is written with the next write on this store, in
        its transaction (``Connection.defer``: within a second at the latest), and
        True is returned unread: for a caller that knows the id is not stored (newer
        than every stored prompt). Until then a crash loses the prompt and the
        cursor's move together, so the channel's replay from the cursor brings the
        prompt back.
        """
        ts = canonical_timestamp(ts, f"prompt {message_id} ts")
        record = _PromptRecord(
            channel, thread_id, message_id, sender, text, ts, advance_cursor, acked
        )
        if defer:
            self._db.defer(record)
            return True
        return await self._db.batch(f"recording prompt {message_id}", record)

    async def claim_prompts(self, ids: Iterable[str], run_id: str) -> int:
        """Mark prompts ``running`` under ``run_id`` (which must be started); return how many.

        Prompts already ``done`` are left alone: a prompt is answered once.
        """
        listed = list(ids)
        return await self._db.batch(
            f"claiming prompts for run {run_id}", lambda conn: _claim(conn, listed, run_id)
        )

    async def mark_prompts(self, ids: Iterable[str], status: PromptStatus) -> int:
        """Set the status of these prompts; return how many exist."""
        if status not in PROMPT_STATUSES:
            raise StoreError(f"unknown prompt status {status!r}")
        listed = list(ids)
        return await self._db.batch(
            f"marking prompts {status}", lambda conn: _mark(conn, listed, status)
        )

    async def requeue_prompts(self, ids: Iterable[str]) -> int:
        """Put unfinished prompts back to ``queued`` with no run (a run was cancelled)."""
        now = now_iso()
        async with self._db.transaction("requeueing prompts") as db:
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
        async with self._db.transaction("recovering interrupted runs") as db:
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
        self,
        run_id: str,
        channel: str,
        thread_id: str,
        prompt_ids: Iterable[str] = (),
        *,
        defer: bool = False,
    ) -> None:
        """Write the run row (status ``running``) and claim ``prompt_ids`` for it, at once.

        With ``defer`` they are written with the next write on this store, in its
        transaction (``Connection.defer``: within a second at the latest), so a run
        that writes nothing else before its end costs no transaction of its own. Until
        then a crash leaves its prompts ``queued``, which the next start runs again
        as it runs those of a run left ``running``; every write of the run itself (its
        tool calls, tokens, approval, end) goes after this one, in order.
        """
        start = _RunStart(run_id, channel, thread_id, list(prompt_ids), now_iso())
        if defer:
            self._db.defer(start)
        else:
            await self._db.batch(f"starting run {run_id}", start)

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one model response's tokens to the run's row now, as they are spent.

        So a run that is stopped, paused, cut off at shutdown or killed still
        counts them (the per-sender token limit reads them); :meth:`finish_run`
        never lowers them.
        """
        async with self._db.statement(f"adding the tokens of run {run_id}") as db:
            await db.execute(
                "UPDATE runs SET prompt_tokens = prompt_tokens + ?,"
                " completion_tokens = completion_tokens + ? WHERE id = ?",
                (prompt_tokens, completion_tokens, run_id),
            )

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
                json_text(record.message),
                None if record.tool_use_result is None else json_text(record.tool_use_result),
            )
            for record in records
        ]
        counters = metrics.extra()
        finish = _Finish(
            run_id,
            status,
            prepared,
            metrics,
            json_text(counters) if counters else None,
            list(prompt_ids),
            prompt_status,
            error,
            reply,
            scope,
            self._db.cwd,
            self._db.version,
        )
        await self._db.batch(f"finishing run {run_id}", finish)
