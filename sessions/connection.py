"""The one connection every port of the store shares; where driver errors become ours.

``Connection`` holds two aiosqlite connections per database file and
process: one writer, whose writes an ``asyncio.Lock`` serializes so each
logical change is exactly one transaction (``BEGIN IMMEDIATE`` …
``COMMIT``, rolled back on any error or cancellation; the hot ones run whole
on aiosqlite's thread as one job, ``batch``), and one reader
(``query_only``), which in WAL mode reads beside the writer without waiting
for it. Other processes (``asyncai audit`` while the daemon runs) open their
own; ``busy_timeout`` makes them queue briefly for the write lock instead of
failing.

Durability: WAL with ``synchronous=NORMAL``. A killed process loses nothing
that was committed; a power cut may lose the last commits, but only as a
whole and in order, so the channel cursor and the prompts it covers go back
together and the hub replays what was lost.

Every sqlite3/aiosqlite error leaves through ``driver_errors`` as
``StoreError`` (or a subclass) with the driver's exception as its
``__cause__``; a bad timestamp given by a caller leaves through
``canonical_timestamp`` the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import aiosqlite

from .errors import StoreClosedError, StoreError
from .ids import normalize_timestamp
from .schema import MIGRATIONS, Migration, migrate

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_DB_PATH",
    "DEFER_WITHIN",
    "Connection",
    "canonical_timestamp",
    "driver_errors",
    "json_text",
    "scalar",
    "sql_limit",
]

DEFAULT_DB_PATH = Path(".asyncai/asyncai.db")
"""Where the daemon keeps its database unless configured otherwise (``[sessions] db``)."""

DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a connection waits for another process's write lock before failing."""

# How long a failed connect's worker thread may take to stop (it has nothing to close).
_JOIN_TIMEOUT = 5.0

T = TypeVar("T")


def _package_version() -> str:
    try:
        return metadata.version("asyncai")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@contextmanager
def driver_errors(action: str) -> Iterator[None]:
    """Turn the driver's exceptions into ours, naming what was being done."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"{action}: {exc}") from exc


def canonical_timestamp(value: str, what: str) -> str:
    """``value`` as the store's canonical ISO timestamp; ``StoreError`` naming ``what`` if bad."""
    try:
        return normalize_timestamp(value)
    except ValueError as exc:
        raise StoreError(f"{what}: {exc}") from exc


def json_text(value: Any) -> str:
    """``value`` as the compact JSON text a column stores (UTF-8 safe)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (json.loads lets "\ud800" through from a model or a
        # tool) cannot be stored as UTF-8; JSON escapes keep it exactly.
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


def sql_limit(limit: int | None) -> int:
    """SQLite's LIMIT: a negative value means no limit."""
    if limit is None:
        return -1
    if limit < 0:
        raise StoreError(f"a limit cannot be negative: {limit}")
    return int(limit)


