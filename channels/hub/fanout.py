"""Fan-out: who subscribes to which channel, and handing each stored message to them.

The writer calls :meth:`Subscribers.fanout` once per stored message, in id
order; it never waits. A subscriber whose outbox is full is closed by its
connection (see :class:`~channels.hub.connection.Connection`); one that is
still replaying gets the message parked in its subscription instead.
:meth:`Subscribers.status` hands a status to the same subscribers, dropped
for any whose outbox is half full: it is never stored, so never replayed.
"""

from __future__ import annotations

from channels.frames import Message, Status
from channels.hub.connection import Connection, Subscription
from channels.hub.stats import HubStats
from channels.protocol import encode

__all__ = ["Subscribers"]


class Subscribers:
    """The registry of subscriptions, by channel, and the fan-out over it.

    ``queue_size`` bounds how many live messages a replaying subscription
    parks before it falls back to reading them from the store.
    """

    def __init__(self, stats: HubStats, queue_size: int) -> None:
        self._stats = stats
        self._queue_size = queue_size
        self._by_channel: dict[str, dict[Connection, Subscription]] = {}

    def add(self, conn: Connection, channel: str) -> Subscription:
        """Register a new subscription of ``conn`` to ``channel``, replacing any earlier one."""
        self.remove(conn, channel)
        sub = Subscription()
        conn.subs[channel] = sub
        self._by_channel.setdefault(channel, {})[conn] = sub
        self._count()
        return sub

    def remove(self, conn: Connection, channel: str) -> None:
        """Forget ``conn``'s subscription to ``channel`` (if any)."""
        conn.subs.pop(channel, None)
        subs = self._by_channel.get(channel)
        if subs is not None:
            subs.pop(conn, None)
            if not subs:
                del self._by_channel[channel]
        self._count()

    def drop(self, conn: Connection) -> None:
        """Forget every subscription of ``conn`` (it is closing or closed)."""
        for channel in list(conn.subs):
            self.remove(conn, channel)

    def _count(self) -> None:
        self._stats.subscriptions = sum(len(s) for s in self._by_channel.values())

    def status(self, status: Status) -> None:
        """Hand a status to the channel's current subscribers (never waits, may drop)."""
        subs = self._by_channel.get(status.channel)
        if not subs:
            return
        text = encode(status)
        for conn in list(subs):
            conn.offer_text(text)

    def fanout(self, message: Message) -> None:
        """Hand a stored message to every subscriber of its channel (never waits)."""
        subs = self._by_channel.get(message.channel)
        if not subs:
            return
        text = encode(message)  # one string shared by every outbox
        for conn, sub in list(subs.items()):
            if sub.pending is not None:
                if len(sub.pending) >= self._queue_size:
                    # The replay will read these from the store instead.
                    sub.pending.clear()
                    sub.overflow = True
                else:
                    sub.pending.append((message.id, text))
            else:
                conn.send_text(text)
