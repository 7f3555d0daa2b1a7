"""The SQLite store of threads, prompts, runs, transcript records, the audit and cursors.

One ``Store`` per database file and process. It holds two aiosqlite
connections: one writer, whose writes an ``asyncio.Lock`` serializes so
each logical change is exactly one transaction (``BEGIN IMMEDIATE`` …
``COMMIT``, rolled back on any error or cancellation), and one reader
(``query_only``), which in WAL mode reads beside the writer without
waiting for it. Other processes (``asyncai audit`` while the daemon runs)
open their own ``Store``; ``busy_timeout`` makes them queue briefly for the
write lock instead of failing.

Durability: WAL with ``synchronous=NORMAL``. A killed process loses nothing
that was committed; a power cut may lose the last commits, but only as a
whole and in order, so the channel cursor and the prompts it covers go back
together and the hub replays what was lost.

Every sqlite3/aiosqlite error leaves this module as ``StoreError`` (or a
subclass) with the driver's exception as its ``__cause__``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiosqlite

from .errors import StoreClosedError, StoreError, ThreadLookupError
from .history import HistoryBuilder
from .ids import normalize_timestamp, now_iso, session_id, thread_key
from .model import (
    AuditEntry,
    HistoryText,
    PromptStatus,
    Record,
    RunMetrics,
    StoredPrompt,
    StoredRecord,
    ThreadSummary,
    ToolCallRow,
)
from .schema import MIGRATIONS, Migration, migrate

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_DB_PATH",
    "PROMPT_STATUSES",
    "RUN_STATUSES",
    "Store",
    "audit_query",
]

DEFAULT_DB_PATH = Path(".asyncai/asyncai.db")
"""Where the daemon keeps its database unless configured otherwise (``[sessions] db``)."""

DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a connection waits for another process's write lock before failing."""

# How long a failed connect's worker thread may take to stop (it has nothing to close).
_JOIN_TIMEOUT = 5.0

PROMPT_STATUSES: tuple[PromptStatus, ...] = ("queued", "running", "done", "failed")
RUN_STATUSES = ("running", "done", "failed", "interrupted")

_HISTORY_PAGE = 64  # records read per query while building a history


