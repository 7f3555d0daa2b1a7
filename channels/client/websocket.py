"""The client's connection layer: :class:`WebSocketChannel`, the websocket I/O.

The protocol's state (subscriptions, dedup, the inbox) lives in the sans-I/O
:class:`~channels.client.protocol.ClientProtocol`; this module connects,
reads, writes and reconnects, and :class:`~channels.client.pending.Pending`
keeps the futures callers wait on.

:class:`WebSocketChannel` keeps one connection to a hub and hides its breaks:

- ``publish`` waits for the hub's ack. If the connection breaks first, it
  sends the same frame again (same ``client_id``) on the next connection, and
  the hub acks the first copy instead of storing a second. A text longer
  than one frame allows goes out as several messages in one thread, each
  acked (all but the last carry ``more``).
- After a break it reconnects (an injectable
  :data:`~channels.client.backoff.Backoff` decides how long to wait, so tests
  never really sleep), and the protocol subscribes again from the last id
  delivered per channel: nothing is lost or delivered twice.
- The reader never blocks on the bounded inbox, so acks keep flowing while
  the consumer is busy; the protocol's docstring says what happens when the
  inbox is full.

Statuses (short-lived progress, never stored) go out with :meth:`status`, best
effort, and come in through ``on_status``; iteration stays messages only.

Errors: :class:`~channels.errors.ChannelClosedError` after you closed it,
:class:`~channels.errors.ChannelBrokenError` when the hub is gone for good
(the backoff gave up) or the task that owns the connection died of a bug
(the error it died of is the ``__cause__``; :attr:`WebSocketChannel.broken`
turns true at once, for a watchdog to see),
:class:`~channels.errors.UnauthorizedError` when the
hub refuses the token, :class:`~channels.errors.ChannelTimeoutError` when an
ack does not come, :class:`~channels.errors.ProtocolError` when the hub
refuses a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from channels.client.backoff import Backoff, exponential_backoff
from channels.client.handshake import Dialer, check_settings
from channels.client.interface import PublishAck
from channels.client.pending import Pending, SessionLost
from channels.client.protocol import (
    ClientProtocol,
    Event,
    MessageReceived,
    StatusReceived,
    check_publish,
    check_subscribe,
)
from channels.errors import (
    ChannelClosedError,
    ChannelError,
    ChannelTimeoutError,
    ProtocolError,
)
from channels.frames import Ack, ErrorCode, Message, Publish, Status, Subscribed, Welcome
from channels.inbox import InboxChannel
from channels.protocol import encode

__all__ = ["DEFAULT_URL", "WebSocketChannel"]

log = structlog.get_logger("channels.client")

DEFAULT_URL = "ws://127.0.0.1:6680/"


@dataclass
class _Session:
    """One websocket connection, from welcome to close."""

    ws: ClientConnection
    ended: bool = False


class WebSocketChannel(InboxChannel):
    """A :class:`~channels.client.interface.Channel` over one websocket connection to a hub.

    Without ``token`` the client says ``hello`` with ``nick`` (a hub without
    tokens, on loopback). ``ack_timeout`` bounds every wait for the hub (ack,
    ``subscribed``), reconnects included; ``connect_timeout`` one connection
    attempt; ``max_in_flight`` how many publishes may await their ack at
    once; ``on_status`` takes each status of a subscribed channel, on the
    reader's task (it must not block; what it raises is logged). Use it as an
    async context manager, or :meth:`connect` and :meth:`close`.
    """

    _log = log

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        nick: str | None = None,
        backoff: Backoff | None = None,
        ack_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        close_timeout: float = 2.0,
        inbox_size: int = 10_000,
        max_in_flight: int = 16,
        max_size: int = 4 * 1024 * 1024,
        ping_interval: float | None = 20.0,
        on_status: Callable[[Status], None] | None = None,
    ) -> None:
        check_settings(url, token, nick)
        super().__init__(on_status)
        if inbox_size < 2:
            raise ValueError("inbox_size must be at least 2")
        self.url = url
        self.reconnects = 0  # times the connection was made again after it broke (the metrics')
        self._protocol = ClientProtocol(
            url, hello_nick=None if token is not None else nick, inbox_size=inbox_size
        )
        self._backoff = backoff or exponential_backoff()
        self._dialer = Dialer(
            self._protocol,
            token,
            self._backoff,
            connect_timeout,
            close_timeout,
            max_size,
            ping_interval,
        )
        self._ack_timeout = ack_timeout
        self._session: _Session | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._pending = Pending()
        # Publishes awaiting their ack at once: far below the hub's default burst,
        # so concurrent publishers never look like a flood.
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._pace = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def nick(self) -> str | None:
        """The nick the hub knows us by (from ``welcome``); None until connected."""
        return self._protocol.nick

    @property
    def connected(self) -> bool:
        """Whether a connection to the hub is up now (False while it reconnects); for the
        console's Health page."""
        return self._protocol.connected

    async def connect(self, *, retry: bool = True) -> None:
        """Connect and authenticate (idempotent).

        With ``retry`` the backoff decides how long to keep trying; without,
        one attempt, so a command line tool can say at once that the hub is
        unreachable. Later reconnects always use the backoff.
        """
        async with self._connect_lock:
            if self._state == "open":
                return
            self._check_usable()
            ws, welcome = await self._establish(retry=retry)
            if self._state != "new":  # closed while connecting
                await ws.close()
                self._check_usable()
            self._begin(ws, welcome)
            self._supervisor = asyncio.create_task(self._supervise(), name="atirc-client")
            self._supervisor.add_done_callback(self._supervisor_done)

    async def close(self) -> None:
        """Close the connection; pending and later calls raise ChannelClosedError."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._pending.fail_all(lambda: ChannelClosedError("the channel was closed"))
        self._wake()
        session = self._session
        if session is not None:
            await session.ws.close()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.wait([self._supervisor])

    @property
    def broken(self) -> bool:
        """True once the channel is broken for good: calls raise ChannelBrokenError.

        The hub stayed unreachable until the backoff gave up, or the task that
        owns the connection died of an unexpected error. Cheap to read (no
        I/O), for a watchdog: while the client reconnects it stays False, and
        after :meth:`close` too.
        """
        if self._state == "broken":
            return True
        # The done callback may not have run yet; a supervisor that is done while
        # the channel is open has died all the same.
        supervisor = self._supervisor
        return self._state == "open" and supervisor is not None and supervisor.done()

    def _wake(self) -> None:
        """Tell everyone waiting for a state change (a session began or ended, closed, broken)."""
        self._changed.set()
        self._changed = asyncio.Event()
        super()._wake()

    # -- connecting -----------------------------------------------------------------------

    async def _establish(self, *, retry: bool) -> tuple[ClientConnection, Welcome]:
        return await self._dialer.establish(retry=retry, closed=lambda: self._state == "closed")

    def _begin(self, ws: ClientConnection, welcome: Welcome) -> None:
        self._protocol.connection_made(welcome)
        self._session = _Session(ws)
        self._state = "open"
        self._wake()

    def _end(self, session: _Session) -> None:
        session.ended = True
        if self._session is session:
            self._session = None
            self._protocol.connection_lost()
        self._pending.session_lost()
        self._wake()

    def _set_broken(self, cause: BaseException) -> None:
        """Broken for good (:meth:`InboxChannel._set_broken`): every waiter fails."""
        super()._set_broken(cause)
        if self._state == "broken":
            self._pending.fail_all(self._broken_error)

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        """The supervisor ended: if not by close() or a broken hub, it died; say so.

        Without this, an unexpected error would end the task silently and
        ``receive()`` would wait forever while the process looks alive.
        """
        if self._state != "open":
            return  # closed by its owner, or already broken (and said why)
        cause: BaseException
        if task.cancelled():
            cause = asyncio.CancelledError("the client's supervisor task was cancelled")
        else:
            cause = task.exception() or RuntimeError("the client's supervisor task returned")
        log.error("channels.supervisor_died", url=self.url, exc_info=cause)
        self._set_broken(cause)

    async def _supervise(self) -> None:
        """Own the connection: read it, and when it breaks, reconnect and resubscribe."""
        while True:
            session = self._session
            assert session is not None  # _begin set it
            try:
                await self._run(session)
            except BaseException:
                # Nothing reconnects after this (close(), or a bug that breaks the
                # channel): drop the socket now rather than leave it to the collector.
                session.ws.transport.abort()
                raise
            finally:
                self._end(session)
            if self._state != "open":
                return
            log.warning(
                "channels.disconnected",
                url=self.url,
                code=session.ws.close_code,
                reason=session.ws.close_reason,
            )
            try:
                ws, welcome = await self._establish(retry=True)
            except ChannelError as exc:
                if self._state == "open":
                    self._set_broken(exc)
                return
            if self._state != "open":
                await ws.close()
                return
            self._begin(ws, welcome)
            self.reconnects += 1
            log.info(
                "channels.reconnected", url=self.url, subscriptions=len(self._protocol.channels())
            )

    async def _run(self, session: _Session) -> None:
        try:
            for channel in self._protocol.channels():
                text = self._protocol.resubscribe(channel)
                if text is not None:
                    await session.ws.send(text)
            async for raw in session.ws:
                for event in self._protocol.receive_frame(raw):
                    self._on_event(event)
        except ConnectionClosed:
            pass  # the supervisor reconnects

    def _on_event(self, event: Event) -> None:
        if isinstance(event, MessageReceived):
            self._inbox_ready.set()
        elif isinstance(event, StatusReceived):
            self._status_received(event.status)
        else:
            self._pending.settle(event)

    # -- the Channel interface ------------------------------------------------------------

    async def _wait_session(self) -> _Session:
        while True:
            await self._ensure_open()
            session = self._session
            if session is not None and not session.ended:
                return session
            await self._changed.wait()

    async def subscribe(self, channel: str, since: str | None = None) -> Subscribed:
        """Subscribe; replay what was stored after ``since`` (``ZERO_ID``: all retained).

        Returns the hub's ``subscribed`` (``head`` and ``oldest``). Subscribing
        again to a channel restarts it from the new ``since``.
        """
        check_subscribe(channel, since)
        await self._ensure_open()
        # Every waiter ends: confirmed, refused, failed by unsubscribe/close/broken, or timed out.
        waiter = self._pending.subscribe(channel)
        text = self._protocol.subscribe(channel, since)
        session = self._session
        if text is not None and session is not None and not session.ended:
            # On a closed connection the next session subscribes again.
            with contextlib.suppress(ConnectionClosed):
                await session.ws.send(text)
        try:
            async with asyncio.timeout(self._ack_timeout):
                return await waiter
        except TimeoutError as exc:
            raise ChannelTimeoutError(
                f"the hub did not confirm the subscription to {channel} "
                f"within {self._ack_timeout:g}s"
            ) from exc
        finally:
            self._pending.forget_subscribe(channel, waiter)

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel`` (messages already in the inbox stay)."""
        self._check_usable()
        self._pending.unsubscribe(channel)
        text = self._protocol.unsubscribe(channel)
        session = self._session
        if text is not None and session is not None and not session.ended:
            # Gone anyway; the next session does not subscribe to it again.
            with contextlib.suppress(ConnectionClosed):
                await session.ws.send(text)

    async def publish(
        self,
        channel: str,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        client_id: str | None = None,
    ) -> PublishAck:
        """Publish ``text`` and wait for the hub's ack (see the module docstring).

        A split text's chunks get the ``client_id``s ``ID``, ``ID.1``, ``ID.2``…,
        so publishing the same text again with the same ``client_id`` (after a
        restart) is deduplicated chunk by chunk.
        """
        check_publish(channel, text, thread, reply_to)
        await self._ensure_open()
        frames = self._protocol.publish_frames(
            channel, text, thread=thread, reply_to=reply_to, client_id=client_id
        )
        acks: list[Ack] = []
        for frame in frames:
            if acks:  # later chunks join the first one's thread
                frame = replace(frame, thread=acks[0].thread)
            acks.append(await self._publish_one(frame))
        return PublishAck(id=acks[0].id, thread=acks[0].thread, ids=tuple(a.id for a in acks))

    async def _publish_one(self, frame: Publish) -> Ack:
        attempt = 0
        try:
            async with asyncio.timeout(self._ack_timeout), self._in_flight:
                while True:
                    async with self._pace:
                        pass  # someone is backing off from rate_limited: wait for them
                    session = await self._wait_session()
                    fut = self._pending.publish(frame.client_id)
                    try:
                        # If the connection is gone, its end fails fut with SessionLost.
                        with contextlib.suppress(ConnectionClosed):
                            await session.ws.send(encode(frame))
                        return await fut
                    except SessionLost:
                        continue
                    except ProtocolError as exc:
                        if exc.code != ErrorCode.RATE_LIMITED:
                            raise
                        attempt += 1
                        # Hold everyone's sends while backing off: resending in
                        # parallel would turn a rate limit into a flood.
                        async with self._pace:
                            if not await self._backoff(attempt):
                                raise
                    finally:
                        self._pending.forget(frame.client_id, fut)
        except TimeoutError as exc:
            raise ChannelTimeoutError(
                f"no ack from the hub for a publish to {frame.channel} "
                f"within {self._ack_timeout:g}s"
            ) from exc

    async def status(self, channel: str, text: str, *, thread: str) -> None:
        """Show ``text`` as progress in ``thread`` to ``channel``'s subscribers now.

        Best effort: no ack, and nothing is sent while disconnected (a status
        is stale by the time a connection is back). Raises ProtocolError for a
        status that is not valid (see :func:`channels.protocol.status_problem`).
        """
        frame = self._protocol.status_frame(channel, text, thread=thread)
        await self._ensure_open()
        session = self._session
        if session is not None and not session.ended:
            with contextlib.suppress(ConnectionClosed):
                await session.ws.send(frame)

    async def _take(self) -> Message | None:
        """The protocol's next message (None: a concurrent receive took it meanwhile)."""
        if self._protocol.wants_resync():
            # Before taking a message, so a cancellation here loses nothing.
            await self._resync()
        return self._protocol.next_message()

    async def _resync(self) -> None:
        """Subscribe again (``since`` = last delivered) to channels whose messages were dropped."""
        session = self._session
        if session is None or session.ended:
            return  # the next session subscribes to everything again anyway
        for channel in self._protocol.overflowed():
            text = self._protocol.resync(channel)
            if text is None:
                continue
            try:
                await session.ws.send(text)
            except ConnectionClosed:
                return

    @property
    def pending(self) -> int:
        """Messages received and not yet taken (an ``on_status`` call comes after these)."""
        return self._protocol.pending
