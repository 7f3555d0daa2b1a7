"""How the channel protocol maps onto NATS JetStream: names, ids, headers. Pure, no I/O.

- **A channel is a stream.** ``#ops.eu`` is the stream ``ATIRC_ops_2Eeu`` with
  the subjects ``atirc.ops_2Eeu.>``: the name without ``#``, ``.`` (NATS's
  token separator) written ``_2E`` and ``_`` written ``_5F``, so the token is
  reversible and safe both as a subject token and in a stream name. One
  stream per channel gives the hub's retention exactly (``max_msgs`` per
  channel, ``max_age``) and a channel's ``head``/``oldest`` from the
  stream's state.
- **Subjects.** A root message goes to ``atirc.<chan>.root``, a message of a
  thread to ``atirc.<chan>.<thread id>``, so one thread's replies can be read
  by subject (its root is the message whose id is the thread's id).
  Statuses go to ``atirc-status.<chan>.<thread id>`` with core NATS: no
  stream captures them, so they are never stored.
- **Ids.** ``EEEEEEEEEERRRR`` + the stream sequence in 12 decimal digits:
  ``E`` the stream's creation time in milliseconds and ``R`` 20 bits of a hash
  of its name and creation time, both in the hub's Crockford base32
  (:mod:`channels.ids`). So an id has the hub's id syntax (a ULID's 26
  characters), ids of a channel sort as strings in publish order (the
  sequence is fixed width), a re-created stream's ids sort after the old
  one's, and two channels' ids never collide (the daemon keys prompts by id).
  The ``E`` part is a time, so a ``since`` that is not of this stream (a
  hub's id, the daemon's first-start cursor, ``ZERO_ID``) is read as a time.
- **A thread belongs to its channel** (issue 26). A thread id of the NATS
  form (a stream's epoch and a sequence) names a message of one stream: in
  another channel's stream it is refused (:func:`thread_problem`, a
  ``bad_thread`` error on publish), and a stored message whose
  ``Atirc-Thread`` is such an id starts a thread of its own when read. A
  thread id of another form (a hub's id, a made-up one) names no message
  here and is taken as given, as on the hub.
- **Headers.** ``Atirc-From`` (the publisher's nick), ``Atirc-Thread`` (empty
  for a root: its thread is its own id, known only once stored),
  ``Atirc-Reply-To``, ``Atirc-More: 1`` on all but the last chunk of a split
  text, and ``Nats-Msg-Id`` = ``<nick>:<client_id>`` for the stream's
  de-duplication (the hub's client ids are per sender too).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from channels.errors import ChannelConfigError, ProtocolError
from channels.frames import ErrorCode, Message, Status
from channels.ids import id_for_time, id_time_ms, is_id
from channels.names import is_channel
from channels.split import split_text

__all__ = [
    "DUPLICATE_WINDOW",
    "FROM",
    "MORE",
    "MSG_ID",
    "REPLY_TO",
    "ROOT",
    "SEQ_DIGITS",
    "THREAD",
    "TS",
    "UNKNOWN_SENDER",
    "Chunk",
    "Start",
    "channel_filter",
    "check_thread",
    "chunk_base",
    "chunks",
    "credentials",
    "decode_token",
    "encode_token",
    "format_ts",
    "message_from",
    "message_headers",
    "message_id",
    "message_subject",
    "msg_id",
    "sequence_of",
    "shown_url",
    "start_for",
    "status_filter",
    "status_from",
    "status_headers",
    "status_subject",
    "stream_epoch",
    "stream_name",
    "thread_problem",
]

STREAM_PREFIX = "ATIRC_"
SUBJECT_PREFIX = "atirc"
STATUS_PREFIX = "atirc-status"
ROOT = "root"
"""The last subject token of a root message (a thread id is 26 characters, never this)."""

FROM = "Atirc-From"
THREAD = "Atirc-Thread"
REPLY_TO = "Atirc-Reply-To"
MORE = "Atirc-More"
TS = "Atirc-Ts"
MSG_ID = "Nats-Msg-Id"

SEQ_DIGITS = 12
"""The sequence part of an id: up to 10**12 - 1 messages per stream."""
EPOCH_CHARS = 26 - SEQ_DIGITS
DUPLICATE_WINDOW = 24 * 3600.0
"""Seconds a stream remembers a ``Nats-Msg-Id`` (never more than its ``max_age``)."""

UNKNOWN_SENDER = "?"
"""The ``sender`` of a stored message without an ``Atirc-From`` (not published by atirc)."""

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TOKEN_RE = re.compile(r"(?:[A-Za-z0-9\-]|_2E|_5F)+\Z")


# -- names ----------------------------------------------------------------------------------


def encode_token(channel: str) -> str:
    """The subject token of ``channel``: no ``#``, ``.`` → ``_2E``, ``_`` → ``_5F``."""
    if not is_channel(channel):
        raise ValueError(f"invalid channel name {channel!r}")
    return channel[1:].replace("_", "_5F").replace(".", "_2E")


