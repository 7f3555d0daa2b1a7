"""The client side: the ``Channel`` interface and its websocket implementation.

:class:`WebSocketChannel` keeps one connection to a hub and hides its breaks:

- ``publish`` waits for the hub's ack. If the connection breaks first, it
  sends the same frame again (same ``client_id``) on the next connection, and
  the hub acks the first copy instead of storing a second. A text longer
  than one frame allows goes out as several messages in one thread, each
  acked (all but the last carry ``more``).
- After a break it reconnects (an injectable :data:`Backoff` decides how long
  to wait, so tests never really sleep) and subscribes again with ``since`` =
  the last id it delivered per channel, and drops any id it has delivered
  already: nothing is lost or delivered twice across reconnects.
- Its inbox is bounded. The reader never blocks on it (acks must keep
  flowing while the consumer is busy): when the inbox is full the client
  drops new messages of that channel and, once the consumer has drained
  half of it, subscribes again with ``since`` and gets them from the hub's
  store, in order.
- A ``since`` older than the channel's ``oldest`` retained id is logged
  (``channels.retention_gap``): retention may have dropped messages.

Errors: :class:`~channels.errors.ChannelClosedError` after you closed it,
:class:`~channels.errors.ChannelBrokenError` when the hub is gone for good
(the backoff gave up), :class:`~channels.errors.UnauthorizedError` when the
hub refuses the token, :class:`~channels.errors.ChannelTimeoutError` when an
ack does not come, :class:`~channels.errors.ProtocolError` when the hub
refuses a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)
from websockets.uri import parse_uri

from channels.errors import (
    ChannelBrokenError,
    ChannelClosedError,
    ChannelConfigError,
    ChannelError,
    ChannelTimeoutError,
    HubUnreachableError,
    ProtocolError,
    UnauthorizedError,
)
from channels.protocol import (
    DEFAULT_MAX_FRAME,
    ZERO_ID,
    Ack,
    ErrorCode,
    ErrorFrame,
    Hello,
    Message,
    Publish,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Welcome,
    encode,
    is_channel,
    is_id,
    is_nick,
    max_text_for,
    parse_server_frame,
    split_text,
)

__all__ = [
    "DEFAULT_URL",
    "Backoff",
    "Channel",
    "Message",
    "PublishAck",
    "Subscribed",
    "WebSocketChannel",
    "exponential_backoff",
]

log = structlog.get_logger("channels.client")

DEFAULT_URL = "ws://127.0.0.1:6680/"

Backoff = Callable[[int], Awaitable[bool]]
"""Awaited before reconnect attempt ``n`` (1, 2, …) and before retrying a
rate-limited publish: sleeps as long as it likes, returns False to give up."""


def exponential_backoff(
    *,
    initial: float = 0.2,
    maximum: float = 10.0,
    factor: float = 2.0,
    attempts: int | None = None,
    jitter: float = 0.2,
) -> Backoff:
    """A :data:`Backoff` that sleeps ``initial * factor**(n-1)`` (capped, with jitter).

    ``attempts`` bounds the attempts in a row; ``None`` retries forever, which
    suits a daemon whose hub may restart.
    """

    async def backoff(attempt: int) -> bool:
        if attempts is not None and attempt > attempts:
            return False
        delay = min(maximum, initial * factor ** (attempt - 1))
        await asyncio.sleep(delay * (1 + random.uniform(0, jitter)))
        return True

    return backoff


@dataclass(frozen=True)
class PublishAck:
    """The hub's answer to a publish: the message's id and its thread.

    For a text split into several messages, ``id`` is the first one's and
    ``ids`` lists them all, in order.
    """

    id: str
    thread: str
    ids: tuple[str, ...]


@runtime_checkable
class Channel(Protocol):
    """A pub/sub connection: what the daemon needs from any transport."""

    @property
    def nick(self) -> str | None:
        """The client's own nick, as the hub knows it (from ``welcome``); None before."""
        ...

    async def subscribe(self, channel: str, since: str | None = None) -> Subscribed:
        """Receive ``channel``'s messages: those stored after ``since`` first, then live ones."""
        ...

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel``."""
        ...

    async def publish(
        self,
        channel: str,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        client_id: str | None = None,
    ) -> PublishAck:
        """Publish and wait for the ack. ``client_id`` (default: a new UUID) makes it idempotent."""
        ...

    async def receive(self) -> Message:
        """The next message of any subscribed channel."""
        ...

    def __aiter__(self) -> AsyncIterator[Message]:
        """Iterate over messages until the channel is closed."""
        ...

    async def close(self) -> None:
        """Close the channel (idempotent)."""
        ...


def _abort(ws: ClientConnection | None) -> None:
    """Drop a connection that never became a session (no close handshake to wait for)."""
    if ws is not None:
        ws.transport.abort()


class _SessionLost(Exception):
    """Internal: the connection a publish was sent on is gone; send it again."""


@dataclass
class _Subscription:
    """The client's state for one subscribed channel."""

    last_id: str | None  # the last id delivered (or the since asked for): the next since
    waiters: list[asyncio.Future[Subscribed]] = field(default_factory=list)
    awaiting: int = 0  # subscribe frames sent but not answered: drop messages until then
    overflowed: bool = False  # the inbox was full: drop, and subscribe again when it drains


