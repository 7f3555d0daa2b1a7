"""The client's side of the protocol as a pure state machine: no sockets, no asyncio.

Modelled on websockets' own protocol/connection split: :class:`ClientProtocol`
takes what the hub sends (:meth:`~ClientProtocol.receive_frame`) and what
the application asks (subscribe, unsubscribe, publish), and answers with the
text frames to send and the events to act on; it keeps the received
messages in a bounded inbox. The connection layer
(:class:`~channels.client.websocket.WebSocketChannel`) moves the frames over
a websocket and turns the events into its futures' results.

What the state machine guarantees:

- Per channel it remembers the last id it delivered, and subscribes again
  with that as ``since`` on every new connection, so nothing is lost; it
  drops any id at or below it, so nothing is delivered twice.
- Between sending ``subscribe`` and the hub's ``subscribed`` it drops the
  channel's messages: they belong to a subscription it has replaced, and the
  replay after ``subscribed`` delivers them again.
- The hub answers subscribes in the order they were sent. When a channel is
  subscribed again (or unsubscribed and subscribed again) before the first
  answer came, the subscription is confirmed once, by the answer to the last
  ``subscribe`` sent: every caller waiting for it is answered then, none is
  left behind.
- When the inbox is full it drops that channel's new messages and marks it
  overflowed; once the consumer has drained half the inbox,
  :meth:`~ClientProtocol.resync` subscribes again with ``since`` and the hub's
  store delivers them, in order.
- A ``since`` older than the channel's ``oldest`` retained id is logged
  (``channels.retention_gap``): retention may have dropped messages.
- A ``status`` of a subscribed channel is an event, never in the inbox: it
  is short-lived, and whoever wants it must take it as it comes.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass

import structlog

from channels.errors import ProtocolError, UnauthorizedError
from channels.frames import (
    Ack,
    ErrorCode,
    ErrorFrame,
    Hello,
    Message,
    Publish,
    Status,
    StatusUpdate,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Welcome,
)
from channels.ids import ZERO_ID, is_id
from channels.names import is_channel
from channels.protocol import (
    DEFAULT_MAX_FRAME,
    encode,
    max_text_for,
    parse_server_frame,
    status_problem,
)
from channels.split import split_text

__all__ = [
    "ClientProtocol",
    "Event",
    "MessageReceived",
    "PublishAcked",
    "PublishRefused",
    "StatusReceived",
    "SubscriptionConfirmed",
    "SubscriptionRefused",
]

log = structlog.get_logger("channels.client")


# -- events: what a received frame means to the connection layer --------------------------


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A message went into the inbox: wake whoever waits in ``receive``."""

    message: Message


@dataclass(frozen=True, slots=True)
class PublishAcked:
    """The hub stored the publish ``ack.client_id`` (or had stored it already)."""

    ack: Ack


@dataclass(frozen=True, slots=True)
class PublishRefused:
    """The hub refused the publish ``client_id`` (``rate_limited``, ``too_large``, …)."""

    client_id: str
    error: ProtocolError


@dataclass(frozen=True, slots=True)
class SubscriptionConfirmed:
    """The hub answered ``subscribed``: the subscription is live, replay follows."""

    subscribed: Subscribed


@dataclass(frozen=True, slots=True)
class SubscriptionRefused:
    """The hub refused a subscription; the protocol forgot the channel."""

    channel: str
    error: ProtocolError


@dataclass(frozen=True, slots=True)
class StatusReceived:
    """Someone's short-lived progress in a thread of a subscribed channel."""

    status: Status


Event = (
    MessageReceived
    | PublishAcked
    | PublishRefused
    | SubscriptionConfirmed
    | SubscriptionRefused
    | StatusReceived
)


@dataclass
class _Subscription:
    """The client's state for one subscribed channel."""

    last_id: str | None  # the last id delivered (or the since asked for): the next since
    overflowed: bool = False  # the inbox was full: drop, and subscribe again when it drains


def check_subscribe(channel: str, since: str | None) -> None:
    """Raise :class:`ProtocolError` if ``subscribe(channel, since)`` is not a valid request."""
    if not is_channel(channel):
        raise ProtocolError(ErrorCode.BAD_CHANNEL, f"invalid channel name {channel!r}")
    if since is not None and not is_id(since):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"since is not a message id: {since!r}")


def check_publish(channel: str, text: str, thread: str | None, reply_to: str | None) -> None:
    """Raise :class:`ProtocolError` if the publish could never be sent as asked."""
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


def check_status(channel: str, text: str, thread: str) -> None:
    """Raise :class:`ProtocolError` if the status could never be sent as asked."""
    if not is_channel(channel):
        raise ProtocolError(ErrorCode.BAD_CHANNEL, f"invalid channel name {channel!r}")
    if not is_id(thread):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"thread is not a message id: {thread!r}")
    problem = status_problem(text)
    if problem is not None:
        raise ProtocolError(ErrorCode.BAD_FRAME, f"status: {problem}")


