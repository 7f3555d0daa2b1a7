"""The hub: an atirc-style pub/sub server on websockets, messages kept in SQLite.

Per connection there are two tasks, both owned by the connection's handler:
the reader (parses frames, answers them, runs ``since`` replay) and the
sender (drains the connection's outbox into the socket). One writer task,
owned by the hub, stores publishes in batches and fans each stored message
out, in id order, to every subscriber's outbox.

Limits, and what happens at each (the README's table says the same):

- Frame size (``max_frame``, 64 KiB): websockets closes the connection with
  1009 "frame with N bytes exceeds limit …". A publish text over
  ``max_frame - 1024`` JSON bytes gets a ``too_large`` error frame instead
  (the connection stays up): the sender splits it.
- Rate (``rate`` frames/s, bursts of ``burst``): a frame over the rate gets a
  ``rate_limited`` error frame; a client that keeps sending regardless
  (``burst`` more frames of debt) is a flood and is closed with 1008.
- Slow subscriber: each connection's outbox holds ``queue_size`` frames. When
  a live message finds it full, the hub closes that connection with 1013
  "subscriber too slow; reconnect with since" and forgets its
  subscriptions. Nothing is lost: the client reconnects and subscribes with
  ``since`` = the last id it got, and replay delivers the rest from the
  store. Replay itself never overflows: it waits for room and leaves half
  the outbox free for live traffic.
- Bad frames get an ``error`` frame; the connection stays up.

Shutdown (:meth:`Hub.aclose`): stop accepting, close every connection with
1001 "going away", let the writer store what it was given, close the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import time
import urllib.parse
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from channels.errors import HubStoreError, ProtocolError
from channels.notify import notify, watchdog_interval
from channels.protocol import (
    DEFAULT_MAX_FRAME,
    ZERO_ID,
    Ack,
    ClientFrame,
    ErrorCode,
    ErrorFrame,
    Hello,
    Message,
    Publish,
    ServerFrame,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Welcome,
    encode,
    max_text_for,
    parse_client_frame,
)
from channels.ratelimit import TokenBucket, Verdict
from channels.store import MessageStore, NewMessage

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FLOOD_CLOSE",
    "GOING_AWAY_CLOSE",
    "SLOW_CLOSE",
    "Hub",
    "HubStats",
]

log = structlog.get_logger("channels.hub")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6680

SLOW_CLOSE = (1013, "subscriber too slow; reconnect with since")
"""Close code and reason for a subscriber whose outbox is full (1013: try again later)."""

FLOOD_CLOSE = (1008, "flood: frames kept coming over the rate limit")
"""Close code and reason for a client that ignores ``rate_limited`` (1008: policy violation)."""

GOING_AWAY_CLOSE = (1001, "hub shutting down")
"""Close code and reason for every connection when the hub stops (1001: going away)."""

_WRITE_BATCH = 256  # publishes per transaction: bounds a batch's latency and statement size
_STOP = object()  # tells the writer to finish


@dataclass
class HubStats:
    """Counters of a running hub (for tests, the benchmark and the logs)."""

    connections: int = 0
    subscriptions: int = 0
    published: int = 0
    duplicates: int = 0
    slow_closed: int = 0
    flood_closed: int = 0


class _Outbox:
    """A connection's bounded queue of encoded frames, drained by its sender task.

    Live traffic uses :meth:`push`, which never waits and says False when the
    queue is full (the caller closes the slow connection). Replay uses
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


@dataclass
class _Subscription:
    """One connection's subscription to one channel.

    While ``pending`` is a list, the subscription is replaying: live messages
    are parked there (by id) instead of going to the outbox, and replay
    delivers those after the stored ones, so the seam has no gap and no
    duplicate. ``overflow`` means more arrived than ``pending`` may hold; the
    replay then reads them from the store instead.
    """

    pending: list[tuple[str, str]] | None = field(default_factory=list)
    overflow: bool = False


@dataclass(slots=True)
class _Write:
    """A publish waiting for the writer."""

    new: NewMessage
    future: asyncio.Future[Message]