@dataclass
class _Session:
    """One websocket connection, from welcome to close."""

    ws: ClientConnection
    ended: bool = False
    sent_since: dict[str, str | None] = field(default_factory=dict)


class WebSocketChannel:
    """A :class:`Channel` over one websocket connection to an atirc hub.

    Without ``token`` the client says ``hello`` with ``nick`` (a hub without
    tokens, on loopback). ``ack_timeout`` bounds every wait for the hub (ack,
    ``subscribed``), reconnects included; ``connect_timeout`` one connection
    attempt; ``max_in_flight`` how many publishes may await their ack at
    once. Use it as an async context manager, or call :meth:`connect` and
    :meth:`close`; other methods connect lazily.
    """

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
    ) -> None:
        try:
            parse_uri(url)
        except (InvalidURI, ValueError) as exc:  # ValueError: urllib on a bad port or bracket
            raise ChannelConfigError(f"invalid hub URL {url!r}: {exc}") from exc
        if token is None and nick is None:
            raise ChannelConfigError("a nick is needed to connect without a token")
        if nick is not None and not is_nick(nick):
            raise ChannelConfigError(
                f"invalid nick {nick!r}: 1-64 of letters, digits, '-', '_', '.'"
            )
        if inbox_size < 2:
            raise ValueError("inbox_size must be at least 2")
        self.url = url
        self._token = token
        self._hello_nick = nick
        self._backoff = backoff or exponential_backoff()
        self._ack_timeout = ack_timeout
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._inbox_size = inbox_size
        self._max_size = max_size
        self._ping_interval = ping_interval
        self._max_text = max_text_for(DEFAULT_MAX_FRAME)
        self._nick: str | None = None
        self._state = "new"  # new → open → closed | broken
        self._broken_cause: BaseException | None = None
        self._session: _Session | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._inbox: deque[Message] = deque()
        self._inbox_ready = asyncio.Event()
        self._subs: dict[str, _Subscription] = {}
        self._acks: dict[str, asyncio.Future[Ack]] = {}
        # Publishes awaiting their ack at once: far below the hub's default burst,
        # so concurrent publishers never look like a flood.
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._pace = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def nick(self) -> str | None:
        """The nick the hub knows us by (from ``welcome``); None until connected."""
        return self._nick

    async def __aenter__(self) -> WebSocketChannel:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

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

    async def close(self) -> None:
        """Close the connection; pending and later calls raise ChannelClosedError."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._fail_waiters(lambda: ChannelClosedError("the channel was closed"))
        self._wake()
        session = self._session
        if session is not None:
            await session.ws.close()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.wait([self._supervisor])

    def _check_usable(self) -> None:
        if self._state == "closed":
            raise ChannelClosedError("the channel was closed")
        if self._state == "broken":
            raise self._broken_error()

    def _broken_error(self) -> ChannelBrokenError:
        cause = self._broken_cause
        if isinstance(cause, ChannelBrokenError):
            err = ChannelBrokenError(str(cause))
        else:
            err = ChannelBrokenError(f"the connection to {self.url} is gone: {cause}")
        err.__cause__ = cause
        return err

    def _wake(self) -> None:
        """Tell everyone waiting for a state change (a session began or ended, closed, broken)."""
        self._changed.set()
        self._changed = asyncio.Event()
        self._inbox_ready.set()

    def _fail_waiters(self, make: Callable[[], BaseException]) -> None:
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(make())
        for sub in self._subs.values():
            for waiter in sub.waiters:
                if not waiter.done():
                    waiter.set_exception(make())
            sub.waiters.clear()

    # -- connecting -----------------------------------------------------------------------

    async def _establish(self, *, retry: bool) -> tuple[ClientConnection, Welcome]:
        attempt = 0
        while True:
            try:
                return await self._open_once()
            except HubUnreachableError as exc:
                if not retry:
                    raise
                attempt += 1
                if not await self._backoff(attempt):
                    raise HubUnreachableError(
                        f"gave up on the hub at {self.url} after {attempt} attempts: {exc}"
                    ) from exc
                if self._state == "closed":  # close() promises pending calls an end
                    raise ChannelClosedError("the channel was closed") from exc

    async def _open_once(self) -> tuple[ClientConnection, Welcome]:
        headers = [("Authorization", f"Bearer {self._token}")] if self._token else []
        ws: ClientConnection | None = None
        try:
            async with asyncio.timeout(self._connect_timeout):
                ws = await connect(
                    self.url,
                    additional_headers=headers,
                    compression=None,
                    max_size=self._max_size,
                    open_timeout=None,  # the enclosing timeout bounds the whole attempt
                    close_timeout=self._close_timeout,
                    ping_interval=self._ping_interval,
                    ping_timeout=self._ping_interval,
                )
                if self._token is None:
                    assert self._hello_nick is not None  # __init__ checked
                    await ws.send(encode(Hello(nick=self._hello_nick)))
                frame = parse_server_frame(await ws.recv())
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body.decode("utf-8", "replace").strip() if exc.response.body else ""
            if status in (401, 403):
                raise UnauthorizedError(
                    f"the hub at {self.url} refused us ({status}): {body}"
                ) from exc
            raise HubUnreachableError(
                f"the hub at {self.url} answered HTTP {status}: {body}"
            ) from exc
        except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
            _abort(ws)
            reason = str(exc) or type(exc).__name__
            raise HubUnreachableError(f"cannot reach the hub at {self.url}: {reason}") from exc
        except BaseException:
            _abort(ws)  # a bad first frame, or cancelled (closed) while connecting
            raise
        if isinstance(frame, ErrorFrame):
            _abort(ws)
            if frame.code == ErrorCode.UNAUTHORIZED:
                raise UnauthorizedError(f"the hub at {self.url} refused us: {frame.message}")
            raise ProtocolError(frame.code, frame.message)
        if not isinstance(frame, Welcome):
            _abort(ws)
            raise ProtocolError(ErrorCode.BAD_FRAME, f"expected welcome, got {frame.type}")
        return ws, frame

    def _begin(self, ws: ClientConnection, welcome: Welcome) -> None:
        self._nick = welcome.nick
        if welcome.max_text is not None and welcome.max_text > 0:
            self._max_text = welcome.max_text
        self._session = _Session(ws)
        self._state = "open"
        self._wake()

    def _end(self, session: _Session) -> None:
        session.ended = True
        if self._session is session:
            self._session = None
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(_SessionLost())
        self._wake()

    def _set_broken(self, cause: BaseException) -> None:
        self._state = "broken"
        self._broken_cause = cause
        log.error("channels.broken", url=self.url, error=str(cause))
        self._fail_waiters(self._broken_error)
        self._wake()

    async def _supervise(self) -> None:
        """Own the connection: read it, and when it breaks, reconnect and resubscribe."""
        while True:
            session = self._session
            assert session is not None  # _begin set it
            try:
                await self._run(session)
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
            log.info("channels.reconnected", url=self.url, subscriptions=len(self._subs))

    async def _run(self, session: _Session) -> None:
        try:
            for channel in list(self._subs):
                sub = self._subs.get(channel)
                if sub is None or channel in session.sent_since:
                    continue
                sub.awaiting = 0
                sub.overflowed = False
                await self._send_subscribe(session, channel, sub)
            async for raw in session.ws:
                self._on_frame(session, raw)
        except ConnectionClosed:
            pass  # the supervisor reconnects

    async def _send_subscribe(self, session: _Session, channel: str, sub: _Subscription) -> None:
        since = sub.last_id
        sub.awaiting += 1
        session.sent_since[channel] = since
        await session.ws.send(encode(Subscribe(channel=channel, since=since)))

    # -- frames from the hub --------------------------------------------------------------

    def _on_frame(self, session: _Session, raw: str | bytes) -> None:
        try:
            frame = parse_server_frame(raw)
        except ProtocolError as exc:
            log.warning("channels.bad_frame_from_hub", url=self.url, error=str(exc))
            return
        match frame:
            case Message():
                self._on_message(frame)
            case Ack():
                fut = self._acks.get(frame.client_id)
                if fut is not None and not fut.done():
                    fut.set_result(frame)
            case Subscribed():
                self._on_subscribed(session, frame)
            case ErrorFrame():
                self._on_error(frame)
            case Welcome():
                pass  # only the first one matters

    def _on_message(self, message: Message) -> None:
        sub = self._subs.get(message.channel)
        if sub is None or sub.awaiting or sub.overflowed:
            return
        if sub.last_id is not None and message.id <= sub.last_id:
            return  # delivered already (replay overlapping a reconnect)
        if len(self._inbox) >= self._inbox_size:
            sub.overflowed = True
            log.info("channels.inbox_full", channel=message.channel, size=self._inbox_size)
            return
        self._inbox.append(message)
        sub.last_id = message.id
        self._inbox_ready.set()

    def _on_subscribed(self, session: _Session, frame: Subscribed) -> None:
        sub = self._subs.get(frame.channel)
        if sub is None:
            return
        sub.awaiting = max(0, sub.awaiting - 1)
        since = session.sent_since.get(frame.channel)
        if sub.last_id is None:
            # Live only: everything up to head counts as seen; ZERO_ID if the channel
            # is empty, so a reconnect replays whatever came in meanwhile.
            sub.last_id = frame.head or ZERO_ID
        if (
            since is not None
            and since != ZERO_ID
            and frame.oldest is not None
            and since < frame.oldest
        ):
            log.warning(
                "channels.retention_gap",
                channel=frame.channel,
                since=since,
                oldest=frame.oldest,
                note="messages between since and oldest may have been dropped by retention",
            )
        for waiter in sub.waiters:
            if not waiter.done():
                waiter.set_result(frame)
        sub.waiters.clear()

    def _on_error(self, frame: ErrorFrame) -> None:
        error = ProtocolError(
            frame.code, frame.message, client_id=frame.client_id, channel=frame.channel
        )
        if frame.client_id is not None:
            fut = self._acks.get(frame.client_id)
            if fut is not None and not fut.done():
                fut.set_exception(error)
                return
        if frame.client_id is None and frame.channel is not None and frame.channel in self._subs:
            sub = self._subs.pop(frame.channel)
            for waiter in sub.waiters:
                if not waiter.done():
                    waiter.set_exception(error)
            if not sub.waiters:
                log.error("channels.subscription_refused", channel=frame.channel, error=str(error))
            return
        log.warning("channels.error_from_hub", code=frame.code, message=frame.message)

    # -- the Channel interface ------------------------------------------------------------

    async def _ensure_open(self) -> None:
        if self._state == "new":
            await self.connect()
        self._check_usable()

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
        if not is_channel(channel):
            raise ProtocolError(ErrorCode.BAD_CHANNEL, f"invalid channel name {channel!r}")
        if since is not None and not is_id(since):
            raise ProtocolError(ErrorCode.BAD_FRAME, f"since is not a message id: {since!r}")
        await self._ensure_open()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Subscribed] = loop.create_future()
        sub = _Subscription(last_id=since, waiters=[waiter])
        self._subs[channel] = sub
        session = self._session
        if session is not None and not session.ended:
            # On a closed connection the next session subscribes again.
            with contextlib.suppress(ConnectionClosed):
                await self._send_subscribe(session, channel, sub)
        try:
            async with asyncio.timeout(self._ack_timeout):
                return await waiter
        except TimeoutError as exc:
            raise ChannelTimeoutError(
                f"the hub did not confirm the subscription to {channel} "
                f"within {self._ack_timeout:g}s"
            ) from exc

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel`` (messages already in the inbox stay)."""
        self._check_usable()
        sub = self._subs.pop(channel, None)
        if sub is None:
            return
        for waiter in sub.waiters:
            waiter.cancel()
        session = self._session
        if session is not None and not session.ended:
            # Gone anyway; the next session does not subscribe to it again.
            with contextlib.suppress(ConnectionClosed):
                await session.ws.send(encode(Unsubscribe(channel=channel)))

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
        if not is_channel(channel):
            raise ProtocolError(ErrorCode.BAD_CHANNEL, f"invalid channel name {channel!r}")
        if not text:
            raise ProtocolError(ErrorCode.BAD_FRAME, "cannot publish an empty text")
        try:
            # A lone surrogate (json.loads lets "\ud800" through) cannot go out as
            # UTF-8: websockets would drop the connection on every resend.
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ProtocolError(
                ErrorCode.BAD_FRAME, f"cannot publish a text that is not valid Unicode: {exc}"
            ) from exc
        for key, value in (("thread", thread), ("reply_to", reply_to)):
            if value is not None and not is_id(value):
                raise ProtocolError(ErrorCode.BAD_FRAME, f"{key} is not a message id: {value!r}")
        await self._ensure_open()
        base = client_id or uuid.uuid4().hex
        chunks = split_text(text, self._max_text)
        acks: list[Ack] = []
        for index, chunk in enumerate(chunks):
            frame = Publish(
                channel=channel,
                text=chunk,
                client_id=base if index == 0 else f"{base}.{index}",
                thread=thread if not acks else acks[0].thread,
                reply_to=reply_to,
                more=index < len(chunks) - 1,
            )
            acks.append(await self._publish_one(frame))
        return PublishAck(id=acks[0].id, thread=acks[0].thread, ids=tuple(a.id for a in acks))

    async def _publish_one(self, frame: Publish) -> Ack:
        loop = asyncio.get_running_loop()
        attempt = 0
        try:
            async with asyncio.timeout(self._ack_timeout), self._in_flight:
                while True:
                    async with self._pace:
                        pass  # someone is backing off from rate_limited: wait for them
                    session = await self._wait_session()
                    fut: asyncio.Future[Ack] = loop.create_future()
                    self._acks[frame.client_id] = fut
                    try:
                        # If the connection is gone, its end fails fut with _SessionLost.
                        with contextlib.suppress(ConnectionClosed):
                            await session.ws.send(encode(frame))
                        return await fut
                    except _SessionLost:
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
                        if self._acks.get(frame.client_id) is fut:
                            del self._acks[frame.client_id]
        except TimeoutError as exc:
            raise ChannelTimeoutError(
                f"no ack from the hub for a publish to {frame.channel} "
                f"within {self._ack_timeout:g}s"
            ) from exc

    async def receive(self) -> Message:
        """The next message; raises ChannelClosedError / ChannelBrokenError when there is none."""
        while True:
            if self._inbox:
                if len(self._inbox) <= self._inbox_size // 2:
                    # Before taking a message, so a cancellation here loses nothing.
                    await self._resync()
                return self._inbox.popleft()
            if self._state == "new":
                await self.connect()
            self._check_usable()
            self._inbox_ready.clear()
            await self._inbox_ready.wait()

    async def _resync(self) -> None:
        """Subscribe again (``since`` = last delivered) to channels whose messages were dropped."""
        session = self._session
        if session is None or session.ended:
            return  # the next session subscribes to everything again anyway
        for channel, sub in list(self._subs.items()):
            if not sub.overflowed:
                continue
            sub.overflowed = False
            log.info("channels.resync", channel=channel, since=sub.last_id)
            try:
                await self._send_subscribe(session, channel, sub)
            except ConnectionClosed:
                return

    def __aiter__(self) -> AsyncIterator[Message]:
        """Iterate over messages; the iteration ends when the channel is closed."""
        return self

    async def __anext__(self) -> Message:
        """The next message (see :meth:`receive`); StopAsyncIteration once closed."""
        try:
            return await self.receive()
        except ChannelClosedError:
            raise StopAsyncIteration from None
