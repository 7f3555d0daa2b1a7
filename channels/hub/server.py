"""The hub itself: its lifecycle, one handler per connection, the systemd watchdog.

An atirc-style pub/sub server on websockets, messages kept in SQLite. The
parts live beside this module: ``auth`` (the handshake), ``connection`` and
``outbox`` (one connection's state), ``dispatch`` (reading and answering
frames), ``writer`` (storing and pruning), ``fanout`` and ``replay``.

Per connection there are two tasks, both owned by the connection's handler:
the reader (parses frames, answers them, runs ``since`` replay) and the
sender (drains the connection's outbox into the socket). One writer task,
owned by the hub, stores publishes in batches and fans each stored message
out, in id order, to every subscriber's outbox.

Limits, and what happens at each (the table of docs/channels.md says the same):

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
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve

from channels.errors import HubStoreError
from channels.frames import Welcome
from channels.hub.auth import Authenticator
from channels.hub.connection import GOING_AWAY_CLOSE, Connection
from channels.hub.dispatch import Dispatcher
from channels.hub.fanout import Subscribers
from channels.hub.replay import Replay
from channels.hub.stats import HubStats
from channels.hub.writer import Writer
from channels.notify import notify, watchdog_interval
from channels.protocol import DEFAULT_MAX_FRAME, max_text_for
from channels.ratelimit import TokenBucket
from channels.store import MessageStore

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "Hub"]

log = structlog.get_logger("channels.hub")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6680


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
        self._subscribers = Subscribers(self.stats, queue_size)
        self._writer = Writer(
            self._store,
            self.stats,
            deliver=self._subscribers.fanout,
            queue_size=queue_size,
            prune_interval=prune_interval,
            close_timeout=close_timeout,
            clock=clock,
        )
        self._dispatcher = Dispatcher(
            max_frame=max_frame,
            max_text=self.max_text,
            rate=rate,
            burst=burst,
            clock=clock,
            stats=self.stats,
            subscribers=self._subscribers,
            replay=Replay(self._store, self._subscribers, replay_page),
            writer=self._writer,
        )
        self._auth = Authenticator(self.tokens)
        self._connections: set[Connection] = set()
        self._server: Server | None = None
        self._watchdog: asyncio.Task[None] | None = None
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
        self._writer.start()
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self.port,
                process_request=self._auth,
                compression=None,  # small JSON frames: deflate costs CPU and memory per connection
                max_size=self.max_frame,
                close_timeout=self.close_timeout,
                ping_interval=self.ping_interval,
                ping_timeout=self.ping_interval,
            )
        except OSError:
            await self._writer.stop()
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
        await self._writer.stop()
        await self._store.close()
        self._state = "closed"
        log.info("hub.closed", **vars(self.stats))

    # -- one connection -----------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        conn = Connection(
            ws,
            self._auth.pop(ws),
            queue_size=self.queue_size,
            bucket=TokenBucket(self.rate, self.burst, self.clock()),
            close_timeout=self.close_timeout,
            stats=self.stats,
            forget=self._subscribers.drop,
        )
        self._connections.add(conn)
        self.stats.connections = len(self._connections)
        try:
            async with asyncio.TaskGroup() as tasks:
                conn.tasks = tasks
                conn.sender = tasks.create_task(conn.send_loop())
                if conn.nick is not None:
                    conn.send(Welcome(nick=conn.nick, max_text=self.max_text))
                await self._dispatcher.read_loop(conn)
                if not conn.kicked:  # a kick's close task owns the sender's end
                    conn.sender.cancel()
        finally:
            conn.finished = True
            self._subscribers.drop(conn)
            self._connections.discard(conn)
            self.stats.connections = len(self._connections)
            conn.log.debug("hub.disconnected", code=ws.close_code, reason=ws.close_reason)

    # -- systemd ------------------------------------------------------------------------

    async def _healthy(self, within: float) -> bool:
        if not self._writer.running:
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