class _Connection:
    """The hub's state for one websocket connection."""

    def __init__(self, hub: Hub, ws: ServerConnection, token_nick: str | None) -> None:
        self.hub = hub
        self.ws = ws
        self.token_nick = token_nick  # fixed by the token; hello cannot change it
        self.nick = token_nick
        self.outbox = _Outbox(hub.queue_size)
        self.subs: dict[str, _Subscription] = {}
        self.bucket = TokenBucket(hub.rate, hub.burst, hub.clock())
        self.tasks: asyncio.TaskGroup | None = None
        self.sender: asyncio.Task[None] | None = None
        self.kicked = False
        self.finished = False
        self.log = log.bind(peer=_peer(ws), nick=token_nick)

    def send(self, frame: ServerFrame) -> None:
        """Queue a frame; a full outbox means a slow client, which is closed."""
        self.send_text(encode(frame))

    def send_text(self, text: str) -> None:
        """Queue an encoded frame (shared between subscribers); see :meth:`send`."""
        if self.kicked or self.finished:
            return
        if not self.outbox.push(text):
            self.hub.stats.slow_closed += 1
            self.log.warning("hub.slow_subscriber", queued=len(self.outbox))
            self.kick(*SLOW_CLOSE)

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
        self.hub._drop_subscriptions(self)
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
            async with asyncio.timeout(self.hub.close_timeout):
                await self.outbox.drained()
        if self.sender is not None:
            self.sender.cancel()
        await self.ws.close(code, reason)


def _peer(ws: ServerConnection) -> str:
    try:
        host, port = ws.remote_address[:2]
    except (TypeError, ValueError):
        return "?"
    return f"{host}:{port}"


def _is_loopback(address: Any) -> bool:
    try:
        ip = ipaddress.ip_address(address[0])
    except (TypeError, ValueError, IndexError):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _presented_token(request: Request) -> str | None:
    auth = request.headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    query = urllib.parse.urlsplit(request.path).query
    values = urllib.parse.parse_qs(query).get("token")
    return values[0] if values else None