def _package_version() -> str:
    try:
        return metadata.version("asyncai")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (json.loads lets "\ud800" through from a model or a
        # tool) cannot be stored as UTF-8; JSON escapes keep it exactly.
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def _canonical(value: str, what: str) -> str:
    try:
        return normalize_timestamp(value)
    except ValueError as exc:
        raise StoreError(f"{what}: {exc}") from exc


@contextmanager
def _driver_errors(action: str) -> Iterator[None]:
    """Turn the driver's exceptions into ours, naming what was being done."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"{action}: {exc}") from exc


async def _connect_joined(pending: aiosqlite.Connection) -> aiosqlite.Connection:
    """Await an aiosqlite connect; when it fails, wait for its worker thread to end.

    aiosqlite 0.22 stops the thread of a failed connect without waiting: the
    thread then reports to the event loop, and when a command exits at once
    that loop is closed and the thread prints a traceback.
    """
    try:
        return await pending
    except BaseException:
        thread = getattr(pending, "_thread", None)
        if thread is not None and thread.is_alive():
            with suppress(Exception):
                await asyncio.to_thread(thread.join, _JOIN_TIMEOUT)
        raise


class Store:
    """Transcripts, runs, prompts, the tool-call audit and channel cursors in one SQLite file.

    Use as ``async with Store(path) as store:`` or ``await store.open()`` …
    ``await store.aclose()``. ``open()`` creates the file and its directory
    (unless ``create=False``) and applies pending migrations.

    ``cwd`` and ``version`` go into every record's Claude Code envelope
    (default: the process's working directory and asyncai's version).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        cwd: str | None = None,
        version: str | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        self.path = Path(path)
        self.create = create
        self.busy_timeout = busy_timeout
        self.cwd = cwd if cwd is not None else os.getcwd()
        self.version = version if version is not None else _package_version()
        self._migrations = migrations
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    # ---- lifecycle -------------------------------------------------------

    async def open(self) -> Self:
        """Connect both connections, set the pragmas and migrate. Idempotent."""
        if self._writer is not None:
            return self
        if not self.create and not self.path.exists():
            raise StoreError(f"no database at {self.path}")
        if self.create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory of {self.path}: {exc}") from exc
        try:
            self._writer = await self._connect()
            with _driver_errors(f"opening {self.path}"):
                mode = await self._scalar(self._writer, "PRAGMA journal_mode = WAL")
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: cannot use WAL (journal_mode is {mode})")
                await self._writer.execute("PRAGMA synchronous = NORMAL")
            await migrate(self._writer, self._migrations)
            self._reader = await self._connect()
            with _driver_errors(f"opening {self.path}"):
                await self._reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await self._close_connections()
            raise
        return self

    async def _connect(self) -> aiosqlite.Connection:
        with _driver_errors(f"opening {self.path}"):
            db = await _connect_joined(
                aiosqlite.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
            )
            try:
                await db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                await db.execute("PRAGMA foreign_keys = ON")
                # a file that is not SQLite fails here, not at the first query
                await db.execute_fetchall("SELECT count(*) FROM sqlite_master")
            except BaseException:
                await db.close()
                raise
            return db

    async def aclose(self) -> None:
        """Wait for the write in progress, then close both connections. Idempotent."""
        async with self._lock:
            await self._close_connections()

    async def _close_connections(self) -> None:
        writer, reader = self._writer, self._reader
        self._writer = self._reader = None
        for db in (reader, writer):
            if db is not None:
                with _driver_errors(f"closing {self.path}"):
                    await db.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ---- plumbing --------------------------------------------------------

    @staticmethod
    async def _scalar(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = list(await db.execute_fetchall(sql, params))
        return rows[0][0] if rows else None

    @asynccontextmanager
    async def _transaction(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction on the writer, serialized with every other write.

        Rolled back on any exception, cancellation included. aiosqlite runs
        each connection's calls in order on one thread, so a rollback queued
        after a cancelled statement still runs after it and before the next
        writer's ``BEGIN``.
        """
        async with self._lock:
            db = self._writer
            if db is None:
                raise StoreClosedError(f"the store {self.path} is not open")
            try:
                with _driver_errors(action):
                    await db.execute("BEGIN IMMEDIATE")
                    yield db
                    await db.commit()
            except BaseException:
                with suppress(sqlite3.Error):
                    await asyncio.shield(db.rollback())
                raise

    @asynccontextmanager
    async def _statement(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """The writer for ONE statement, serialized with every other write.

        In autocommit mode a single statement is its own transaction, so a
        change that is one statement skips the BEGIN/COMMIT round trips
        (a third of the cost of a one-row write).
        """
        async with self._lock:
            db = self._writer
            if db is None:
                raise StoreClosedError(f"the store {self.path} is not open")
            with _driver_errors(action):
                yield db

    async def _read(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        db = self._reader
        if db is None:
            raise StoreClosedError(f"the store {self.path} is not open")
        with _driver_errors(action):
            return list(await db.execute_fetchall(sql, params))

    async def _ensure_thread(self, db: aiosqlite.Connection, channel: str, thread_id: str) -> str:
        key = thread_key(channel, thread_id)
        now = now_iso()
        await db.execute(
            "INSERT INTO threads (id, channel, thread_id, session_id, created, last_active)"
            " VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET last_active = excluded.last_active",
            (key, channel, thread_id, session_id(channel, thread_id), now, now),
        )
        return key

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
        ts = _canonical(ts, f"prompt {message_id} ts")
        async with self._transaction(f"recording prompt {message_id}") as db:
            if await self._scalar(db, "SELECT 1 FROM prompts WHERE id = ?", (message_id,)):
                new = False
            else:
                key = await self._ensure_thread(db, channel, thread_id)
                now = now_iso()
                await db.execute(
                    "INSERT INTO prompts (id, thread, sender, text, ts, received, status, updated)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                    (message_id, key, sender, text, ts, now, now),
                )
                new = True
            if advance_cursor:
                await self._advance_cursor(db, channel, message_id)
            return new

    _PROMPT_COLUMNS = (
        "p.id, th.channel, th.thread_id, p.sender, p.text, p.ts, p.status, p.run_id"
        " FROM prompts p JOIN threads th ON th.id = p.thread"
    )

    async def pending_prompts(
        self, channel: str | None = None, thread_id: str | None = None
    ) -> list[StoredPrompt]:
        """Prompts recorded but not done or failed (queued or running), oldest first.

        With no arguments, across all threads (restart recovery); with
        ``channel`` and ``thread_id``, one thread's.
        """
        sql = f"SELECT {self._PROMPT_COLUMNS} WHERE p.status IN ('queued', 'running')"
        params: list[Any] = []
        if channel is not None or thread_id is not None:
            if channel is None or thread_id is None:
                raise StoreError("pending_prompts takes both channel and thread_id, or neither")
            sql += " AND p.thread = ?"
            params.append(thread_key(channel, thread_id))
        sql += " ORDER BY p.ts, p.id"
        rows = await self._read("reading pending prompts", sql, params)
        return [StoredPrompt(*row) for row in rows]

    async def get_prompts(self, ids: Iterable[str]) -> list[StoredPrompt]:
        """The stored prompts with these message ids (unknown ids are skipped), oldest first."""
        wanted = list(ids)
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        rows = await self._read(
            "reading prompts",
            f"SELECT {self._PROMPT_COLUMNS} WHERE p.id IN ({marks}) ORDER BY p.ts, p.id",
            wanted,
        )
        return [StoredPrompt(*row) for row in rows]

    async def claim_prompts(self, ids: Iterable[str], run_id: str) -> int:
        """Mark prompts ``running`` under ``run_id`` (which must be started); return how many.

        Prompts already ``done`` are left alone: a prompt is answered once.
        """
        async with self._transaction(f"claiming prompts for run {run_id}") as db:
            return await self._claim(db, list(ids), run_id)

    @staticmethod
    async def _claim(db: aiosqlite.Connection, ids: list[str], run_id: str) -> int:
        now = now_iso()
        cursor = await db.executemany(
            "UPDATE prompts SET status = 'running', run_id = ?, updated = ?"
            " WHERE id = ? AND status != 'done'",
            [(run_id, now, prompt_id) for prompt_id in ids],
        )
        return cursor.rowcount

    async def mark_prompts(self, ids: Iterable[str], status: PromptStatus) -> int:
        """Set the status of these prompts; return how many exist."""
        if status not in PROMPT_STATUSES:
            raise StoreError(f"unknown prompt status {status!r}")
        async with self._transaction(f"marking prompts {status}") as db:
            return await self._mark(db, list(ids), status)

    @staticmethod
    async def _mark(db: aiosqlite.Connection, ids: list[str], status: str) -> int:
        now = now_iso()
        cursor = await db.executemany(
            "UPDATE prompts SET status = ?, updated = ? WHERE id = ?",
            [(status, now, prompt_id) for prompt_id in ids],
        )
        return cursor.rowcount

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
        """After a restart: close runs left ``running`` as ``interrupted`` and requeue
        their unfinished prompts. Returns the interrupted run ids.

        Call once at start-up, before any run starts, then read
        ``pending_prompts()``.
        """
        now = now_iso()
        async with self._transaction("recovering interrupted runs") as db:
            runs = [
                row[0]
                for row in await db.execute_fetchall(
                    "SELECT id FROM runs WHERE status = 'running' ORDER BY started"
                )
            ]
            await db.execute(
                "UPDATE runs SET status = 'interrupted', finished = ?, error = ?"
                " WHERE status = 'running'",
                (now, error),
            )
            await db.execute(
                "UPDATE prompts SET status = 'queued', run_id = NULL, updated = ?"
                " WHERE status = 'running'",
                (now,),
            )
            return runs

    # ---- runs ------------------------------------------------------------

    async def start_run(
        self, run_id: str, channel: str, thread_id: str, prompt_ids: Iterable[str] = ()
    ) -> None:
        """Write the run row (status ``running``) and claim ``prompt_ids`` for it, at once."""
        ids = list(prompt_ids)
        async with self._transaction(f"starting run {run_id}") as db:
            key = await self._ensure_thread(db, channel, thread_id)
            await db.execute(
                "INSERT INTO runs (id, thread, started, status) VALUES (?, ?, ?, 'running')",
                (run_id, key, now_iso()),
            )
            if ids:
                await self._claim(db, ids, run_id)

    async def add_tool_call(self, row: ToolCallRow) -> int:
        """Commit one nested call's audit row now (it survives a crash mid-run); return its id.

        The thread is taken from the run row, which must exist.
        """
        started = _canonical(row.started, f"tool call {row.tool} started")
        arguments = _dumps(row.arguments)
        async with self._statement(f"adding tool call {row.tool} of run {row.run_id}") as db:
            cursor = await db.execute(
                "INSERT INTO tool_calls (run_id, thread, record_uuid, tool, arguments, is_error,"
                " bytes, mutating, started, duration_ms)"
                " SELECT id, thread, ?, ?, ?, ?, ?, ?, ?, ? FROM runs WHERE id = ?",
                (
                    row.record_uuid,
                    row.tool,
                    arguments,
                    int(row.is_error),
                    int(row.bytes),
                    int(row.mutating),
                    started,
                    float(row.duration_ms),
                    row.run_id,
                ),
            )
        if cursor.rowcount != 1:
            raise StoreError(f"tool call {row.tool}: no run {row.run_id!r} (start it first)")
        return int(cursor.lastrowid or 0)

    async def finish_run(
        self,
        run_id: str,
        status: str,
        records: Sequence[Record],
        metrics: RunMetrics,
        prompt_ids: Iterable[str],
        prompt_status: PromptStatus,
        error: str | None = None,
    ) -> None:
        """Store a run's records, metrics, status and its prompts' status in ONE transaction.

        Records are chained in the order given: the first one's
        ``parentUuid`` is the thread's last record, each next one's the
        record before it. On any failure nothing of this call lands; the
        tool-call rows committed during the run stay.
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
                _canonical(record.timestamp, f"record {record.uuid} timestamp"),
                _dumps(record.message),
                None if record.tool_use_result is None else _dumps(record.tool_use_result),
            )
            for record in records
        ]
        extra = _dumps(metrics.extra) if metrics.extra else None
        ids = list(prompt_ids)
        now = now_iso()
        async with self._transaction(f"finishing run {run_id}") as db:
            found = list(
                await db.execute_fetchall(
                    "SELECT r.thread, th.session_id FROM runs r"
                    " JOIN threads th ON th.id = r.thread WHERE r.id = ?",
                    (run_id,),
                )
            )
            if not found:
                raise StoreError(f"finishing run {run_id}: no such run (start it first)")
            key, session = found[0]
            parent = await self._scalar(
                db,
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
            await db.executemany(
                "INSERT INTO records (uuid, parent_uuid, thread, session_id, run_id, type,"
                " timestamp, message, tool_use_result, cwd, version)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            await db.execute(
                "UPDATE runs SET finished = ?, status = ?, rounds = ?, run_code_calls = ?,"
                " nested_calls = ?, bytes_in = ?, bytes_out = ?, final_round_forced = ?,"
                " prompt_tokens = ?, completion_tokens = ?, extra = ?, error = ? WHERE id = ?",
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
            await self._mark(db, ids, prompt_status)
            await db.execute("UPDATE threads SET last_active = ? WHERE id = ?", (now, key))

    async def run_metrics(self, run_id: str) -> tuple[str, RunMetrics, str | None] | None:
        """A run's ``(status, metrics, error)``, or None when there is no such run."""
        rows = await self._read(
            f"reading run {run_id}",
            "SELECT status, rounds, run_code_calls, nested_calls, bytes_in, bytes_out,"
            " final_round_forced, prompt_tokens, completion_tokens, extra, error"
            " FROM runs WHERE id = ?",
            (run_id,),
        )
        if not rows:
            return None
        status, *counts, extra, error = rows[0]
        metrics = RunMetrics(*counts[:5], bool(counts[5]), *counts[6:])
        metrics.extra = json.loads(extra) if extra else {}
        return status, metrics, error

    # ---- history and cursors --------------------------------------------

    async def history(
        self, channel: str, thread_id: str, turns: int = 20, chars: int = 24_000
    ) -> list[HistoryText]:
        """The thread's earlier user and assistant text (no tool results), oldest first.

        The newest ``turns`` turns whose texts add up to at most ``chars``
        characters (consecutive texts of one role form one turn).
        """
        key = thread_key(channel, thread_id)
        builder = HistoryBuilder(turns, chars)
        before: int | None = None
        while not builder.full:
            sql = "SELECT seq, type, message FROM records WHERE thread = ?"
            params: list[Any] = [key]
            if before is not None:
                sql += " AND seq < ?"
                params.append(before)
            sql += " ORDER BY seq DESC LIMIT ?"
            params.append(_HISTORY_PAGE)
            rows = await self._read(f"reading the history of {key}", sql, params)
            for seq, kind, message in rows:
                if builder.full:
                    break
                builder.add(kind, json.loads(message))
                before = seq
            if len(rows) < _HISTORY_PAGE:
                break
        return builder.result()

    async def get_cursor(self, channel: str) -> str | None:
        """The last message id handled on ``channel``, or None."""
        return await self._scalar_read(
            f"reading the cursor of {channel}",
            "SELECT message_id FROM cursors WHERE channel = ?",
            (channel,),
        )

    async def set_cursor(self, channel: str, message_id: str) -> bool:
        """Advance the channel's cursor to ``message_id``; False when that would move it back.

        Message ids are sortable (ULID-style), so "back" is text order.
        """
        async with self._statement(f"setting the cursor of {channel}") as db:
            return await self._advance_cursor(db, channel, message_id)

    @staticmethod
    async def _advance_cursor(db: aiosqlite.Connection, channel: str, message_id: str) -> bool:
        cursor = await db.execute(
            "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
            " ON CONFLICT (channel) DO UPDATE"
            " SET message_id = excluded.message_id, updated = excluded.updated"
            " WHERE excluded.message_id > cursors.message_id",
            (channel, message_id, now_iso()),
        )
        return cursor.rowcount == 1

    async def _scalar_read(self, action: str, sql: str, params: Sequence[Any]) -> Any:
        rows = await self._read(action, sql, params)
        return rows[0][0] if rows else None

    # ---- what people read ------------------------------------------------

    async def threads(self, limit: int | None = 50) -> list[ThreadSummary]:
        """The most recently active threads with their counts, newest first."""
        rows = await self._read(
            "listing threads",
            "SELECT th.channel, th.thread_id, th.session_id, th.created, th.last_active,"
            " (SELECT count(*) FROM prompts p WHERE p.thread = th.id),"
            " (SELECT count(*) FROM runs r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM records r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id AND t.mutating = 1)"
            " FROM threads th ORDER BY th.last_active DESC, th.id LIMIT ?",
            (_limit(limit),),
        )
        return [ThreadSummary(*row) for row in rows]

    async def resolve_thread(self, thread_id: str, channel: str | None = None) -> tuple[str, str]:
        """``(channel, thread_id)`` of a thread named by its id (and channel, if ambiguous).

        Raises ``ThreadLookupError`` when no thread matches or several
        channels hold this id and ``channel`` is None.
        """
        if channel is not None:
            rows = await self._read(
                "looking up a thread",
                "SELECT channel FROM threads WHERE channel = ? AND thread_id = ?",
                (channel, thread_id),
            )
        else:
            rows = await self._read(
                "looking up a thread",
                "SELECT channel FROM threads WHERE thread_id = ? ORDER BY channel",
                (thread_id,),
            )
        if not rows:
            where = f" in {channel}" if channel is not None else ""
            raise ThreadLookupError(f"no thread {thread_id!r}{where}")
        if len(rows) > 1:
            channels = ", ".join(row[0] for row in rows)
            raise ThreadLookupError(
                f"thread {thread_id!r} exists in several channels ({channels}): name one"
            )
        return rows[0][0], thread_id

    async def audit(
        self,
        *,
        thread: str | None = None,
        channel: str | None = None,
        tool: str | None = None,
        mutating: bool | None = None,
        since: str | None = None,
        limit: int | None = 100,
    ) -> list[AuditEntry]:
        """Nested tool calls, newest first, filtered by every argument that is not None.

        ``thread`` is a thread id (in any channel unless ``channel`` is
        given); ``since`` an ISO timestamp (calls started at or after it).
        Every value is a bound parameter.
        """
        keys: list[str] | None = None
        if thread is not None:
            if channel is not None:
                keys = [thread_key(channel, thread)]
            else:
                # Resolved first so that one thread (the usual case) is an
                # equality on the index and "newest first" needs no sort.
                found = await self._read(
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
        )
        rows = await self._read("reading the audit", sql, params)
        return [
            AuditEntry(
                id=row[0],
                run_id=row[1],
                channel=row[2],
                thread_id=row[3],
                record_uuid=row[4],
                tool=row[5],
                arguments=json.loads(row[6]),
                is_error=bool(row[7]),
                bytes=row[8],
                mutating=bool(row[9]),
                started=row[10],
                duration_ms=row[11],
            )
            for row in rows
        ]

    async def explain(self, sql: str, params: Sequence[Any] = ()) -> list[str]:
        """``EXPLAIN QUERY PLAN`` of a query, one line per step (for checks and benchmarks)."""
        rows = await self._read("explaining a query", f"EXPLAIN QUERY PLAN {sql}", params)
        return [row[-1] for row in rows]

    async def transcript(self, thread_id: str, channel: str | None = None) -> list[StoredRecord]:
        """Every record of a thread with its envelope, in transcript (parentUuid) order."""
        channel, thread_id = await self.resolve_thread(thread_id, channel)
        rows = await self._read(
            f"reading the transcript of {thread_id}",
            "SELECT uuid, parent_uuid, session_id, run_id, type, timestamp, message,"
            " tool_use_result, cwd, version, is_sidechain, user_type"
            " FROM records WHERE thread = ? ORDER BY seq",
            (thread_key(channel, thread_id),),
        )
        return [
            StoredRecord(
                uuid=row[0],
                parent_uuid=row[1],
                session_id=row[2],
                channel=channel,
                thread_id=thread_id,
                run_id=row[3],
                type=row[4],
                timestamp=row[5],
                message=json.loads(row[6]),
                tool_use_result=None if row[7] is None else json.loads(row[7]),
                cwd=row[8],
                version=row[9],
                is_sidechain=bool(row[10]),
                user_type=row[11],
            )
            for row in rows
        ]

    async def integrity_check(self) -> str:
        """``PRAGMA integrity_check``'s verdict: ``"ok"`` for a sound file."""
        rows = await self._read("checking integrity", "PRAGMA integrity_check")
        return "\n".join(str(row[0]) for row in rows)


def _limit(limit: int | None) -> int:
    """SQLite's LIMIT: a negative value means no limit."""
    if limit is None:
        return -1
    if limit < 0:
        raise StoreError(f"a limit cannot be negative: {limit}")
    return int(limit)


def audit_query(
    *,
    thread_keys: Sequence[str] | None = None,
    channel: str | None = None,
    tool: str | None = None,
    mutating: bool | None = None,
    since: str | None = None,
    limit: int | None = 100,
) -> tuple[str, list[Any]]:
    """The audit's SQL and parameters. Filters are bound, never spliced into the text.

    ``thread_keys`` are thread keys (``ids.thread_key``); an empty list
    matches nothing.
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
    if since is not None:
        where.append("t.started >= ?")
        params.append(_canonical(since, "since"))
    sql = (
        "SELECT t.id, t.run_id, th.channel, th.thread_id, t.record_uuid, t.tool, t.arguments,"
        " t.is_error, t.bytes, t.mutating, t.started, t.duration_ms"
        # CROSS JOIN keeps tool_calls the outer loop, so "newest first" walks
        # an index and stops at the limit even when filtering on the channel.
        " FROM tool_calls t CROSS JOIN threads th ON th.id = t.thread"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.started DESC, t.id DESC LIMIT ?"
    params.append(_limit(limit))
    return sql, params
