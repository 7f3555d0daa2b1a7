"""The protocol's frames as typed values: one frozen dataclass per ``"type"``.

Pure data, no parsing (that is :mod:`channels.protocol`'s job); see its
docstring and DESIGN.md, "Channels", for what each frame means on the wire.
``Status``/``StatusUpdate`` carry short-lived progress: the hub fans them
out to the channel's current subscribers and never stores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

__all__ = [
    "MAX_STATUS_TEXT",
    "Ack",
    "ClientFrame",
    "ErrorCode",
    "ErrorFrame",
    "Hello",
    "Message",
    "Publish",
    "ServerFrame",
    "Status",
    "StatusUpdate",
    "Subscribe",
    "Subscribed",
    "Unsubscribe",
    "Welcome",
]

MAX_STATUS_TEXT = 200
"""The longest status text, in characters: one line on a terminal, never a reply."""


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` frame."""

    BAD_FRAME = "bad_frame"  # not JSON, not an object, a field missing or of the wrong type
    UNKNOWN_TYPE = "unknown_type"  # "type" names no frame of this protocol
    TOO_LARGE = "too_large"  # the frame or its text is over the limit: split the text
    BAD_CHANNEL = "bad_channel"  # channel name syntax: "#" + 1-64 of [A-Za-z0-9_.-]
    UNAUTHORIZED = "unauthorized"  # hello first (no token), or a nick that is not yours
    RATE_LIMITED = "rate_limited"  # over the per-connection rate: slow down and retry
    BAD_THREAD = "bad_thread"  # the thread has a message in another channel: not yours to post in
    INTERNAL = "internal"  # the hub failed (its store): retry later


@dataclass(frozen=True, slots=True)
class Hello:
    """client → hub: claim a nick (only on a hub without tokens, from loopback)."""

    type: ClassVar[str] = "hello"
    nick: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    """client → hub: deliver a channel's messages; with ``since``, first those stored after it.

    Subscribing again to the same channel restarts it from the new ``since``.
    """

    type: ClassVar[str] = "subscribe"
    channel: str
    since: str | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """client → hub: stop delivering a channel."""

    type: ClassVar[str] = "unsubscribe"
    channel: str


@dataclass(frozen=True, slots=True)
class Publish:
    """client → hub: store and fan out a text; acked with the hub's id."""

    type: ClassVar[str] = "publish"
    channel: str
    text: str
    client_id: str
    thread: str | None = None
    reply_to: str | None = None
    more: bool = False


@dataclass(frozen=True, slots=True)
class Welcome:
    """hub → client: authenticated; your nick is ``nick``."""

    type: ClassVar[str] = "welcome"
    nick: str
    max_text: int | None = None


@dataclass(frozen=True, slots=True)
class Subscribed:
    """hub → client: the subscription is live; replay (if any) follows.

    ``head`` is the channel's last id and ``oldest`` its oldest retained id
    (both ``None`` for an empty channel).
    """

    type: ClassVar[str] = "subscribed"
    channel: str
    head: str | None
    oldest: str | None


@dataclass(frozen=True, slots=True)
class Ack:
    """hub → client: a publish was stored (or had been: same ``client_id``, same ids)."""

    type: ClassVar[str] = "ack"
    client_id: str
    id: str
    thread: str


@dataclass(frozen=True, slots=True)
class Message:
    """hub → client: one stored message. ``sender`` is the JSON field ``from``.

    ``sender`` is always the hub's view of who published it, never a claim of
    the client. ``thread`` is the root's id (a root's own id for a root).
    """

    type: ClassVar[str] = "message"
    channel: str
    id: str
    thread: str
    reply_to: str | None
    sender: str
    text: str
    ts: str
    more: bool = False


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """hub → client: a frame was refused; the connection stays up."""

    type: ClassVar[str] = "error"
    code: str
    message: str
    client_id: str | None = None
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """client → hub: a short-lived progress line for ``thread``; fanned out, never stored.

    No ack: a status is best effort, and the next one replaces it anyway.
    """

    type: ClassVar[str] = "status"
    channel: str
    thread: str
    text: str


@dataclass(frozen=True, slots=True)
class Status:
    """hub → client: someone's progress in a thread. ``sender`` is the JSON field ``from``.

    Only subscribers connected when it was sent get it: it is not stored, so
    no replay brings it back.
    """

    type: ClassVar[str] = "status"
    channel: str
    thread: str
    sender: str
    text: str
    ts: str


ClientFrame = Hello | Subscribe | Unsubscribe | Publish | StatusUpdate
ServerFrame = Welcome | Subscribed | Ack | Message | ErrorFrame | Status
