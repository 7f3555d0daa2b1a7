"""Learned return shapes in the ``tool_shapes`` table (issue 19): one per channel, server
and tool.

Code mode learns the shape of what a tool without an output schema returns
and keeps it here with the server's version, so a restarted daemon starts
with the shapes it had. A shape is the channel's whose run taught it (issue
29: what a tool returned in ``#ops`` is not ``#help``'s to see); ``""`` is
the channel of a call made outside any thread. This module only keeps the text: what a shape means
(a JSON schema, as compact JSON) is the caller's business; the store checks
that it is a JSON object, so a broken writer cannot store what no reader
can use. Saving replaces the tool's earlier shape (last write wins).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .connection import Connection
from .errors import StoreError
from .ids import now_iso

__all__ = ["Shapes", "StoredShape"]


@dataclass(frozen=True)
class StoredShape:
    """One tool's learned shape in one channel, as stored."""

    channel: str  # whose run taught it ("" outside any thread)
    server: str  # "" for a tool of no server
    tool: str
    server_version: str  # "" when the server gave none
    shape: str  # a JSON object (a JSON schema), as text
    observed: str  # ISO 8601, UTC: when it was learned or last refreshed

    COLUMNS: ClassVar[str] = "channel, server, tool, server_version, shape, observed"
    """The ``tool_shapes`` columns :meth:`from_row` maps."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredShape:
        """A ``tool_shapes`` row read with :attr:`COLUMNS`."""
        channel, server, tool, server_version, shape, observed = row
        return cls(channel, server, tool, server_version, shape, observed)


class Shapes:
    """The tool_shapes table: save a tool's shape in a channel (replacing the last), load
    them all."""

    def __init__(self, db: Connection):
        self._db = db

    async def save_shape(
        self,
        server: str,
        tool: str,
        *,
        channel: str,
        server_version: str,
        shape: str,
        observed: str | None = None,
    ) -> None:
        """Store ``shape`` as the tool's learned shape in ``channel``, replacing any earlier one
        there (another channel's is another row).

        ``observed`` (default: now) is when it was learned. Raises
        ``StoreError`` for an empty tool name or a shape that is not a JSON object.
        """
        if not tool:
            raise StoreError(f"shape of server {server!r}: no tool name")
        try:
            parsed = json.loads(shape)
        except ValueError as exc:
            raise StoreError(f"shape of {server}.{tool}: not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise StoreError(f"shape of {server}.{tool}: not a JSON object")
        when = observed if observed is not None else now_iso()
        async with self._db.statement(f"saving the shape of {server}.{tool}") as db:
            await db.execute(
                "INSERT INTO tool_shapes (channel, server, tool, server_version, shape, observed)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (channel, server, tool) DO UPDATE SET"
                " server_version = excluded.server_version, shape = excluded.shape,"
                " observed = excluded.observed",
                (channel, server, tool, server_version, shape, when),
            )

    async def load_shapes(self) -> list[StoredShape]:
        """Every stored shape, by channel, server and tool."""
        rows = await self._db.read(
            "loading the learned shapes",
            f"SELECT {StoredShape.COLUMNS} FROM tool_shapes ORDER BY channel, server, tool",
        )
        return [StoredShape.from_row(row) for row in rows]
