"""Dumped REPL scopes in the ``scopes`` table: one per thread, kept across eviction and restarts.

The daemon dumps a thread's Monty scope after a run that changed it and
before it evicts the scope or stops, and loads it back when the thread
speaks again. This module only keeps the bytes: what they mean (the Monty
dump format, ``monty_version``) and whether they are genuine (``mac``, an
HMAC-SHA256 the caller computes and checks with its own key) are the
caller's business; the store checks only that ``mac`` looks like one.

A scope belongs to a thread that exists (a prompt or a run created it):
``save_scope`` for an unknown thread raises ``StoreError`` rather than
inventing a thread without a prompt. Saving replaces the thread's previous
dump (last write wins) and does not touch the thread's ``last_active``:
keeping state is not activity.

Dumps stored before issue 26 were signed over the thread id alone; migration
6 set them apart in ``unbound_scopes``, and the daemon re-signs
(:meth:`Scopes.bind_scope`) or drops each one at its start.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from .connection import Connection, canonical_timestamp
from .errors import StoreError
from .ids import iso_utc, now_iso, thread_key

__all__ = ["SAVE_SCOPE", "Scopes", "StoredScope", "UnboundScope", "scope_cutoff"]

_MAC = re.compile(r"[0-9a-f]{64}")  # hex HMAC-SHA256, lower case

SAVE_SCOPE = (
    "INSERT INTO scopes (thread, monty_version, dumped, size, data, mac)"
    " SELECT id, ?, ?, ?, ?, ? FROM threads WHERE id = ?"
    " ON CONFLICT (thread) DO UPDATE SET monty_version = excluded.monty_version,"
    " dumped = excluded.dumped, size = excluded.size, data = excluded.data,"
    " mac = excluded.mac"
)
"""SQL: store a thread's dump, replacing its last (parameters: ``monty_version, dumped,
size, data, mac, thread key``); no row when the thread does not exist.

