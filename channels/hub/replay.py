"""Subscribing: answer ``subscribed``, replay what was stored after ``since``, then go live.

The seam between replay and live traffic has no gap and no duplicate: the
subscription is registered (and parks live messages) before the store is
read, and the parked messages newer than the replay's last id go out after
it. Replay never overflows an outbox: it waits for room and leaves half of
it free for live traffic.
"""

from __future__ import annotations

import structlog

from channels.errors import HubStoreError
from channels.frames import ErrorCode, ErrorFrame, Subscribe, Subscribed
from channels.hub.connection import Connection, Subscription
from channels.hub.fanout import Subscribers
from channels.ids import ZERO_ID
from channels.protocol import encode
from channels.store import MessageStore

__all__ = ["Replay"]

log = structlog.get_logger("channels.hub")


class Replay:
    """Serves ``subscribe`` frames from the store, ``page`` messages per read."""

    def __init__(self, store: MessageStore, subscribers: Subscribers, page: int) -> None:
        self._store = store
        self._subscribers = subscribers
        self._page = page

    async def subscribe(self, conn: Connection, frame: Subscribe) -> None:
        """Register, answer ``subscribed``, replay after ``since``, then go live.

        The subscription is registered before the store is read, and parks
        live messages until the replay has caught up: whatever is committed
        after a read shows up in ``pending``, whatever before in the read.
        """
        channel = frame.channel
        sub = self._subscribers.add(conn, channel)
        try:
            head, oldest = await self._store.bounds(channel)
            if conn.subs.get(channel) is not sub:
                return
            conn.send(Subscribed(channel=channel, head=head, oldest=oldest))
            if frame.since is None:
                _go_live(conn, sub, head or ZERO_ID)
                return
            last = frame.since
            while True:
                sub.pending = []
                sub.overflow = False
                rows = await self._store.after(channel, last, self._page)
                for message in rows:
                    if conn.subs.get(channel) is not sub:
                        return
                    if not await conn.outbox.push_replay(encode(message)):
                        return
                    last = message.id
                if conn.subs.get(channel) is not sub:
                    return
                if len(rows) < self._page and not sub.overflow:
                    _go_live(conn, sub, last)
                    return
        except HubStoreError as exc:
            log.error("hub.replay_failed", channel=channel, error=str(exc))
            self._subscribers.remove(conn, channel)
            conn.send(
                ErrorFrame(
                    ErrorCode.INTERNAL,
                    "the hub could not read the channel; subscribe again later",
                    channel=channel,
                )
            )


def _go_live(conn: Connection, sub: Subscription, last: str) -> None:
    pending, sub.pending = sub.pending or [], None
    for message_id, text in pending:
        if message_id > last:
            conn.send_text(text)
