"""A connection's outbox: the bounded queue of encoded frames its sender task drains."""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Outbox"]


class Outbox:
    """A connection's bounded queue of encoded frames, drained by its sender task.

    Live traffic uses :meth:`push`, which never waits and says False when the
    queue is full (the caller closes the slow connection); statuses use
    :meth:`offer`, which drops them instead once the queue is half full. Replay uses
    :meth:`push_replay`, which waits while the queue is at least half full,
    so the other half stays free for live messages and acks.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._low = max(1, limit // 2)
        self._items: deque[str] = deque()
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._empty = asyncio.Event()
        self._empty.set()
        self.closed = False
        self.sealed = False  # no more frames accepted; what is queued still goes out

    def __len__(self) -> int:
        return len(self._items)

    def _appended(self) -> None:
        self._readable.set()
        self._empty.clear()
        if len(self._items) >= self._low:
            self._room.clear()

    def push(self, text: str) -> bool:
        """Queue a live frame; False if the queue is full (or closed)."""
        if self.closed or self.sealed or len(self._items) >= self.limit:
            return False
        self._items.append(text)
        self._appended()
        return True

    def offer(self, text: str) -> bool:
        """Queue a frame that may be lost (a status) only while the queue is under half full.

        False means it was dropped: a status never costs a slow subscriber its
        connection, and never takes the room kept for messages and acks.
        """
        if self.closed or self.sealed or len(self._items) >= self._low:
            return False
        self._items.append(text)
        self._appended()
        return True

    async def push_replay(self, text: str) -> bool:
        """Queue a replayed frame once there is room; False if the outbox was closed."""
        while not self.closed and not self.sealed and len(self._items) >= self._low:
            await self._room.wait()
        if self.closed or self.sealed:
            return False
        self._items.append(text)
        self._appended()
        return True

    async def get(self) -> str:
        """The next frame to send (waits for one)."""
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        text = self._items.popleft()
        if len(self._items) < self._low:
            self._room.set()
        if not self._items:
            self._empty.set()
        return text

    async def drained(self) -> None:
        """Wait until every queued frame was taken by the sender."""
        await self._empty.wait()

    def seal(self) -> None:
        """Accept nothing more, but let what is queued go out."""
        self.sealed = True
        self._room.set()

    def close(self) -> None:
        """Drop what is queued and release anyone waiting for room."""
        self.closed = True
        self._items.clear()
        self._room.set()
        self._empty.set()
