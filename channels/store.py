"""The hub's message store: its own SQLite file (aiosqlite, WAL).

One writer connection, used only by the hub's writer task, so batches commit
in the order their ids were assigned; one read connection for ``subscribed``
bounds and ``since`` replay, which WAL lets run beside the writer.

Schema (``PRAGMA user_version`` counts the migrations applied)::

    messages(id TEXT PRIMARY KEY,       -- sortable, assigned by the hub
             channel TEXT, thread TEXT, reply_to TEXT,
             sender TEXT,               -- the hub's view of who published it
             text TEXT, more INTEGER,   -- more: a split text continues
             client_id TEXT)            -- idempotency key, unique per sender
    index (channel, id); unique index (sender, client_id); index (thread)

A thread belongs to one channel (issue 26): a publish whose ``thread`` has a
retained message in another channel (its root, whose id is the thread's id,
or any message in it) is refused, not stored (:class:`Refused`). A thread
with no retained message (never seen, or pruned) is taken as given: the
daemon keys a thread by channel and id, so such a thread is new in its
channel and reaches nothing of another.

Retention: messages older than ``retention_age`` seconds go, and each channel
keeps at most ``retention_count``. A ``client_id`` is remembered as long as its
message is retained, across hub restarts.

``synchronous=NORMAL``: a committed message survives a crash of the hub
process; a power loss may take the last few back.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from channels.errors import HubStoreError
from channels.frames import Message
from channels.ids import IdGenerator, id_for_time, id_timestamp

__all__ = ["MessageStore", "NewMessage", "Refused", "Stored"]


async def _m1_messages(db: aiosqlite.Connection) -> None:
    await db.execute(
        """
        CREATE TABLE messages (
            id        TEXT PRIMARY KEY,
            channel   TEXT NOT NULL,
            thread    TEXT NOT NULL,
            reply_to  TEXT,
            sender    TEXT NOT NULL,
            text      TEXT NOT NULL,
            more      INTEGER NOT NULL DEFAULT 0,
            client_id TEXT
        )
        """
    )
    await db.execute("CREATE INDEX messages_by_channel ON messages (channel, id)")
    await db.execute(
        "CREATE UNIQUE INDEX messages_by_client_id ON messages (sender, client_id) "
        "WHERE client_id IS NOT NULL"
    )


async def _m2_thread_index(db: aiosqlite.Connection) -> None:
    # the thread check of every publish in a thread (issue 26) looks messages up by thread
    await db.execute("CREATE INDEX messages_by_thread ON messages (thread)")


MIGRATIONS: Sequence[Callable[[aiosqlite.Connection], Awaitable[None]]] = (
    _m1_messages,
    _m2_thread_index,
)
"""Applied in order from a blank file; ``user_version`` is how many ran."""


async def _connect(pending: aiosqlite.Connection) -> aiosqlite.Connection:
    """Await an aiosqlite connect; when it fails, wait for its worker thread to end.

    aiosqlite 0.22 stops the thread of a failed connect without waiting: the
    thread then reports to the event loop, and when ``atirc hub`` exits at
    once that loop is closed and the thread prints a traceback.
    """
    try:
        return await pending
    except BaseException:
        thread = getattr(pending, "_thread", None)
        if thread is not None and thread.is_alive():
            with contextlib.suppress(Exception):
                await asyncio.to_thread(thread.join, 5.0)
        raise


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A publish the writer is to store."""

    channel: str
    text: str
    sender: str
    client_id: str
    thread: str | None
    reply_to: str | None
    more: bool


@dataclass(frozen=True, slots=True)
class Stored:
    """What storing one publish gave: the message, and whether it was stored before."""

    message: Message
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """A publish that was not stored, and why (``reason``, for the ``bad_thread`` error)."""

    reason: str


_COLUMNS = "channel, id, thread, reply_to, sender, text, more"


def _row_message(row: Sequence[object]) -> Message:
    channel, id_, thread, reply_to, sender, text, more = row
    assert isinstance(id_, str)
    return Message(
        channel=str(channel),
        id=id_,
        thread=str(thread),
        reply_to=None if reply_to is None else str(reply_to),
        sender=str(sender),
        text=str(text),
        ts=id_timestamp(id_),
        more=bool(more),
    )