class ClientProtocol:
    """The client's protocol state: subscriptions, the current connection, the inbox.

    ``url`` only names the hub in errors and logs. ``hello_nick`` is the nick
    to claim with ``hello`` (None with a token: the hub knows us from it).
    ``inbox_size`` bounds the inbox.

    A connection's life: :meth:`greeting` (send it, if not None), then
    :meth:`expect_welcome` on the first frame received,
    :meth:`connection_made`, :meth:`resubscribe` for each of
    :meth:`channels`, :meth:`receive_frame` for every frame after, and
    :meth:`connection_lost` at the end. Every method that returns a ``str``
    returns a frame to send on the current connection (None: nothing to send).
    """

    def __init__(self, url: str, *, hello_nick: str | None, inbox_size: int) -> None:
        if inbox_size < 2:
            raise ValueError("inbox_size must be at least 2")
        self.url = url
        self.nick: str | None = None
        self.max_text = max_text_for(DEFAULT_MAX_FRAME)
        self._hello_nick = hello_nick
        self._inbox_size = inbox_size
        self._inbox: deque[Message] = deque()
        self._subs: dict[str, _Subscription] = {}
        # Per connection and channel: the since of each subscribe sent on it and not yet
        # answered, oldest first (the hub answers in order). A channel is a key once a
        # subscribe went out for it on this connection. None: no connection.
        self._sent: dict[str, deque[str | None]] | None = None

    # -- connecting -----------------------------------------------------------------------

    def greeting(self) -> str | None:
        """The first frame to send on a new connection: ``hello``, or None with a token."""
        if self._hello_nick is None:
            return None
        return encode(Hello(nick=self._hello_nick))

    def expect_welcome(self, raw: str | bytes) -> Welcome:
        """Check the first frame of a connection: ``welcome``, or the error that refuses us.

        Raises :class:`UnauthorizedError` when the hub refuses who we are,
        :class:`ProtocolError` for any other error or frame.
        """
        frame = parse_server_frame(raw)
        if isinstance(frame, ErrorFrame):
            if frame.code == ErrorCode.UNAUTHORIZED:
                raise UnauthorizedError(f"the hub at {self.url} refused us: {frame.message}")
            raise ProtocolError(frame.code, frame.message)
        if not isinstance(frame, Welcome):
            raise ProtocolError(ErrorCode.BAD_FRAME, f"expected welcome, got {frame.type}")
        return frame

    @property
    def connected(self) -> bool:
        """True between :meth:`connection_made` and :meth:`connection_lost`."""
        return self._sent is not None

    def connection_made(self, welcome: Welcome) -> None:
        """A connection is authenticated: learn our nick and the hub's text limit."""
        self.nick = welcome.nick
        if welcome.max_text is not None and welcome.max_text > 0:
            self.max_text = welcome.max_text
        self._sent = {}

    def connection_lost(self) -> None:
        """The connection is gone; the next one subscribes to everything again."""
        self._sent = None

    def channels(self) -> list[str]:
        """The subscribed channels (a snapshot, in subscription order)."""
        return list(self._subs)

    def resubscribe(self, channel: str) -> str | None:
        """On a new connection: subscribe ``channel`` again from its last delivered id.

        None if the channel is no longer subscribed, or was already
        subscribed on this connection (by :meth:`subscribe`).
        """
        sub = self._subs.get(channel)
        if sub is None or self._sent is None or channel in self._sent:
            return None
        sub.overflowed = False
        return self._subscribe_frame(channel, sub)

    def _subscribe_frame(self, channel: str, sub: _Subscription) -> str | None:
        if self._sent is None:
            return None
        since = sub.last_id
        self._sent.setdefault(channel, deque()).append(since)
        return encode(Subscribe(channel=channel, since=since))

    # -- requests of the application ------------------------------------------------------

    def subscribe(self, channel: str, since: str | None) -> str | None:
        """Subscribe (again) to ``channel`` from ``since``; see :func:`check_subscribe`.

        Without a connection nothing is sent now: the next connection
        subscribes (:meth:`resubscribe`).
        """
        check_subscribe(channel, since)
        sub = _Subscription(last_id=since)
        self._subs[channel] = sub
        return self._subscribe_frame(channel, sub)

    def unsubscribe(self, channel: str) -> str | None:
        """Forget ``channel``; the ``unsubscribe`` frame if it was subscribed and connected."""
        if self._subs.pop(channel, None) is None or self._sent is None:
            return None
        return encode(Unsubscribe(channel=channel))

    def publish_frames(
        self,
        channel: str,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        client_id: str | None = None,
    ) -> list[Publish]:
        """The ``publish`` frames for ``text``: one, or several if it exceeds :attr:`max_text`.

        Chunk ``i`` after the first gets the ``client_id`` ``ID.i`` (ID:
        ``client_id``, or a new UUID) and carries ``more`` but on the last; it
        belongs in the first chunk's thread, which only the hub's ack says:
        send the chunks in order, each with ``thread`` set to the first ack's.
        """
        check_publish(channel, text, thread, reply_to)
        base = client_id or uuid.uuid4().hex
        chunks = split_text(text, self.max_text)
        return [
            Publish(
                channel=channel,
                text=chunk,
                client_id=base if index == 0 else f"{base}.{index}",
                thread=thread,
                reply_to=reply_to,
                more=index < len(chunks) - 1,
            )
            for index, chunk in enumerate(chunks)
        ]

    def status_frame(self, channel: str, text: str, *, thread: str) -> str:
        """The ``status`` frame for ``text`` in ``thread``; see :func:`check_status`."""
        check_status(channel, text, thread)
        return encode(StatusUpdate(channel=channel, thread=thread, text=text))

    # -- the inbox ------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """How many messages wait in the inbox."""
        return len(self._inbox)

    def next_message(self) -> Message | None:
        """Take the inbox's oldest message (None when it is empty)."""
        return self._inbox.popleft() if self._inbox else None

    def wants_resync(self) -> bool:
        """True once the inbox is down to half: time to :meth:`resync` overflowed channels."""
        return len(self._inbox) <= self._inbox_size // 2

    def overflowed(self) -> list[str]:
        """The channels whose messages were dropped because the inbox was full."""
        return [channel for channel, sub in self._subs.items() if sub.overflowed]

    def resync(self, channel: str) -> str | None:
        """Subscribe an overflowed ``channel`` again from the last id delivered."""
        sub = self._subs.get(channel)
        if sub is None or not sub.overflowed or self._sent is None:
            return None
        sub.overflowed = False
        log.info("channels.resync", channel=channel, since=sub.last_id)
        return self._subscribe_frame(channel, sub)

    # -- frames from the hub --------------------------------------------------------------

    def receive_frame(self, raw: str | bytes) -> list[Event]:
        """Take one frame from the hub; the events it causes (a bad frame is logged, ignored)."""
        try:
            frame = parse_server_frame(raw)
        except ProtocolError as exc:
            log.warning("channels.bad_frame_from_hub", url=self.url, error=str(exc))
            return []
        match frame:
            case Message():
                return self._on_message(frame)
            case Ack():
                return [PublishAcked(frame)]
            case Subscribed():
                return self._on_subscribed(frame)
            case ErrorFrame():
                return self._on_error(frame)
            case Status():
                return [StatusReceived(frame)] if frame.channel in self._subs else []
            case Welcome():
                return []  # only the first one matters

    def _on_message(self, message: Message) -> list[Event]:
        sub = self._subs.get(message.channel)
        if sub is None or sub.overflowed or self._unanswered(message.channel):
            return []
        if sub.last_id is not None and message.id <= sub.last_id:
            return []  # delivered already (replay overlapping a reconnect)
        if len(self._inbox) >= self._inbox_size:
            sub.overflowed = True
            log.info("channels.inbox_full", channel=message.channel, size=self._inbox_size)
            return []
        self._inbox.append(message)
        sub.last_id = message.id
        return [MessageReceived(message)]

    def _unanswered(self, channel: str) -> int:
        """How many subscribes of ``channel`` on this connection the hub has not answered."""
        return len((self._sent or {}).get(channel) or ())

    def _answered(self, channel: str) -> str | None:
        """The hub answered the oldest unanswered subscribe of ``channel``: its since."""
        sent = (self._sent or {}).get(channel)
        return sent.popleft() if sent else None

    def _on_subscribed(self, frame: Subscribed) -> list[Event]:
        since = self._answered(frame.channel)
        sub = self._subs.get(frame.channel)
        if sub is None or self._unanswered(frame.channel):
            return []  # unsubscribed, or subscribed again: the last subscribe's answer confirms
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
        return [SubscriptionConfirmed(frame)]

    def _on_error(self, frame: ErrorFrame) -> list[Event]:
        error = ProtocolError(
            frame.code, frame.message, client_id=frame.client_id, channel=frame.channel
        )
        if frame.client_id is not None:
            return [PublishRefused(frame.client_id, error)]
        if frame.channel is not None:
            self._answered(frame.channel)
            if frame.channel in self._subs and not self._unanswered(frame.channel):
                del self._subs[frame.channel]
                return [SubscriptionRefused(frame.channel, error)]
        log.warning("channels.error_from_hub", code=frame.code, message=frame.message)
        return []