The WHERE is required: it tells SQLite's parser that ON CONFLICT is the
upsert, not a join constraint of the SELECT.
"""


@dataclass(frozen=True)
class StoredScope:
    """A thread's last dumped scope, as stored."""

    channel: str
    thread_id: str
    monty_version: str  # the Monty that dumped it (a dump may not load in another)
    dumped: str  # ISO 8601, UTC
    size: int  # len(data)
    data: bytes
    mac: str  # hex HMAC-SHA256 of the dump, as the caller computed it

    COLUMNS: ClassVar[str] = (
        "t.channel, t.thread_id, s.monty_version, s.dumped, s.size, s.data, s.mac"
    )
    """The select list :meth:`from_row` maps (``s``: scopes or unbound_scopes, ``t``: threads)."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredScope:
        """A ``scopes`` (or ``unbound_scopes``) row read with :attr:`COLUMNS`."""
        channel, thread_id, monty_version, dumped, size, data, mac = row
        return cls(
            channel=channel,
            thread_id=thread_id,
            monty_version=monty_version,
            dumped=dumped,
            size=int(size),
            data=bytes(data),
            mac=mac,
        )


@dataclass(frozen=True)
class UnboundScope:
    """A dump stored before its MAC covered the channel (the ``unbound_scopes`` table).

    ``channels`` is how many channels hold a thread of its thread id: when it
    is 1, no other channel ever had a thread of that id here (threads are
    never deleted), so the dump holds only its own channel's variables.
    """

    channel: str
    thread_id: str
    channels: int


def scope_cutoff(retention_days: float, now: datetime | None = None) -> str:
    """The ``older_than`` for :meth:`Scopes.prune_scopes` that keeps ``retention_days``.

    ``now`` defaults to the current time (given, it makes the result testable).
    """
    if retention_days < 0:
        raise StoreError(f"a retention cannot be negative: {retention_days} days")
    moment = now if now is not None else datetime.now(UTC)
    return iso_utc(moment - timedelta(days=retention_days))


class Scopes:
    """The scopes table: save a thread's dump (replacing the last), load, drop, prune."""

    def __init__(self, db: Connection):
        self._db = db

    async def save_scope(
        self,
        channel: str,
        thread_id: str,
        *,
        monty_version: str,
        data: bytes,
        mac: str,
        dumped: str | None = None,
    ) -> None:
        """Store ``data`` as the thread's scope, replacing any earlier one (one statement).

        ``dumped`` (default: now) is when the scope was dumped. Raises
        ``StoreError`` when the thread does not exist, ``monty_version`` is
        empty or ``mac`` is not a lower-case hex HMAC-SHA256.
        """
        key = thread_key(channel, thread_id)
        if not monty_version:
            raise StoreError(f"scope of {key}: no Monty version")
        if not _MAC.fullmatch(mac):
            raise StoreError(f"scope of {key}: the MAC is not a hex HMAC-SHA256: {mac!r}")
        when = now_iso() if dumped is None else canonical_timestamp(dumped, f"scope of {key}")
        blob = bytes(data)
        async with self._db.statement(f"saving the scope of {key}") as db:
            cursor = await db.execute(SAVE_SCOPE, (monty_version, when, len(blob), blob, mac, key))
        if cursor.rowcount != 1:
            raise StoreError(f"scope of {key}: no such thread (record a prompt first)")

    async def _load(
        self, table: str, channel: str, thread_id: str, what: str
    ) -> StoredScope | None:
        """The thread's dump in ``table`` (``scopes`` or ``unbound_scopes``), or None."""
        key = thread_key(channel, thread_id)
        rows = await self._db.read(
            f"loading the {what} of {key}",
            f"SELECT {StoredScope.COLUMNS} FROM {table} s JOIN threads t ON t.id = s.thread"
            " WHERE s.thread = ?",
            (key,),
        )
        return StoredScope.from_row(rows[0]) if rows else None

    async def load_scope(self, channel: str, thread_id: str) -> StoredScope | None:
        """The thread's stored scope, or None (never dumped, dropped or pruned)."""
        return await self._load("scopes", channel, thread_id, "scope")

    async def drop_scope(self, channel: str, thread_id: str) -> bool:
        """Delete the thread's stored scope (``!reset``); whether there was one."""
        key = thread_key(channel, thread_id)
        async with self._db.statement(f"dropping the scope of {key}") as db:
            cursor = await db.execute("DELETE FROM scopes WHERE thread = ?", (key,))
        return cursor.rowcount == 1

    async def count_scopes(self) -> int:
        """How many threads have a stored scope (the metrics' saved REPLs)."""
        rows = await self._db.read("counting the stored scopes", "SELECT count(*) FROM scopes")
        return int(rows[0][0])

    async def unbound_scopes(self) -> list[UnboundScope]:
        """The dumps stored before their MAC covered the channel (issue 26), without bytes."""
        rows = await self._db.read(
            "listing the scopes signed without their channel",
            "SELECT t.channel, t.thread_id,"
            " (SELECT count(*) FROM threads o WHERE o.thread_id = t.thread_id)"
            " FROM unbound_scopes u JOIN threads t ON t.id = u.thread ORDER BY u.thread",
        )
        return [UnboundScope(channel, thread_id, int(n)) for channel, thread_id, n in rows]

    async def load_unbound_scope(self, channel: str, thread_id: str) -> StoredScope | None:
        """One dump of :meth:`unbound_scopes`, bytes and old MAC included."""
        return await self._load("unbound_scopes", channel, thread_id, "unbound scope")

    async def bind_scope(self, channel: str, thread_id: str, mac: str) -> bool:
        """Move the thread's unbound dump into ``scopes`` under ``mac`` (the caller's MAC
        over the channel too), in one transaction; whether it moved (False: a dump saved
        since is kept, the unbound one is dropped)."""
        key = thread_key(channel, thread_id)
        if not _MAC.fullmatch(mac):
            raise StoreError(f"scope of {key}: the MAC is not a hex HMAC-SHA256: {mac!r}")
        async with self._db.transaction(f"re-signing the scope of {key}") as db:
            cursor = await db.execute(
                "INSERT INTO scopes (thread, monty_version, dumped, size, data, mac)"
                " SELECT thread, monty_version, dumped, size, data, ? FROM unbound_scopes"
                " WHERE thread = ? ON CONFLICT (thread) DO NOTHING",
                (mac, key),
            )
            moved = cursor.rowcount == 1
            await db.execute("DELETE FROM unbound_scopes WHERE thread = ?", (key,))
        return moved

    async def drop_unbound_scope(self, channel: str, thread_id: str) -> None:
        """Delete the thread's unbound dump (one whose channel is not proven)."""
        key = thread_key(channel, thread_id)
        async with self._db.statement(f"dropping the unbound scope of {key}") as db:
            await db.execute("DELETE FROM unbound_scopes WHERE thread = ?", (key,))

    async def prune_scopes(self, older_than: str) -> int:
        """Delete the scopes dumped before ``older_than`` (ISO 8601); return how many.

        See :func:`scope_cutoff` for the bound of a retention in days.
        """
        bound = canonical_timestamp(older_than, "prune_scopes older_than")
        async with self._db.statement("pruning old scopes") as db:
            cursor = await db.execute("DELETE FROM scopes WHERE dumped < ?", (bound,))
        return int(cursor.rowcount)