class MessageStore:
    """Messages of every channel in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        retention_count: int,
        retention_age: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if retention_count < 1 or retention_age <= 0:
            raise ValueError("retention_count and retention_age must be positive")
        self.path = Path(path)
        self.retention_count = retention_count
        self.retention_age = retention_age
        self._clock = clock
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._ids: IdGenerator | None = None

    async def open(self) -> None:
        """Create or migrate the file and open both connections."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # The sqlite3 module opens "BEGIN IMMEDIATE" itself before the first
            # write of a transaction: one hop to the connection's thread fewer
            # per batch than an explicit BEGIN.
            self._writer = await _connect(aiosqlite.connect(self.path, isolation_level="IMMEDIATE"))
            await self._writer.execute("PRAGMA journal_mode=WAL")
            await self._writer.execute("PRAGMA synchronous=NORMAL")
            await self._writer.execute("PRAGMA busy_timeout=5000")
            await self._migrate(self._writer)
            rows = await self._writer.execute_fetchall("SELECT max(id) FROM messages")
            self._ids = IdGenerator(after=next(iter(rows))[0])
            self._reader = await _connect(aiosqlite.connect(self.path, isolation_level=None))
            await self._reader.execute("PRAGMA busy_timeout=5000")
            await self._reader.execute("PRAGMA query_only=ON")
        except (sqlite3.Error, OSError) as exc:
            await self.close()
            raise HubStoreError(f"cannot open the hub's store {self.path}: {exc}") from exc
        except BaseException:
            await self.close()
            raise

    @staticmethod
    async def _migrate(db: aiosqlite.Connection) -> None:
        rows = await db.execute_fetchall("PRAGMA user_version")
        version = int(next(iter(rows))[0])
        if version > len(MIGRATIONS):
            raise HubStoreError(
                f"the store is at schema version {version}, newer than this hub "
                f"({len(MIGRATIONS)}); upgrade atirc"
            )
        for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
            # DDL does not open a transaction implicitly: do it by hand.
            await db.execute("BEGIN IMMEDIATE")
            try:
                await migration(db)
                await db.execute(f"PRAGMA user_version = {number}")
                await db.commit()
            except BaseException:
                await db.rollback()
                raise

    async def close(self) -> None:
        """Close both connections (idempotent)."""
        for db in (self._reader, self._writer):
            if db is not None:
                # Closing after a failure: nothing more to save.
                with contextlib.suppress(sqlite3.Error):
                    await db.close()
        self._reader = self._writer = None

    def _db(self, which: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if which is None:
            raise HubStoreError("the hub's store is not open")
        return which

    async def store(self, batch: Sequence[NewMessage]) -> list[Stored | Refused]:
        """Store a batch in one transaction; ids are assigned here, in batch order.

        A publish whose ``(sender, client_id)`` is stored already, or earlier in
        the same batch, is not stored again: it gets the first message back
        with ``duplicate=True``. A publish in a thread of another channel is
        :class:`Refused`. The common case (nothing seen before, no thread)
        costs two hops to the connection's thread: the insert and the commit.
        """
        db = self._db(self._writer)
        assert self._ids is not None
        try:
            refused = await self._foreign_threads(db, batch)
        except sqlite3.Error as exc:
            raise HubStoreError(f"checking the threads of {len(batch)} publish(es): {exc}") from exc
        accepted = [item for item in batch if (item.channel, item.thread) not in refused]
        stored = await self._insert(db, accepted) if accepted else iter(())
        return [
            Refused(refused[(item.channel, item.thread)])
            if (item.channel, item.thread) in refused
            else next(stored)
            for item in batch
        ]

    @staticmethod
    async def _foreign_threads(
        db: aiosqlite.Connection, batch: Sequence[NewMessage]
    ) -> dict[tuple[str, str | None], str]:
        """The batch's ``(channel, thread)`` pairs whose thread has a message in another
        channel, each with the reason it is refused (which names no other channel)."""
        refused: dict[tuple[str, str | None], str] = {}
        for channel, thread in {(i.channel, i.thread) for i in batch if i.thread is not None}:
            rows = await db.execute_fetchall(
                "SELECT 1 FROM messages WHERE (id = ? OR thread = ?) AND channel != ? LIMIT 1",
                (thread, thread, channel),
            )
            if rows:
                refused[(channel, thread)] = f"thread {thread} is not a thread of {channel}"
        return refused

    async def _insert(
        self, db: aiosqlite.Connection, batch: Sequence[NewMessage]
    ) -> Iterator[Stored]:
        """Store the accepted publishes (see :meth:`store`); their results, in batch order."""
        assert self._ids is not None
        fresh: list[Message] = []
        for item in batch:
            id_ = self._ids.new()
            fresh.append(
                Message(
                    channel=item.channel,
                    id=id_,
                    thread=item.thread or id_,
                    reply_to=item.reply_to,
                    sender=item.sender,
                    text=item.text,
                    ts=id_timestamp(id_),
                    more=item.more,
                )
            )
        rows = [
            (m.id, m.channel, m.thread, m.reply_to, m.sender, m.text, int(m.more), item.client_id)
            for m, item in zip(fresh, batch, strict=True)
        ]
        try:
            try:
                before = db.total_changes
                await db.executemany(
                    "INSERT INTO messages "
                    "(id, channel, thread, reply_to, sender, text, more, client_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (sender, client_id) WHERE client_id IS NOT NULL DO NOTHING",
                    rows,
                )
                inserted = db.total_changes - before
                known = {} if inserted == len(rows) else await self._known(db, batch)
                await db.commit()
            except BaseException:
                await db.rollback()
                raise
        except sqlite3.Error as exc:
            raise HubStoreError(f"storing {len(batch)} message(s) failed: {exc}") from exc
        results = []
        for message, item in zip(fresh, batch, strict=True):
            first = known.get((item.sender, item.client_id))
            if first is None or first.id == message.id:
                results.append(Stored(message, duplicate=False))
            else:
                results.append(Stored(first, duplicate=True))
        return iter(results)

    @staticmethod
    async def _known(
        db: aiosqlite.Connection, batch: Sequence[NewMessage]
    ) -> dict[tuple[str, str], Message]:
        """The stored message of each of the batch's ``(sender, client_id)`` pairs."""
        pairs = list({(item.sender, item.client_id) for item in batch})
        known: dict[tuple[str, str], Message] = {}
        # Chunks keep the statement under SQLite's parameter limit.
        for start in range(0, len(pairs), 200):
            chunk = pairs[start : start + 200]
            values = ", ".join("(?, ?)" for _ in chunk)
            params = [v for pair in chunk for v in pair]
            sql = (
                f"SELECT {_COLUMNS}, client_id FROM messages "
                f"WHERE (sender, client_id) IN (VALUES {values})"
            )
            for row in await db.execute_fetchall(sql, params):
                message = _row_message(tuple(row)[:-1])
                known[(message.sender, str(row[-1]))] = message
        return known

    async def prune(self, channels: Iterable[str]) -> int:
        """Apply retention: drop messages past ``retention_age``, and per channel past the count.

        Returns how many messages were dropped. Only ``channels`` are checked
        for the count bound (the ones written to since the last prune).
        """
        db = self._db(self._writer)
        cutoff = id_for_time(int((self._clock() - self.retention_age) * 1000))
        try:
            try:
                before = db.total_changes
                await db.execute("DELETE FROM messages WHERE id < ?", (cutoff,))
                for channel in channels:
                    await db.execute(
                        "DELETE FROM messages WHERE channel = ? AND id < ("
                        "  SELECT id FROM messages WHERE channel = ?"
                        "  ORDER BY id DESC LIMIT 1 OFFSET ?)",
                        (channel, channel, self.retention_count - 1),
                    )
                dropped = db.total_changes - before
                await db.commit()
            except BaseException:
                await db.rollback()
                raise
        except sqlite3.Error as exc:
            raise HubStoreError(f"pruning failed: {exc}") from exc
        return dropped

    async def bounds(self, channel: str) -> tuple[str | None, str | None]:
        """``(head, oldest)``: the channel's last and oldest retained ids."""
        db = self._db(self._reader)
        try:
            rows = await db.execute_fetchall(
                "SELECT (SELECT id FROM messages WHERE channel = ? ORDER BY id DESC LIMIT 1),"
                "       (SELECT id FROM messages WHERE channel = ? ORDER BY id LIMIT 1)",
                (channel, channel),
            )
        except sqlite3.Error as exc:
            raise HubStoreError(f"reading {channel} failed: {exc}") from exc
        head, oldest = next(iter(rows))
        return head, oldest

    async def after(self, channel: str, since: str, limit: int) -> list[Message]:
        """Up to ``limit`` messages of ``channel`` with ids after ``since``, in id order."""
        db = self._db(self._reader)
        try:
            rows = await db.execute_fetchall(
                f"SELECT {_COLUMNS} FROM messages WHERE channel = ? AND id > ? ORDER BY id LIMIT ?",
                (channel, since, limit),
            )
        except sqlite3.Error as exc:
            raise HubStoreError(f"replaying {channel} failed: {exc}") from exc
        return [_row_message(row) for row in rows]

    async def ping(self) -> None:
        """A trivial read, so the watchdog knows the file still answers."""
        db = self._db(self._reader)
        try:
            await db.execute_fetchall("SELECT 1")
        except sqlite3.Error as exc:
            raise HubStoreError(f"the store does not answer: {exc}") from exc
