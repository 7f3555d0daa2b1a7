""":class:`NatsChannel`: the :class:`~channels.client.interface.Channel` on NATS JetStream.

The mapping (streams, subjects, ids, headers) is :mod:`channels.nats.mapping`;
this module does the I/O with nats-py:

- ``publish`` creates the channel's stream when it is missing, publishes each
  chunk with ``Nats-Msg-Id`` and waits for JetStream's ack; a lost ack (a
  reconnect) is retried with the same ``Nats-Msg-Id`` until ``ack_timeout``,
  and the stream acks the first copy instead of storing a second.
- ``subscribe`` reads the stream with an ordered consumer (nats-py's: one
  ephemeral consumer that it re-creates from the last delivered sequence
  after a gap, a missed heartbeat or a reconnect), from where ``since`` says;
  its callback moves messages into the bounded inbox, waiting when it is
  full (JetStream's flow control then holds the rest on the server), and
  drops any id at or below the last one delivered.
- ``status`` is a core NATS publish on ``atirc-status.<chan>.<thread>``,
  which no stream stores; ``on_status`` gets those of subscribed channels.
- nats-py reconnects by itself (``reconnect_attempts`` in a row, ``None``
  forever); when it gives up the channel is broken (:attr:`broken`), as it
  is when delivering a message fails unexpectedly.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from channels.client.backoff import exponential_backoff
from channels.client.interface import PublishAck
from channels.client.protocol import check_publish, check_status, check_subscribe
from channels.errors import (
    ChannelConfigError,
    HubUnreachableError,
    ProtocolError,
    UnauthorizedError,
)
from channels.frames import ErrorCode, Message, Status, Subscribed
from channels.inbox import InboxChannel
from channels.names import is_nick
from channels.nats import mapping
from channels.nats.jetstream import (
    Retention,
    StreamRef,
    answered_within,
    consumer_config,
    ensure_stream,
)
from channels.protocol import DEFAULT_MAX_FRAME, max_text_for

__all__ = ["NatsChannel"]

log = structlog.get_logger("channels.nats")

PUBLISH_TRY = 2.0  # seconds one publish attempt waits for its ack before sending it again


@dataclass
class _Reader:
    """One subscribed channel: its stream, its consumer and its status subscription."""

    channel: str
    stream: StreamRef
    last_id: str | None  # the last id delivered: anything at or below it is dropped
    sub: JetStreamContext.PushSubscription | None = None
    statuses: Subscription | None = None


class NatsChannel(InboxChannel):
    """A :class:`~channels.client.interface.Channel` on a NATS server with JetStream.

    ``token`` is ``[channels] token`` / ``ATIRC_TOKEN``
    (:func:`~channels.nats.mapping.credentials`). ``nick`` names us in the
    ``Atirc-From`` header (NATS itself names nobody: see docs/channels.md);
    without one, the user of ``USER:PASSWORD`` or of the URL. A stream this
    client creates keeps ``retention_count`` messages for ``retention_age``
    seconds (the hub's options and defaults) and remembers message ids for
    ``duplicate_window`` seconds; an existing stream is used as it is.
    ``heartbeat`` is the consumers' idle heartbeat: two missed ones make
    nats-py re-create a consumer (after the server restarted, say).
    """

    _log = log

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        nick: str | None = None,
        ack_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        inbox_size: int = 10_000,
        on_status: Callable[[Status], None] | None = None,
        retention_count: int = 10_000,
        retention_age: float = 7 * 24 * 3600.0,
        duplicate_window: float = mapping.DUPLICATE_WINDOW,
        max_text: int = max_text_for(DEFAULT_MAX_FRAME),
        reconnect_attempts: int | None = None,
        reconnect_wait: float = 1.0,
        heartbeat: float = 2.0,
    ) -> None:
        super().__init__(on_status)
        parts = urlsplit(url)
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise ChannelConfigError(f"invalid NATS URL {url!r}: nats://HOST:PORT")
        self._credentials = mapping.credentials(token)
        creds = self._credentials.get("user_credentials")
        if creds is not None and not Path(creds).is_file():
            raise ChannelConfigError(f"NATS credentials file {creds!r} does not exist")
        user = self._credentials.get("user") or parts.username
        nick = nick or user
        if nick is None or not is_nick(nick):
            raise ChannelConfigError(
                f"invalid nick {nick!r} for NATS: 1-64 of letters, digits, '-', '_', '.'"
            )
        if inbox_size < 2:
            raise ValueError("inbox_size must be at least 2")
        if retention_count < 1 or retention_age <= 0:
            raise ValueError("retention_count and retention_age must be positive")
        self._dial_url = url
        self.url = mapping.shown_url(url)  # in errors and logs: no password
        self._nick = nick
        self._ack_timeout = ack_timeout
        self._connect_timeout = connect_timeout
        self._inbox_size = inbox_size
        self._retention = Retention(retention_count, retention_age, duplicate_window)
        self._max_text = max_text
        self._reconnect_attempts = reconnect_attempts
        self._reconnect_wait = reconnect_wait
        self.reconnects = 0  # times nats-py connected again after a break (the metrics')
        self._heartbeat = heartbeat
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._streams: dict[str, StreamRef] = {}
        self._readers: dict[str, _Reader] = {}
        self._inbox: deque[Message] = deque()
        self._room = asyncio.Event()
        self._connect_lock = asyncio.Lock()
        self._subscribing = asyncio.Lock()
        self._refusal: Exception | None = None  # an authorization error seen while dialing

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def nick(self) -> str | None:
        """The nick in our messages' ``Atirc-From``; None until connected."""
        return self._nick if self._nc is not None else None

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return len(self._inbox)

    async def connect(self, *, retry: bool = True) -> None:
        """Connect (idempotent); with ``retry``, keep trying with an exponential backoff."""
        async with self._connect_lock:
            if self._state == "open":
                return
            self._check_usable()
            backoff = exponential_backoff(attempts=None if retry else 0)
            attempt = 0
            while True:
                try:
                    nc = await self._dial()
                    break
                except HubUnreachableError:
                    attempt += 1
                    if self._state != "new" or not await backoff(attempt):
                        raise
            if self._state != "new":  # closed while connecting
                await nc.close()
                self._check_usable()
            # the first connection tried once; from now on, reconnect as configured
            attempts = self._reconnect_attempts
            nc.options["max_reconnect_attempts"] = -1 if attempts is None else attempts
            nc.options["allow_reconnect"] = attempts != 0  # nats-py reads 0 as "forever"
            self._nc = nc
            self._js = nc.jetstream(timeout=PUBLISH_TRY)
            self._state = "open"

    async def _dial(self) -> NatsClient:
        self._refusal = None
        try:
            return await nats.connect(
                self._dial_url,
                name=self._nick,
                connect_timeout=self._connect_timeout,
                max_reconnect_attempts=1,
                reconnect_time_wait=self._reconnect_wait,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
                closed_cb=self._on_closed,
                **self._credentials,
            )
        except nats.errors.Error as exc:
            if self._refusal is not None:  # not retried: the same credentials fail again
                refused = f"the NATS server at {self.url} refused us: {self._refusal}"
                raise UnauthorizedError(refused) from exc
            raise HubUnreachableError(f"cannot reach the NATS server at {self.url}: {exc}") from exc
        except OSError as exc:
            raise HubUnreachableError(f"cannot reach the NATS server at {self.url}: {exc}") from exc

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc).lower()
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in text:
            self._refusal = exc
        log.info("channels.nats_error", url=self.url, error=f"{type(exc).__name__}: {exc}")

    async def _on_disconnected(self) -> None:
        if self._state == "open":
            log.warning("channels.disconnected", url=self.url)

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        log.info("channels.reconnected", url=self.url, subscriptions=len(self._readers))

    async def _on_closed(self) -> None:
        if self._state == "open":  # not by close(): nats-py gave up reconnecting
            self._set_broken(HubUnreachableError(f"the NATS server at {self.url} is gone"))

    def _wake(self) -> None:
        """Wake the receivers, and a delivery waiting for room in the inbox."""
        super()._wake()
        self._room.set()

    async def close(self) -> None:
        """Close the connection; later calls raise ChannelClosedError (idempotent)."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._wake()
        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            await self._stop(reader)
        if self._nc is not None:
            with contextlib.suppress(Exception):  # already closed when it gave up
                await self._nc.close()

    async def _connected(self) -> tuple[NatsClient, JetStreamContext]:
        await self._ensure_open()
        assert self._nc is not None
        assert self._js is not None
        return self._nc, self._js

    # -- streams --------------------------------------------------------------------------

    async def _stream(self, channel: str) -> tuple[StreamRef, api.StreamInfo]:
        """The channel's stream (created when missing) and its info, read now; remembered."""
        _, js = await self._connected()
        async with self._deadline(f"the stream of {channel}"):
            stream, info = await ensure_stream(js, channel, self._retention)
        self._streams[channel] = stream
        return stream, info

    def _deadline(self, what: str) -> contextlib.AbstractAsyncContextManager[None]:
        return answered_within(self._ack_timeout, what, self.url, self._check_usable)

    # -- the Channel interface ------------------------------------------------------------

    async def publish(
        self,
        channel: str,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        client_id: str | None = None,
    ) -> PublishAck:
        """Store ``text`` in the channel's stream; split into ``more`` chunks when it is long.

        A split text's chunks get the ``client_id``s ``ID``, ``ID.1``, ``ID.2``…
        and all go into the first one's thread. A ``thread`` of another channel's
        stream is refused (``bad_thread``, :func:`~channels.nats.mapping.check_thread`).
        """
        check_publish(channel, text, thread, reply_to)
        if channel not in self._streams:
            await self._stream(channel)
        mapping.check_thread(self._streams[channel].epoch, channel, thread)
        ids: list[str] = []
        for chunk in mapping.chunks(text, client_id or uuid.uuid4().hex, self._max_text):
            headers = mapping.message_headers(self._nick, chunk, thread=thread, reply_to=reply_to)
            subject = mapping.message_subject(channel, thread)
            seq = await self._publish_one(channel, subject, chunk.text.encode(), headers)
            ids.append(mapping.message_id(self._streams[channel].epoch, seq))
            thread = thread or ids[0]  # a root's own id is its thread, for its later chunks
        return PublishAck(id=ids[0], thread=thread or ids[0], ids=tuple(ids))

    async def _publish_one(
        self, channel: str, subject: str, payload: bytes, headers: dict[str, str]
    ) -> int:
        _, js = await self._connected()
        name = mapping.stream_name(channel)
        async with self._deadline(f"a publish to {channel}"):
            while True:
                try:
                    ack = await js.publish(subject, payload, stream=name, headers=headers)
                    return ack.seq
                except nats.errors.MaxPayloadError as exc:
                    raise ProtocolError(
                        ErrorCode.TOO_LARGE, f"{exc}", client_id=headers[mapping.MSG_ID]
                    ) from exc
                except (
                    nats.errors.TimeoutError,
                    nats.errors.NoRespondersError,
                    nats.errors.ConnectionReconnectingError,
                    nats.errors.OutboundBufferLimitError,
                ):
                    # No ack (a reconnect, JetStream restarting): the same Nats-Msg-Id again.
                    self._check_usable()
                    await asyncio.sleep(0.05)
                except nats.js.errors.NotFoundError:
                    await self._stream(channel)  # the stream was deleted: again

    async def status(self, channel: str, text: str, *, thread: str) -> None:
        """Show ``text`` as progress in ``thread`` now: core NATS, not stored, best effort."""
        check_status(channel, text, thread)
        nc, _ = await self._connected()
        if not nc.is_connected:
            return  # stale by the time we are back
        headers = mapping.status_headers(self._nick, datetime.now(UTC))
        subject = mapping.status_subject(channel, thread)
        with contextlib.suppress(nats.errors.Error):
            await nc.publish(subject, text.encode(), headers=headers)

    async def subscribe(self, channel: str, since: str | None = None) -> Subscribed:
        """Receive ``channel``: what is stored after ``since`` first, then live messages.

        ``since`` of this channel's stream: right after it; any other id is
        read as its time (``ZERO_ID``: everything retained). Subscribing again
        restarts from the new ``since``.
        """
        check_subscribe(channel, since)
        async with self._subscribing:  # one at a time: a channel never gets two readers
            return await self._subscribe(channel, since)

    async def _subscribe(self, channel: str, since: str | None) -> Subscribed:
        nc, js = await self._connected()
        stream, info = await self._stream(channel)
        state = info.state
        head = mapping.message_id(stream.epoch, state.last_seq) if state.messages else None
        oldest = mapping.message_id(stream.epoch, state.first_seq) if state.messages else None
        start = mapping.start_for(since, stream.epoch, stream.created)
        config = consumer_config(start, state)
        if start.policy == "seq" and state.messages and start.seq < state.first_seq:
            log.warning(
                "channels.retention_gap",
                channel=channel,
                since=since,
                oldest=oldest,
                note="messages between since and oldest may have been dropped by retention",
            )
        old = self._readers.pop(channel, None)
        if old is not None:
            await self._stop(old)
        reader = _Reader(channel, stream, last_id=since if start.policy == "seq" else None)

        async def deliver(msg: Msg) -> None:
            await self._deliver(reader, msg)

        async with self._deadline(f"the subscription to {channel}"):
            reader.sub = await js.subscribe(
                mapping.channel_filter(channel),
                stream=stream.name,
                cb=deliver,
                ordered_consumer=True,
                idle_heartbeat=self._heartbeat,
                config=config,
            )
        if self._on_status is not None:
            with contextlib.suppress(nats.errors.Error):
                reader.statuses = await nc.subscribe(
                    mapping.status_filter(channel), cb=self._status_message
                )
        self._readers[channel] = reader
        return Subscribed(channel=channel, head=head, oldest=oldest)

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel`` (messages already in the inbox stay)."""
        self._check_usable()
        async with self._subscribing:
            reader = self._readers.pop(channel, None)
            if reader is not None:
                await self._stop(reader)

    async def _stop(self, reader: _Reader) -> None:
        reader.last_id = "~"  # above every id: a callback still running delivers nothing
        self._room.set()  # and one waiting for room stops waiting
        for sub in (reader.sub, reader.statuses):
            if sub is not None:
                with contextlib.suppress(Exception):  # gone with its connection
                    await sub.unsubscribe()

    async def _deliver(self, reader: _Reader, msg: Msg) -> None:
        """Move one of the channel's messages into the inbox, in order, once.

        nats-py calls it for each message on the subscription's own task, one
        at a time; while it waits for room, JetStream's flow control holds
        the rest. An unexpected error breaks the channel (nats-py would only
        log it, and the channel would go quiet).
        """
        try:
            meta = msg.metadata
            message = mapping.message_from(
                reader.channel,
                reader.stream.epoch,
                meta.sequence.stream,
                msg.headers,
                msg.data,
                meta.timestamp,
            )
            while len(self._inbox) >= self._inbox_size and self._state == "open":
                self._room.clear()
                await self._room.wait()
            if self._state != "open":
                return
            if reader.last_id is not None and message.id <= reader.last_id:
                return  # delivered already (a consumer re-created around a gap), or stopped
            reader.last_id = message.id
            self._inbox.append(message)
            self._inbox_ready.set()
        except Exception as exc:
            log.error("channels.supervisor_died", url=self.url, exc_info=exc)
            self._set_broken(exc)

    async def _status_message(self, msg: Msg) -> None:
        """A status of a subscribed channel, for ``on_status`` (nats-py's callback)."""
        status = mapping.status_from(msg.subject, msg.headers, msg.data)
        if status is not None and status.channel in self._readers:
            self._status_received(status)

    async def _take(self) -> Message | None:
        """The oldest message of the inbox; a delivery waiting for room goes on."""
        message = self._inbox.popleft()
        self._room.set()
        return message