def decode_token(token: str) -> str:
    """The channel of a subject token (the inverse of :func:`encode_token`)."""
    if not _TOKEN_RE.match(token):
        raise ValueError(f"not a channel token: {token!r}")
    return "#" + token.replace("_2E", ".").replace("_5F", "_")


def stream_name(channel: str) -> str:
    """The JetStream stream that stores ``channel``."""
    return STREAM_PREFIX + encode_token(channel)


def channel_filter(channel: str) -> str:
    """The subjects of ``channel``'s stream (all its messages)."""
    return f"{SUBJECT_PREFIX}.{encode_token(channel)}.>"


def message_subject(channel: str, thread: str | None) -> str:
    """Where a message goes: its thread's subject, or the channel's ``root`` subject."""
    return f"{SUBJECT_PREFIX}.{encode_token(channel)}.{thread or ROOT}"


def status_subject(channel: str, thread: str) -> str:
    """The core NATS subject of statuses in ``thread`` (outside every stream)."""
    return f"{STATUS_PREFIX}.{encode_token(channel)}.{thread}"


def status_filter(channel: str) -> str:
    """The statuses of every thread of ``channel``."""
    return f"{STATUS_PREFIX}.{encode_token(channel)}.*"


# -- ids ------------------------------------------------------------------------------------


def stream_epoch(stream: str, created: datetime) -> str:
    """The first 14 characters of every id of the stream ``stream`` created at ``created``."""
    ms = int(created.timestamp() * 1000)
    digest = int.from_bytes(
        hashlib.sha256(f"{stream}\0{created.isoformat()}".encode()).digest()[:3], "big"
    )
    tail = "".join(_ALPHABET[(digest >> shift) & 31] for shift in (15, 10, 5, 0))
    return id_for_time(ms)[:10] + tail


def message_id(epoch: str, seq: int) -> str:
    """The id of sequence ``seq`` of the stream whose ids start with ``epoch``."""
    if not 0 < seq < 10**SEQ_DIGITS:
        raise ValueError(f"stream sequence out of range: {seq}")
    return f"{epoch}{seq:0{SEQ_DIGITS}d}"


def sequence_of(epoch: str, message_id: str) -> int | None:
    """The stream sequence of ``message_id`` if it is an id of this stream, else None."""
    if len(message_id) != 26 or not message_id.startswith(epoch):
        return None
    tail = message_id[EPOCH_CHARS:]
    return int(tail) if tail.isdigit() else None


def thread_problem(epoch: str, channel: str, thread: str) -> str | None:
    """Why ``thread`` is not a thread of ``channel``, whose stream's ids start with
    ``epoch``; None when it may be one (this stream's id, or not an id of any stream).

    An id of the NATS form whose epoch is another stream's belongs to another
    channel (or to a deleted stream of this one, whose messages are gone).
    """
    if len(thread) != 26 or not thread[EPOCH_CHARS:].isdigit():
        return None  # not a stream's id: names no message of any channel here
    if thread.startswith(epoch):
        return None
    return f"thread {thread} is not a thread of {channel}"


def check_thread(epoch: str, channel: str, thread: str | None) -> None:
    """Raise a ``bad_thread`` :class:`ProtocolError` for a publish in a thread of
    another channel (:func:`thread_problem`); a root (no ``thread``) has none."""
    problem = thread and thread_problem(epoch, channel, thread)
    if problem:
        raise ProtocolError(ErrorCode.BAD_THREAD, problem)


@dataclass(frozen=True, slots=True)
class Start:
    """Where a subscription starts: ``new`` only, ``all``, at sequence ``seq`` or at ``time``."""

    policy: Literal["new", "all", "seq", "time"]
    seq: int = 0  # the first sequence to deliver ("seq")
    time: datetime | None = None  # the first time to deliver ("time")


def start_for(since: str | None, epoch: str, created: datetime) -> Start:
    """Where a subscription with ``since`` starts in the stream of ``epoch``.

    An id of this stream: right after it. Any other id is read as its time
    (a hub's id, the daemon's first-start cursor): the messages stored from
    then on, all of them for a time before the stream existed (``ZERO_ID``).
    """
    if since is None:
        return Start("new")
    seq = sequence_of(epoch, since)
    if seq is not None:
        return Start("seq", seq=seq + 1)
    ms = id_time_ms(since)
    if ms <= int(created.timestamp() * 1000):
        return Start("all")
    return Start("time", time=datetime.fromtimestamp(ms / 1000, tz=UTC))


