"""The hub's state for one websocket connection, and how the hub closes one.

A :class:`Connection` owns its outbox, its sender task (which drains the
outbox into the socket) and its subscriptions' state; it never decides what
to send, only how a frame gets queued and what a full queue means.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from channels.frames import ServerFrame
from channels.hub.outbox import Outbox
from channels.hub.stats import HubStats
from channels.protocol import encode
from channels.ratelimit import TokenBucket

__all__ = [
    "FLOOD_CLOSE",
    "GOING_AWAY_CLOSE",
    "SLOW_CLOSE",
    "Connection",
    "Subscription",
    "peer",
]

log = structlog.get_logger("channels.hub")

SLOW_CLOSE = (1013, "subscriber too slow; reconnect with since")
"""Close code and reason for a subscriber whose outbox is full (1013: try again later)."""

FLOOD_CLOSE = (1008, "flood: frames kept coming over the rate limit")
"""Close code and reason for a client that ignores ``rate_limited`` (1008: policy violation)."""

GOING_AWAY_CLOSE = (1001, "hub shutting down")
"""Close code and reason for every connection when the hub stops (1001: going away)."""


def peer(ws: ServerConnection) -> str:
    """``host:port`` of the remote end, for the logs (``?`` when unknown)."""
    try:
        host, port = ws.remote_address[:2]
    except (TypeError, ValueError):
        return "?"
    return f"{host}:{port}"


@dataclass
class Subscription:
    """One connection's subscription to one channel.

    While ``pending`` is a list, the subscription is replaying: live messages
    are parked there (by id) instead of going to the outbox, and replay
    delivers those after the stored ones, so the seam has no gap and no
    duplicate. ``overflow`` means more arrived than ``pending`` may hold; the
    replay then reads them from the store instead.
    """

    pending: list[tuple[str, str]] | None = field(default_factory=list)
    overflow: bool = False


class Connection:
    """The hub's state for one websocket connection.

    ``forget`` drops the connection's subscriptions (the fan-out's registry);
    a kick calls it so that nothing more is fed to a closing connection.
    """

    def __init__(
        self,
        ws: ServerConnection,
        token_nick: str | None,
        *,
        queue_size: int,
        bucket: TokenBucket,
        close_timeout: float,
        stats: HubStats,
        forget: Callable[[Connection], None],
    ) -> None:
        self.ws = ws
        self.token_nick = token_nick  # fixed by the token; hello cannot change it
        self.nick = token_nick
        self.outbox = Outbox(queue_size)
        self.subs: dict[str, Subscription] = {}
        self.bucket = bucket
        self.tasks: asyncio.TaskGroup | None = None
        self.sender: asyncio.Task[None] | None = None
        self.kicked = False
        self.finished = False
        self.log = log.bind(peer=peer(ws), nick=token_nick)
        self._close_timeout = close_timeout
        self._stats = stats
        self._forget = forget

    def send(self, frame: ServerFrame) -> None:
        """Queue a frame; a full outbox means a slow client, which is closed."""
        self.send_text(encode(frame))

    def send_text(self, text: str) -> None:
        """Queue an encoded frame (shared between subscribers); see :meth:`send`."""
        if self.kicked or self.finished:
            return
        if not self.outbox.push(text):
            self._stats.slow_closed += 1
            self.log.warning("hub.slow_subscriber", queued=len(self.outbox))
            self.kick(*SLOW_CLOSE)

    def offer_text(self, text: str) -> None:
        """Queue an encoded status if there is room; else drop it (see :meth:`Outbox.offer`)."""
        if not (self.kicked or self.finished) and not self.outbox.offer(text):
            self._stats.statuses_dropped += 1

    def kick(self, code: int, reason: str, *, flush: bool = False) -> None:
        """Close this connection with ``code`` and ``reason``; stop feeding it.

        A slow subscriber is closed at once, its queue dropped. With ``flush``
        (a flood: the client reads fine, it only sends too much) the frames
        already queued, such as its ``rate_limited`` errors, go out first,
        within the close timeout.
        """
        if self.kicked or self.finished:
            return
        self.kicked = True
        self._forget(self)
        assert self.tasks is not None  # set before any frame is handled
        if flush:
            self.outbox.seal()
        else:
            self.outbox.close()
        self.tasks.create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        # Waiting for the sender to drain is bounded: a client that does not read
        # is closed anyway once the close timeout has passed.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._close_timeout):
                await self.outbox.drained()
        if self.sender is not None:
            self.sender.cancel()
        await self.ws.close(code, reason)

    async def send_loop(self) -> None:
        """The sender task: drain the outbox into the socket until either closes."""
        try:
            while True:
                await self.ws.send(await self.outbox.get())
        except ConnectionClosed:
            pass  # the reader sees it too and ends the connection
        finally:
            self.outbox.close()
