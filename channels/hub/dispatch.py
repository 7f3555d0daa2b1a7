"""Reading a connection: rate limit, parse, and answer each client frame.

Per frame: the rate limit first (a flood closes the connection with
:data:`~channels.hub.connection.FLOOD_CLOSE`, a frame over the rate gets a
``rate_limited`` error frame), then parsing (a bad frame gets an ``error``
frame; the connection stays up), then the frame's handler: ``hello`` names
the connection, ``subscribe`` goes to the replay, ``unsubscribe`` to the
fan-out's registry, ``publish`` to the writer, whose result is acked, and
``status`` straight to the fan-out: stamped with the sender and the time,
never stored, never acked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial

from websockets.exceptions import ConnectionClosed

from channels.errors import ProtocolError
from channels.frames import (
    Ack,
    ClientFrame,
    ErrorCode,
    ErrorFrame,
    Hello,
    Message,
    Publish,
    Status,
    StatusUpdate,
    Subscribe,
    Unsubscribe,
    Welcome,
)
from channels.hub.connection import FLOOD_CLOSE, Connection
from channels.hub.fanout import Subscribers
from channels.hub.replay import Replay
from channels.hub.stats import HubStats
from channels.hub.writer import Write, Writer
from channels.ids import id_for_time, id_timestamp
from channels.protocol import parse_client_frame
from channels.ratelimit import Verdict
from channels.store import NewMessage

__all__ = ["Dispatcher"]


class Dispatcher:
    """Reads one connection's frames until it ends, and answers each."""

    def __init__(
        self,
        *,
        max_frame: int,
        max_text: int,
        rate: float,
        burst: int,
        clock: Callable[[], float],
        stats: HubStats,
        subscribers: Subscribers,
        replay: Replay,
        writer: Writer,
    ) -> None:
        self._max_frame = max_frame
        self._max_text = max_text
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._stats = stats
        self._subscribers = subscribers
        self._replay = replay
        self._writer = writer

    async def read_loop(self, conn: Connection) -> None:
        """Handle ``conn``'s frames in order until it closes or is kicked."""
        try:
            async for raw in conn.ws:
                if conn.kicked:
                    return
                verdict = conn.bucket.take(self._clock())
                if verdict is Verdict.FLOOD:
                    self._stats.flood_closed += 1
                    conn.log.warning("hub.flood", rate=self._rate, burst=self._burst)
                    conn.kick(*FLOOD_CLOSE, flush=True)
                    return
                try:
                    frame = parse_client_frame(
                        raw, max_frame=self._max_frame, max_text=self._max_text
                    )
                except ProtocolError as exc:
                    conn.send(
                        ErrorFrame(
                            exc.code, exc.message, client_id=exc.client_id, channel=exc.channel
                        )
                    )
                    continue
                if verdict is Verdict.LIMITED:
                    # A status is dropped quietly as to whom: nobody waits on it.
                    about = None if isinstance(frame, StatusUpdate) else frame
                    conn.send(
                        ErrorFrame(
                            ErrorCode.RATE_LIMITED,
                            f"over {self._rate:g} frames/s: slow down and retry",
                            client_id=getattr(about, "client_id", None),
                            channel=getattr(about, "channel", None),
                        )
                    )
                    continue
                await self._dispatch(conn, frame)
        except ConnectionClosed:
            return

    async def _dispatch(self, conn: Connection, frame: ClientFrame) -> None:
        match frame:
            case Hello(nick=nick):
                if conn.nick is None:
                    conn.nick = nick
                    conn.log = conn.log.bind(nick=nick)
                    conn.send(Welcome(nick=nick, max_text=self._max_text))
                elif nick == conn.nick:
                    conn.send(Welcome(nick=nick, max_text=self._max_text))
                elif conn.token_nick is not None:
                    conn.send(
                        ErrorFrame(
                            ErrorCode.UNAUTHORIZED,
                            f"your token makes you {conn.token_nick}; hello cannot change it",
                        )
                    )
                else:
                    conn.send(ErrorFrame(ErrorCode.BAD_FRAME, f"already identified as {conn.nick}"))
            case _ if conn.nick is None:
                about = None if isinstance(frame, StatusUpdate) else frame
                conn.send(
                    ErrorFrame(
                        ErrorCode.UNAUTHORIZED,
                        "send hello with your nick first (this hub has no tokens)",
                        client_id=getattr(about, "client_id", None),
                        channel=getattr(about, "channel", None),
                    )
                )
            case Subscribe():
                await self._replay.subscribe(conn, frame)
            case Unsubscribe(channel=channel):
                self._subscribers.remove(conn, channel)
            case Publish():
                await self._publish(conn, frame)
            case StatusUpdate():
                self._stats.statuses += 1
                self._subscribers.status(
                    Status(
                        channel=frame.channel,
                        thread=frame.thread,
                        sender=conn.nick,  # the hub's view, as for a message
                        text=frame.text,
                        ts=id_timestamp(id_for_time(time.time_ns() // 1_000_000)),
                    )
                )

    async def _publish(self, conn: Connection, frame: Publish) -> None:
        assert conn.nick is not None  # _dispatch checked
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        future.add_done_callback(partial(_acked, conn, frame.client_id))
        new = NewMessage(
            channel=frame.channel,
            text=frame.text,
            sender=conn.nick,  # the hub's view, never a claim of the client
            client_id=frame.client_id,
            thread=frame.thread,
            reply_to=frame.reply_to,
            more=frame.more,
        )
        await self._writer.put(Write(new, future))


def _acked(conn: Connection, client_id: str, future: asyncio.Future[Message]) -> None:
    """Answer a publish once the writer is done with it: ``ack``, the refusal's error
    (``bad_thread``), or an ``internal`` error."""
    if future.cancelled():
        return
    exc = future.exception()
    if isinstance(exc, ProtocolError):
        conn.send(ErrorFrame(exc.code, exc.message, client_id=client_id))
        return
    if exc is not None:
        conn.send(
            ErrorFrame(
                ErrorCode.INTERNAL,
                "the hub could not store the message; retry later",
                client_id=client_id,
            )
        )
        return
    message = future.result()
    conn.send(Ack(client_id=client_id, id=message.id, thread=message.thread))
