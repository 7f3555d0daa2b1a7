"""Channel cursors in the ``cursors`` table: per channel, the last message id handled.

The daemon reads from a channel's cursor at start, so a restart misses no
message and takes none twice (stored prompts are idempotent by id). Two rows
are not channels: :data:`FIRST_START`, the cursor of the daemon's first start
(read for a channel without a cursor of its own), and :data:`CURSOR_SPACE`,
whose ids the cursors are (a hub's or NATS's). A channel may have a second row,
:func:`commands_row`: the newest command (``!stop``, ``!reset``, a decision) handled
while its cursor could not move that far, so a restart that reads the command
again does not run it twice. A prompt's record moves its
channel's cursor in the prompt's own transaction (``writer``), through
:func:`move_cursor`.
"""

from __future__ import annotations

import sqlite3

from .connection import Connection, scalar
from .ids import now_iso

__all__ = ["CURSOR_SPACE", "FIRST_START", "Cursors", "commands_row", "move_cursor"]

FIRST_START = "*"
"""The ``cursors`` row of the daemon's first start (no channel name is ``*``)."""
CURSOR_SPACE = "@"
"""The ``cursors`` row naming whose ids the channel cursors are (``hub``, ``nats``)."""


def commands_row(channel: str) -> str:
    """The ``cursors`` row of the newest command handled on ``channel`` (no channel name
    starts with ``!``); dropped with the channel cursors when their id space changes."""
    return f"!{channel}"


def move_cursor(conn: sqlite3.Connection, channel: str, message_id: str) -> bool:
    """Move the channel's cursor to ``message_id`` inside a batch; False when that is back."""
    cursor = conn.execute(
        "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
        " ON CONFLICT (channel) DO UPDATE"
        " SET message_id = excluded.message_id, updated = excluded.updated"
        " WHERE excluded.message_id > cursors.message_id",
        (channel, message_id, now_iso()),
    )
    return cursor.rowcount == 1


class Cursors:
    """The cursors table: where each channel is read from after a restart."""

    def __init__(self, db: Connection):
        self._db = db

    async def get_cursor(self, channel: str) -> str | None:
        """The last message id handled on ``channel``, or None."""
        return await self._db.scalar_read(
            f"reading the cursor of {channel}",
            "SELECT message_id FROM cursors WHERE channel = ?",
            (channel,),
        )

    async def set_cursor(self, channel: str, message_id: str) -> bool:
        """Advance the channel's cursor to ``message_id``; False when that would move it back.

        Message ids are sortable (ULID-style), so "back" is text order.
        """
        return await self._db.batch(
            f"setting the cursor of {channel}",
            lambda conn: move_cursor(conn, channel, message_id),
            transaction=False,
        )

    async def first_start_cursor(self, message_id: str) -> str:
        """The cursor of the daemon's first start: ``message_id`` when none is stored
        yet (then stored, in row :data:`FIRST_START`), else the one stored.

        A channel without a cursor of its own is read from there, so what was
        published after the first start is answered even if no message of it
        was handled before the daemon stopped.
        """
        async with self._db.transaction("recording the first start") as db:
            await db.execute(
                "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (channel) DO NOTHING",
                (FIRST_START, message_id, now_iso()),
            )
            stored = await scalar(
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
        async with self._db.transaction(f"claiming the cursors for {space}") as db:
            stored = await scalar(
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