def _refuse(status: HTTPStatus, text: str) -> Response:
    body = (text + "\n").encode()
    headers = Headers(
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return Response(status.value, status.phrase, headers, body)


class Hub:
    """An atirc-style hub: websockets server + SQLite store + fan-out.

    ``tokens`` maps bearer tokens to nicks; without tokens, clients name
    themselves with ``hello`` and only loopback connections are accepted.
    ``retention_age`` is in seconds; ``rate`` in frames per second per
    connection; ``clock`` (monotonic seconds) paces the rate limit and the
    pruning, and is injectable for tests. After :meth:`start`, :attr:`port`
    is the bound port (pass 0 to let the system choose).
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        tokens: Mapping[str, str] | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        retention_count: int = 10_000,
        retention_age: float = 7 * 24 * 3600.0,
        rate: float = 50.0,
        burst: int = 200,
        queue_size: int = 1000,
        replay_page: int = 500,
        prune_interval: float = 10.0,
        close_timeout: float = 5.0,
        ping_interval: float | None = 20.0,
        systemd_notify: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_frame < 2 * 1024:
            raise ValueError("max_frame must be at least 2048 bytes")
        if queue_size < 2 or replay_page < 1:
            raise ValueError("queue_size must be at least 2 and replay_page at least 1")
        if rate <= 0 or burst < 1:
            # Checked here, not first by every connection's TokenBucket.
            raise ValueError("rate must be positive and burst at least 1")
        self.host = host
        self.port = port
        self.tokens = dict(tokens or {})
        self.max_frame = max_frame
        self.max_text = max_text_for(max_frame)
        self.rate = rate
        self.burst = burst
        self.queue_size = queue_size
        self.replay_page = replay_page
        self.prune_interval = prune_interval
        self.close_timeout = close_timeout
        self.ping_interval = ping_interval
        self.systemd_notify = systemd_notify
        self.clock = clock  # monotonic seconds, for rates and the prune interval
        self.stats = HubStats()
        self._store = MessageStore(
            db_path, retention_count=retention_count, retention_age=retention_age
        )
        self._writes: asyncio.Queue[_Write | object] = asyncio.Queue(maxsize=queue_size)
        self._subscribers: dict[str, dict[_Connection, _Subscription]] = {}
        self._connections: set[_Connection] = set()
        self._identities: weakref.WeakKeyDictionary[ServerConnection, str] = (
            weakref.WeakKeyDictionary()
        )
        self._server: Server | None = None
        self._writer: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._touched: set[str] = set()
        self._last_prune = 0.0
        self._state = "new"

    @property
    def url(self) -> str:
        """The ``ws://`` URL clients use (the bound port after :meth:`start`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/"

    async def __aenter__(self) -> Hub:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the store, start the writer, listen; under systemd send ``READY=1``."""
        if self._state != "new":
            raise RuntimeError("a hub starts once")
        self._state = "starting"
        await self._store.open()
        self._last_prune = self.clock()
        self._writer = asyncio.create_task(self._write_loop(), name="atirc-hub-writer")
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self.port,
                process_request=self._authenticate,
                compression=None,  # small JSON frames: deflate costs CPU and memory per connection
                max_size=self.max_frame,
                close_timeout=self.close_timeout,
                ping_interval=self.ping_interval,
                ping_timeout=self.ping_interval,
            )
        except OSError:
            await self._stop_writer()
            await self._store.close()
            self._state = "closed"
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        self._state = "running"
        log.info("hub.listening", url=self.url, tokens=len(self.tokens))
        if self.systemd_notify:
            notify(f"READY=1\nSTATUS=listening on {self.url}")
            interval = watchdog_interval()
            if interval is not None:
                self._watchdog = asyncio.create_task(
                    self._watchdog_loop(interval), name="atirc-hub-watchdog"
                )

    async def aclose(self) -> None:
        """Stop accepting, close connections with 1001, finish the writes, close the store."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        if self.systemd_notify:
            notify("STOPPING=1")
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.wait([self._watchdog])
        if self._server is not None:
            self._server.close(
                close_connections=True, code=GOING_AWAY_CLOSE[0], reason=GOING_AWAY_CLOSE[1]
            )
            await self._server.wait_closed()
        await self._stop_writer()
        await self._store.close()
        self._state = "closed"
        log.info("hub.closed", **vars(self.stats))

    async def _stop_writer(self) -> None:
        if self._writer is None or self._writer.done():
            return
        try:
            async with asyncio.timeout(self.close_timeout):
                await self._writes.put(_STOP)
                await asyncio.shield(self._writer)
        except TimeoutError:
            log.error("hub.writer_stuck", timeout=self.close_timeout)
            self._writer.cancel()
            await asyncio.wait([self._writer])

    # -- handshake ----------------------------------------------------------------------

    def _authenticate(self, ws: ServerConnection, request: Request) -> Response | None:
        """Map the bearer token to a nick, or refuse the handshake with a plain-text reason."""
        token = _presented_token(request)
        if self.tokens:
            if token is None:
                return _refuse(
                    HTTPStatus.UNAUTHORIZED,
                    "a token is required: send 'Authorization: Bearer TOKEN' or ?token=TOKEN",
                )
            nick = None
            for known, who in self.tokens.items():
                # Compare every token in constant time, so timing tells nothing.
                if hmac.compare_digest(known.encode(), token.encode()):
                    nick = who
            if nick is None:
                log.warning("hub.unknown_token", peer=_peer(ws))
                return _refuse(HTTPStatus.UNAUTHORIZED, "unknown token")
            self._identities[ws] = nick
            return None
        if token is not None:
            return _refuse(
                HTTPStatus.UNAUTHORIZED,
                "this hub has no tokens configured: connect without a token and send hello",
            )
        if not _is_loopback(ws.remote_address):
            log.warning("hub.refused_remote_hello", peer=_peer(ws))
            return _refuse(
                HTTPStatus.FORBIDDEN,
                "this hub has no tokens, so it accepts only loopback connections",
            )
        return None

    # -- one connection -----------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        conn = _Connection(self, ws, self._identities.pop(ws, None))
        self._connections.add(conn)
        self.stats.connections = len(self._connections)
        try:
            async with asyncio.TaskGroup() as tasks:
                conn.tasks = tasks
                conn.sender = tasks.create_task(self._send_loop(conn))
                if conn.nick is not None:
                    conn.send(Welcome(nick=conn.nick, max_text=self.max_text))
                await self._read_loop(conn)
                if not conn.kicked:  # a kick's close task owns the sender's end
                    conn.sender.cancel()
        finally:
            conn.finished = True
            self._drop_subscriptions(conn)
            self._connections.discard(conn)
            self.stats.connections = len(self._connections)
            conn.log.debug("hub.disconnected", code=ws.close_code, reason=ws.close_reason)

    async def _send_loop(self, conn: _Connection) -> None:
        try:
            while True:
                await conn.ws.send(await conn.outbox.get())
        except ConnectionClosed:
            pass  # the reader sees it too and ends the connection
        finally:
            conn.outbox.close()

    async def _read_loop(self, conn: _Connection) -> None:
        try:
            async for raw in conn.ws:
                if conn.kicked:
                    return
                verdict = conn.bucket.take(self.clock())
                if verdict is Verdict.FLOOD:
                    self.stats.flood_closed += 1
                    conn.log.warning("hub.flood", rate=self.rate, burst=self.burst)
                    conn.kick(*FLOOD_CLOSE, flush=True)
                    return
                try:
                    frame = parse_client_frame(
                        raw, max_frame=self.max_frame, max_text=self.max_text
                    )
                except ProtocolError as exc:
                    conn.send(
                        ErrorFrame(
                            exc.code, exc.message, client_id=exc.client_id, channel=exc.channel
                        )
                    )
                    continue
                if verdict is Verdict.LIMITED:
                    conn.send(
                        ErrorFrame(
                            ErrorCode.RATE_LIMITED,
                            f"over {self.rate:g} frames/s: slow down and retry",
                            client_id=getattr(frame, "client_id", None),
                            channel=getattr(frame, "channel", None),
                        )
                    )
                    continue
                await self._dispatch(conn, frame)
        except ConnectionClosed:
            return

    async def _dispatch(self, conn: _Connection, frame: ClientFrame) -> None:
        match frame:
            case Hello(nick=nick):
                if conn.nick is None:
                    conn.nick = nick
                    conn.log = conn.log.bind(nick=nick)
                    conn.send(Welcome(nick=nick, max_text=self.max_text))
                elif nick == conn.nick:
                    conn.send(Welcome(nick=nick, max_text=self.max_text))
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
                conn.send(
                    ErrorFrame(
                        ErrorCode.UNAUTHORIZED,
                        "send hello with your nick first (this hub has no tokens)",
                        client_id=getattr(frame, "client_id", None),
                        channel=getattr(frame, "channel", None),
                    )
                )
            case Subscribe():
                await self._subscribe(conn, frame)
            case Unsubscribe(channel=channel):
                self._remove_subscription(conn, channel)
            case Publish():
                await self._publish(conn, frame)

    # -- publish ------------------------------------------------------------------------

    async def _publish(self, conn: _Connection, frame: Publish) -> None:
        assert conn.nick is not None  # _dispatch checked
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        future.add_done_callback(partial(self._acked, conn, frame.client_id))
        new = NewMessage(
            channel=frame.channel,
            text=frame.text,
            sender=conn.nick,  # the hub's view, never a claim of the client
            client_id=frame.client_id,
            thread=frame.thread,
            reply_to=frame.reply_to,
            more=frame.more,
        )
        # Bounded: when the store falls behind, readers wait here, and TCP pushes back.
        await self._writes.put(_Write(new, future))

    def _acked(self, conn: _Connection, client_id: str, future: asyncio.Future[Message]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
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

    async def _write_loop(self) -> None:
        """The only writer: store batches, fan out in id order, prune now and then."""
        while True:
            try:
                # Wake up now and then when idle, for the age bound; never spin.
                async with asyncio.timeout(max(self.prune_interval, 1.0)):
                    item = await self._writes.get()
            except TimeoutError:
                await self._maybe_prune()  # also when idle, for the age bound
                continue
            batch: list[_Write] = []
            stop = item is _STOP
            if isinstance(item, _Write):
                batch.append(item)
            while not stop and len(batch) < _WRITE_BATCH and not self._writes.empty():
                more = self._writes.get_nowait()
                if more is _STOP:
                    stop = True
                elif isinstance(more, _Write):
                    batch.append(more)
            if batch:
                await self._write_batch(batch)
                await self._maybe_prune()
            if stop:
                return

    async def _write_batch(self, batch: list[_Write]) -> None:
        try:
            results = await self._store.store([w.new for w in batch])
        except HubStoreError as exc:
            log.error("hub.store_failed", error=str(exc), batch=len(batch))
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(exc)
            return
        for w, stored in zip(batch, results, strict=True):
            if stored.duplicate:
                self.stats.duplicates += 1
            else:
                self.stats.published += 1
                self._touched.add(stored.message.channel)
                self._fanout(stored.message)
            if not w.future.done():
                w.future.set_result(stored.message)

    async def _maybe_prune(self) -> None:
        now = self.clock()
        if now - self._last_prune < self.prune_interval:
            return
        self._last_prune = now
        channels, self._touched = self._touched, set()
        try:
            dropped = await self._store.prune(channels)
        except HubStoreError as exc:
            log.error("hub.prune_failed", error=str(exc))
            return
        if dropped:
            log.debug("hub.pruned", dropped=dropped)

    def _fanout(self, message: Message) -> None:
        """Hand a stored message to every subscriber of its channel (never waits)."""
        subs = self._subscribers.get(message.channel)
        if not subs:
            return
        text = encode(message)  # one string shared by every outbox
        for conn, sub in list(subs.items()):
            if sub.pending is not None:
                if len(sub.pending) >= self.queue_size:
                    # The replay will read these from the store instead.
                    sub.pending.clear()
                    sub.overflow = True
                else:
                    sub.pending.append((message.id, text))
            else:
                conn.send_text(text)

    # -- subscribe ----------------------------------------------------------------------

    def _remove_subscription(self, conn: _Connection, channel: str) -> None:
        conn.subs.pop(channel, None)
        subs = self._subscribers.get(channel)
        if subs is not None:
            subs.pop(conn, None)
            if not subs:
                del self._subscribers[channel]
        self._count_subscriptions()

    def _drop_subscriptions(self, conn: _Connection) -> None:
        for channel in list(conn.subs):
            self._remove_subscription(conn, channel)

    def _count_subscriptions(self) -> None:
        self.stats.subscriptions = sum(len(s) for s in self._subscribers.values())

    async def _subscribe(self, conn: _Connection, frame: Subscribe) -> None:
        """Register, answer ``subscribed``, replay after ``since``, then go live.

        The subscription is registered before the store is read, and parks
        live messages until the replay has caught up: whatever is committed
        after a read shows up in ``pending``, whatever before in the read.
        """
        channel = frame.channel
        self._remove_subscription(conn, channel)
        sub = _Subscription()
        conn.subs[channel] = sub
        self._subscribers.setdefault(channel, {})[conn] = sub
        self._count_subscriptions()
        try:
            head, oldest = await self._store.bounds(channel)
            if conn.subs.get(channel) is not sub:
                return
            conn.send(Subscribed(channel=channel, head=head, oldest=oldest))
            if frame.since is None:
                self._go_live(conn, sub, head or ZERO_ID)
                return
            last = frame.since
            while True:
                sub.pending = []
                sub.overflow = False
                rows = await self._store.after(channel, last, self.replay_page)
                for message in rows:
                    if conn.subs.get(channel) is not sub:
                        return
                    if not await conn.outbox.push_replay(encode(message)):
                        return
                    last = message.id
                if conn.subs.get(channel) is not sub:
                    return
                if len(rows) < self.replay_page and not sub.overflow:
                    self._go_live(conn, sub, last)
                    return
        except HubStoreError as exc:
            log.error("hub.replay_failed", channel=channel, error=str(exc))
            self._remove_subscription(conn, channel)
            conn.send(
                ErrorFrame(
                    ErrorCode.INTERNAL,
                    "the hub could not read the channel; subscribe again later",
                    channel=channel,
                )
            )

    def _go_live(self, conn: _Connection, sub: _Subscription, last: str) -> None:
        pending, sub.pending = sub.pending or [], None
        for message_id, text in pending:
            if message_id > last:
                conn.send_text(text)

    # -- systemd ------------------------------------------------------------------------

    async def _healthy(self, within: float) -> bool:
        if self._writer is None or self._writer.done():
            return False
        if self._server is None or not self._server.is_serving():
            return False
        try:
            async with asyncio.timeout(within):
                await self._store.ping()
        except (TimeoutError, HubStoreError):
            return False
        return True

    async def _watchdog_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if await self._healthy(interval):
                notify("WATCHDOG=1")
            else:
                # No ping: systemd's WatchdogSec= restarts the hub.
                log.error("hub.unhealthy")