def format_ts(when: datetime) -> str:
    """``when`` as the hub writes ``ts``: ISO 8601, milliseconds, ``Z``."""
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# -- messages -------------------------------------------------------------------------------


def msg_id(nick: str, client_id: str) -> str:
    """The ``Nats-Msg-Id`` of a publish: client ids are per sender, as on the hub."""
    return f"{nick}:{client_id}"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One message of a publish: a split text's chunks get ``ID``, ``ID.1``, ``ID.2``…"""

    client_id: str
    text: str
    more: bool


def chunk_base(chunk_id: str) -> str:
    """What :func:`chunks` named a chunk after: ``ID`` for ``ID``, ``ID.1``, ``ID.2``…
    (a ``Nats-Msg-Id``, ``nick:ID.2``, gives ``nick:ID``)."""
    head, dot, index = chunk_id.rpartition(".")
    return head if dot and index.isdigit() else chunk_id


def chunks(text: str, client_id: str, max_text: int) -> list[Chunk]:
    """``text`` as the messages to publish, split like the hub client splits it."""
    parts = split_text(text, max_text)
    return [
        Chunk(client_id if i == 0 else f"{client_id}.{i}", part, i < len(parts) - 1)
        for i, part in enumerate(parts)
    ]


def message_headers(
    nick: str, chunk: Chunk, *, thread: str | None, reply_to: str | None
) -> dict[str, str]:
    """The headers of one published message."""
    headers = {MSG_ID: msg_id(nick, chunk.client_id), FROM: nick, THREAD: thread or ""}
    if reply_to:
        headers[REPLY_TO] = reply_to
    if chunk.more:
        headers[MORE] = "1"
    return headers


def message_from(
    channel: str,
    epoch: str,
    seq: int,
    headers: Mapping[str, str] | None,
    data: bytes,
    stored: datetime,
) -> Message:
    """The :class:`Message` of a stored NATS message (a root's thread is its own id).

    A thread header that is not an id, or an id of another channel's stream
    (:func:`thread_problem`), is not honoured: the message starts its own thread.
    """
    headers = headers or {}
    own = message_id(epoch, seq)
    thread = headers.get(THREAD) or ""
    reply_to = headers.get(REPLY_TO) or None
    ours = is_id(thread) and thread_problem(epoch, channel, thread) is None
    return Message(
        channel=channel,
        id=own,
        thread=thread if ours else own,
        reply_to=reply_to if is_id(reply_to) else None,
        sender=headers.get(FROM) or UNKNOWN_SENDER,
        text=data.decode("utf-8", "replace"),
        ts=format_ts(stored),
        more=headers.get(MORE) == "1",
    )


def status_headers(nick: str, now: datetime) -> dict[str, str]:
    """The headers of a status (the text is the payload)."""
    return {FROM: nick, TS: format_ts(now)}


def status_from(subject: str, headers: Mapping[str, str] | None, data: bytes) -> Status | None:
    """The :class:`Status` of a core NATS status message (None: not one of ours)."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[0] != STATUS_PREFIX or not is_id(parts[2]):
        return None
    try:
        channel = decode_token(parts[1])
    except ValueError:
        return None
    headers = headers or {}
    return Status(
        channel=channel,
        thread=parts[2],
        sender=headers.get(FROM) or UNKNOWN_SENDER,
        text=data.decode("utf-8", "replace"),
        ts=headers.get(TS) or format_ts(datetime.now(UTC)),
    )


# -- credentials ----------------------------------------------------------------------------


def credentials(token: str | None) -> dict[str, Any]:
    """``nats.connect`` keyword arguments for ``[channels] token`` / ``ATIRC_TOKEN``.

    A path (it ends in ``.creds`` or holds a ``/``: a JWT and its NKey seed,
    as ``nsc`` writes them) is ``user_credentials``; ``USER:PASSWORD`` a user
    and password; anything else a token. None: whatever the URL carries
    (``nats://user:pw@host``). The transport checks that the file exists.
    """
    if not token:
        return {}
    if token.endswith(".creds") or "/" in token:
        return {"user_credentials": str(Path(token).expanduser())}
    user, sep, password = token.partition(":")
    if sep:
        if not user:
            raise ChannelConfigError("a NATS USER:PASSWORD token needs a user")
        return {"user": user, "password": password}
    return {"token": token}


def shown_url(url: str) -> str:
    """``url`` as errors and logs show it: a password in it becomes ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
