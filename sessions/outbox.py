"""The outbox: a run's reply committed with the run's end, published after (issue 26 §2.2).

A reply is published only after it is committed, in the same transaction
as the run's records, its status and its prompts' status (and, with a
dumped REPL, the thread's scope): the ``outbox`` table holds it until the
hub acknowledged it. After a crash, what is committed and not acknowledged
is published again with the same ``client_id`` (the hub stores a message
once per ``client_id``), and the prompts, already ``done``, are never run
again: a published reply is never followed by a second run, and the REPL
dump always agrees with the runs that ended.

| ``status`` | the reply |
|---|---|
| ``pending`` | committed, not acknowledged yet (published again at the next start) |
| ``acked`` | the hub acknowledged it (``message_id``: its id there) |
| ``refused`` | the hub refused it for what it is; the run and its prompts ended ``failed`` |

The writes of the run's end itself are in ``writer`` (``finish_run``); this
module holds the row type, the statements ``finish_run`` adds, and the
reads and updates of the rows afterwards.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .connection import Connection
from .errors import StoreError
from .ids import now_iso, thread_key
from .scopes import SAVE_SCOPE

__all__ = ["Ack", "Outbox", "OutboxReply", "ScopeWrite", "mark_acked", "put_reply", "put_scope"]


@dataclass(frozen=True)
class OutboxReply:
    """A reply as the outbox keeps it: what to publish, where, under which ``client_id``."""

    run_id: str
    channel: str
    thread_id: str
    reply_to: str  # the run's last prompt
    client_id: str  # the hub keeps one message per client_id
    text: str
    prompt_ids: tuple[str, ...] = ()  # the prompts it answers (filled when read back)

    COLUMNS: ClassVar[str] = (
        "o.run_id, o.channel, o.thread_id, o.reply_to, o.client_id, o.text,"
        " (SELECT group_concat(p.id, ' ') FROM prompts p WHERE p.run_id = o.run_id)"
    )
    """The select list :meth:`from_row` maps (``o``: outbox), the run's prompts included."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> OutboxReply:
        """An ``outbox`` row read with :attr:`COLUMNS` (in the order of the fields)."""
        values = list(row)
        values[6] = tuple(sorted((values[6] or "").split()))  # the run's prompts, joined
        return cls(*values)


@dataclass(frozen=True)
class ScopeWrite:
    """A thread's REPL dump to store with the run's end (``data`` None: drop the stored one).

    ``mac`` is the caller's hex HMAC-SHA256 (see :mod:`sessions.scopes`).
    """

    channel: str
    thread_id: str
    monty_version: str
    data: bytes | None
    mac: str


def put_reply(conn: sqlite3.Connection, reply: OutboxReply) -> None:
    """Add the reply to the outbox, inside ``finish_run``'s transaction."""
    conn.execute(
        "INSERT INTO outbox (run_id, channel, thread_id, reply_to, client_id, text, committed)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            reply.run_id,
            reply.channel,
            reply.thread_id,
            reply.reply_to,
            reply.client_id,
            reply.text,
            now_iso(),
        ),
    )


def put_scope(conn: sqlite3.Connection, scope: ScopeWrite) -> None:
    """Store (or drop) the thread's dump, inside ``finish_run``'s transaction."""
    key = thread_key(scope.channel, scope.thread_id)
    if scope.data is None:
        conn.execute("DELETE FROM scopes WHERE thread = ?", (key,))
        return
    blob = bytes(scope.data)
    conn.execute(SAVE_SCOPE, (scope.monty_version, now_iso(), len(blob), blob, scope.mac, key))


@dataclass(frozen=True)
class Ack:
    """The hub's acknowledgement of a run's reply: its message id, and when."""

    run_id: str
    message_id: str
    acked: str  # ISO 8601 UTC


def mark_acked(conn: sqlite3.Connection, acks: Sequence[Ack]) -> None:
    """Mark these replies acknowledged, inside the caller's transaction (or alone)."""
    conn.executemany(
        "UPDATE outbox SET status = 'acked', acked = ?, message_id = ? WHERE run_id = ?",
        [(a.acked, a.message_id, a.run_id) for a in acks],
    )


class Outbox:
    """The replies committed and not yet acknowledged, and their end."""

    def __init__(self, db: Connection):
        self._db = db

    async def unacked_replies(self) -> list[OutboxReply]:
        """Replies committed and not acknowledged (``pending``), oldest first, with the
        prompts of their runs."""
        rows = await self._db.read(
            "reading the outbox",
            f"SELECT {OutboxReply.COLUMNS}"
            " FROM outbox o WHERE o.status = 'pending' ORDER BY o.committed, o.run_id",
        )
        return [OutboxReply.from_row(row) for row in rows]

    async def replies_acked(self, acks: Sequence[Ack]) -> None:
        """The hub acknowledged these replies (in one statement)."""
        if acks:
            await self._db.batch(
                f"marking {len(acks)} replies acknowledged",
                lambda conn: mark_acked(conn, acks),
                transaction=False,
            )

    async def reply_refused(self, run_id: str, error: str) -> None:
        """The hub refused the run's reply for what it is: the reply, the run and its
        prompts end ``failed`` with ``error``, in one transaction."""

        def refuse(conn: sqlite3.Connection) -> None:
            found = conn.execute(
                "UPDATE outbox SET status = 'refused', acked = ? WHERE run_id = ?",
                (now_iso(), run_id),
            )
            if found.rowcount != 1:
                raise StoreError(f"no reply of run {run_id!r} in the outbox")
            conn.execute(
                "UPDATE runs SET status = 'failed', error = ? WHERE id = ?", (error, run_id)
            )
            conn.execute(
                "UPDATE prompts SET status = 'failed', updated = ? WHERE run_id = ?",
                (now_iso(), run_id),
            )

        await self._db.batch(f"refusing the reply of run {run_id}", refuse)