async def scalar(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of ``sql`` on ``db`` (None: no row)."""
    rows = list(await db.execute_fetchall(sql, params))
    return rows[0][0] if rows else None


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


class _Abandoned(Exception):
    """A batch whose caller was cancelled before it committed: rolled back instead."""


Deferred = Callable[[sqlite3.Connection], object]  # what it returns is not used

# The longest a deferred write waits for a write to go with (Connection.defer).
DEFER_WITHIN = 1.0


def _absorbed(work: object, deferred: Sequence[Deferred]) -> Sequence[Deferred]:
    """The deferred writes ``work`` writes itself, in their final form (its ``absorb``
    method, when it has one: ``RunWriter.finish_run``'s takes its run's start and its
    prompts' records, whose rows it would otherwise update right after)."""
    absorb = getattr(work, "absorb", None)
    return absorb(deferred) if absorb is not None and deferred else ()


def _write_deferred(conn: sqlite3.Connection, deferred: Sequence[Deferred]) -> None:
    """The deferred writes, each in a savepoint of the open transaction: one that fails
    is rolled back alone and dropped (its owner's next write finds it missing), so it
    never fails the write it went with."""
    for work in deferred:
        conn.execute("SAVEPOINT deferred")
        try:
            work(conn)
        except sqlite3.Error:
            conn.execute("ROLLBACK TO deferred")
        conn.execute("RELEASE deferred")


class _Batch(Generic[T]):
    """One write run whole on the writer's thread: ``work`` on its ``sqlite3.Connection``,
    between ``BEGIN IMMEDIATE`` and ``COMMIT`` when ``transaction``, rolled back there on
    any exception. ``cancelled`` is set (from the event loop) when its caller was
    cancelled: checked after the ``BEGIN`` (which may have waited for another process)
    and before the ``COMMIT``, it rolls the batch back as the cancelled
    ``transaction`` did.

    ``deferred`` (:meth:`Connection.defer`) are written first, in the same transaction,
    but for those ``work`` absorbs (:func:`_absorbed`: it writes them itself, in their
    final form); when ``work`` fails or is abandoned they are all written again alone,
    as they were deferred, in the same job.
    Deferred writes that could not be written at all (the ``BEGIN`` failed) are handed
    to ``unwritten`` (called on this thread), so they wait for the next write."""

    def __init__(
        self,
        db: aiosqlite.Connection,
        work: Callable[[sqlite3.Connection], T],
        transaction: bool,
        deferred: Sequence[Deferred] = (),
        unwritten: Callable[[Sequence[Deferred]], None] | None = None,
    ):
        self.db = db
        self.work = work
        self.transaction = transaction
        self.deferred = deferred
        self.unwritten = unwritten
        self.cancelled = False

    def __call__(self) -> T:
        conn = self.db._conn  # on aiosqlite's thread, the only one that may use it
        if not self.transaction:
            return self.work(conn)
        written = not self.deferred
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                taken = {id(d) for d in _absorbed(self.work, self.deferred)}
                _write_deferred(conn, [d for d in self.deferred if id(d) not in taken])
                if self.cancelled:
                    raise _Abandoned
                result = self.work(conn)
                if self.cancelled:
                    raise _Abandoned
                conn.commit()
                written = True
            except BaseException:
                with suppress(sqlite3.Error):
                    conn.rollback()
                if not written:
                    with suppress(sqlite3.Error):
                        conn.execute("BEGIN IMMEDIATE")
                        _write_deferred(conn, self.deferred)
                        conn.commit()
                        written = True
                raise
            return result
        finally:
            if not written and self.unwritten is not None:
                self.unwritten(self.deferred)


class Connection:
    """The writer and reader connections of one database file, and how to use them.

    The lifecycle (``open``, ``aclose``, ``async with``) is the ``Store``'s;
    the plumbing (``transaction``, ``batch``, ``statement``, ``read``) is
    what each port of the store (``writer.RunWriter``, ``queries.Queries``,
    ``approvals.Approvals`` ...) is built on: the ports of one ``Store``
    share this one connection.

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
        self._deferred: list[Deferred] = []  # writes that go with the next one (defer)
        # The oldest deferred write's deadline: a timer, set when the first write is
        # deferred and cancelled when a write takes them all, so the writes are written
        # alone only when nothing took them in time (not every second, which cut into a
        # prompt whose writes were still to come: bench/daemon.py's p99).
        self._timer: asyncio.TimerHandle | None = None
        self._flush_due = 0.0  # the loop time the timer fires at
        self._flushers: set[asyncio.Task[None]] = set()  # writing them alone

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
            await self._require_schema(self._writer)
            with driver_errors(f"opening {self.path}"):
                mode = await scalar(self._writer, "PRAGMA journal_mode = WAL")
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: cannot use WAL (journal_mode is {mode})")
                await self._writer.execute("PRAGMA synchronous = NORMAL")
            await migrate(self._writer, self._migrations)
            self._reader = await self._connect()
            with driver_errors(f"opening {self.path}"):
                await self._reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await self._close_connections()
            raise
        return self

    async def _require_schema(self, db: aiosqlite.Connection) -> None:
        """Refuse a file asyncai never migrated before anything is written to it: for a
        reader (``create=False``) any such file (empty, or another program's database),
        which it must not turn into an asyncai database nor switch to WAL; for the
        daemon, one that holds another program's tables (an empty file it makes ours)."""
        with driver_errors(f"opening {self.path}"):
            rows = await db.execute_fetchall(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        tables = [str(row[0]) for row in rows]
        if "schema_migrations" in tables:
            return
        if tables:
            raise StoreError(
                f"{self.path} is not an asyncai database (it has other tables: "
                f"{', '.join(tables[:3])}{', ...' if len(tables) > 3 else ''})"
            )
        if not self.create:
            raise StoreError(f"{self.path} is not an asyncai database (it has no asyncai schema)")

    async def _connect(self) -> aiosqlite.Connection:
        with driver_errors(f"opening {self.path}"):
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
        """Wait for the write in progress, write what was deferred, then close both
        connections. Idempotent."""
        self._stop_timer()
        for flusher in list(self._flushers):
            flusher.cancel()
            with suppress(asyncio.CancelledError):
                await flusher
        async with self._lock:
            if self._writer is not None and self._deferred:
                with suppress(StoreError):
                    await self._write_deferred_now("writing deferred writes")
            await self._close_connections()

    async def _close_connections(self) -> None:
        writer, reader = self._writer, self._reader
        self._writer = self._reader = None
        for db in (reader, writer):
            if db is not None:
                with driver_errors(f"closing {self.path}"):
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

    @asynccontextmanager
    async def transaction(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
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
            await self._write_deferred_now(action)
            try:
                with driver_errors(action):
                    await db.execute("BEGIN IMMEDIATE")
                    yield db
                    await db.commit()
            except BaseException:
                with suppress(sqlite3.Error):
                    await asyncio.shield(db.rollback())
                raise

    async def batch(
        self,
        action: str,
        work: Callable[[sqlite3.Connection], T],
        *,
        transaction: bool = True,
    ) -> T:
        """``work(conn)`` as ONE write transaction, run whole on the writer's thread.

        The same transaction as :meth:`transaction` (serialized with every
        other write, ``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any
        exception or a cancellation that lands before the commit), in one
        hand-off to aiosqlite's thread instead of one per statement (a prompt's
        three write transactions took 19 of them; each costs the event loop a
        queue put and a wake-up: bench/daemon.py). ``work`` runs on that
        thread, so it must not touch the event loop. ``transaction=False``
        runs it in autocommit mode (for one statement).

        aiosqlite has no public way to run a function on its thread;
        ``Connection._execute`` is how each of its own methods queues its call
        (``tests/test_sessions_batch.py`` fails if it goes).
        """
        async with self._lock:
            db = self._writer
            if db is None:
                raise StoreClosedError(f"the store {self.path} is not open")
            deferred: list[Deferred] = []
            if transaction:  # the deferred writes go in this transaction
                deferred, self._deferred = self._deferred, []
                if deferred:
                    self._stop_timer()
            else:  # autocommit work: they go first, alone
                await self._write_deferred_now(action)
            unwritten = self._unwritten_callback() if deferred else None
            batch = _Batch(db, work, transaction, deferred, unwritten)
            with driver_errors(action):
                try:
                    result: T = await db._execute(batch)
                except asyncio.CancelledError:
                    # The job runs on; the thread takes jobs in order, so the next
                    # writer's runs after its rollback (or its commit, if it was there).
                    batch.cancelled = True
                    raise
                return result

    @asynccontextmanager
    async def statement(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """The writer for ONE statement, serialized with every other write.

        In autocommit mode a single statement is its own transaction, so a
        change that is one statement skips the BEGIN/COMMIT round trips
        (a third of the cost of a one-row write).
        """
        async with self._lock:
            db = self._writer
            if db is None:
                raise StoreClosedError(f"the store {self.path} is not open")
            await self._write_deferred_now(action)
            with driver_errors(action):
                yield db

    def defer(self, work: Deferred, *, within: float = DEFER_WITHIN) -> None:
        """Write ``work`` with the next write on this connection, in its transaction, or
        on its own within ``within`` seconds, whichever comes first: a write whose row
        nothing needs before the writer's next one (a run's row: until the run writes,
        a crash leaves nothing of it to recover but its prompts, still queued).

        A crash before then loses it. Writes go in the order they were deferred, each
        in a savepoint: one that fails is dropped alone (its owner's next write finds
        its row missing) and never fails the write it went with.
        """
        self._deferred.append(work)
        self._flush_within(within)

    def _flush_within(self, within: float) -> None:
        """The deferred writes written alone in ``within`` seconds at the latest."""
        loop = asyncio.get_running_loop()
        due = loop.time() + within
        if self._timer is not None:
            if self._flush_due <= due:
                return
            self._timer.cancel()
        self._flush_due = due
        self._timer = loop.call_later(within, self._due)

    def _stop_timer(self) -> None:
        """A write took every deferred write: nothing is due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        """The timer: what is deferred still (nothing took it in time) is written alone."""
        self._timer = None
        if self._deferred:
            task = asyncio.get_running_loop().create_task(
                self._flush_due_now(), name="sessions-deferred-writes"
            )
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)

    async def _flush_due_now(self) -> None:
        with suppress(StoreError):  # closed meanwhile: aclose wrote them
            await self.flush()

    async def flush(self) -> None:
        """Write the deferred writes now, if any (one transaction)."""
        async with self._lock:
            if self._writer is None:
                raise StoreClosedError(f"the store {self.path} is not open")
            await self._write_deferred_now("writing deferred writes")

    async def _write_deferred_now(self, action: str) -> None:
        """The deferred writes as one transaction of their own (the lock held)."""
        db = self._writer
        deferred, self._deferred = self._deferred, []
        if not deferred or db is None:
            return
        self._stop_timer()
        batch = _Batch(db, lambda conn: None, True, deferred, self._unwritten_callback())
        with driver_errors(action):
            await db._execute(batch)

    def _unwritten_callback(self) -> Callable[[Sequence[Deferred]], None]:
        """For a batch's thread: deferred writes it could not write go back to the front
        of the queue, on the event loop, and wait for the next write."""
        loop = asyncio.get_running_loop()

        def back(deferred: Sequence[Deferred]) -> None:
            self._deferred[:0] = deferred
            if self._writer is not None:
                self._flush_within(DEFER_WITHIN)

        def handed(deferred: Sequence[Deferred]) -> None:
            with suppress(RuntimeError):  # the loop is closed: nothing waits for them
                loop.call_soon_threadsafe(back, deferred)

        return handed

    async def read(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """All rows of one query on the reader, which never waits for the writer."""
        db = self._reader
        if db is None:
            raise StoreClosedError(f"the store {self.path} is not open")
        with driver_errors(action):
            return list(await db.execute_fetchall(sql, params))

    async def scalar_read(self, action: str, sql: str, params: Sequence[Any]) -> Any:
        rows = await self.read(action, sql, params)
        return rows[0][0] if rows else None
