"""The atirc-style protocol: frames, their validation and their encoding.

One JSON object per WebSocket text frame, discriminated by ``"type"``
(DESIGN.md, "Channels"). This module is pure: it turns text into typed frames
or a precise :class:`~channels.errors.ProtocolError`, and frames back into
text. The hub and the client do the I/O around it.

Beyond DESIGN.md's table, three optional fields exist (older peers may ignore them):

- ``welcome.max_text``: the largest text (JSON-encoded bytes) one publish may
  carry on this hub, so clients split longer texts to fit.
- ``publish.more`` / ``message.more``: ``true`` on every chunk of a split
  text but the last, so a reader can join the chunks back.
- ``error.client_id`` / ``error.channel``: which publish or subscription the
  error is about, when the offending frame named one (never for a ``status``:
  it has no caller waiting, and a channel echoed would read as a refused
  subscription).
- ``status`` (both ways): short-lived progress in a thread, at most
  :data:`~channels.frames.MAX_STATUS_TEXT` characters on one line, fanned out
  to the channel's current subscribers, never stored, never acked.

The frames themselves are :mod:`channels.frames`' dataclasses.

Unknown fields are ignored (forward compatibility); unknown types are not.
"""

from __future__ import annotations

import json
import re
from typing import Any

from channels.errors import ProtocolError
from channels.frames import (
    MAX_STATUS_TEXT,
    Ack,
    ClientFrame,
    ErrorCode,
    ErrorFrame,
    Hello,
    Message,
    Publish,
    ServerFrame,
    Status,
    StatusUpdate,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Welcome,
)
from channels.ids import is_id
from channels.names import CLIENT_ID_RE, is_channel, is_nick, is_utf8
from channels.split import json_text_size

__all__ = [
    "DEFAULT_MAX_FRAME",
    "ENVELOPE_RESERVE",
    "encode",
    "max_text_for",
    "parse_client_frame",
    "parse_server_frame",
    "status_problem",
]

DEFAULT_MAX_FRAME = 64 * 1024
"""The default frame size limit in bytes (a whole frame, as UTF-8)."""

ENVELOPE_RESERVE = 1024
"""Bytes of a frame kept for everything but the text (ids, channel, nick, keys).

A publish's text may take ``max_frame - ENVELOPE_RESERVE`` bytes, so the
``message`` frame the hub makes of it (with id, thread, from, ts) still fits
in ``max_frame``.
"""


def max_text_for(max_frame: int) -> int:
    """The largest publish text (JSON bytes) a hub with frame limit ``max_frame`` accepts."""
    return max_frame - ENVELOPE_RESERVE


# C0 and C1 controls and DEL: a status is shown on terminals, where a newline would
# break the one line and an escape sequence would be the sender's to play with.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def status_problem(text: str) -> str | None:
    """Why ``text`` cannot be a status (empty, too long, not one line), or None."""
    if not text:
        return "text is empty"
    if len(text) > MAX_STATUS_TEXT:
        return f"text is {len(text)} characters, the limit is {MAX_STATUS_TEXT}"
    if _CONTROL.search(text):
        return "text must be one line without control characters"
    if not is_utf8(text):
        return "text is not valid Unicode"
    return None


# -- encoding -------------------------------------------------------------------------


def _to_dict(frame: ClientFrame | ServerFrame) -> dict[str, Any]:
    match frame:
        case Hello(nick=nick):
            return {"type": "hello", "nick": nick}
        case Subscribe(channel=channel, since=since):
            out: dict[str, Any] = {"type": "subscribe", "channel": channel}
            if since is not None:
                out["since"] = since
            return out
        case Unsubscribe(channel=channel):
            return {"type": "unsubscribe", "channel": channel}
        case Publish():
            out = {"type": "publish", "channel": frame.channel, "text": frame.text}
            if frame.thread is not None:
                out["thread"] = frame.thread
            if frame.reply_to is not None:
                out["reply_to"] = frame.reply_to
            out["client_id"] = frame.client_id
            if frame.more:
                out["more"] = True
            return out
        case Welcome(nick=nick, max_text=max_text):
            out = {"type": "welcome", "nick": nick}
            if max_text is not None:
                out["max_text"] = max_text
            return out
        case Subscribed(channel=channel, head=head, oldest=oldest):
            return {"type": "subscribed", "channel": channel, "head": head, "oldest": oldest}
        case Ack(client_id=client_id, id=id_, thread=thread):
            return {"type": "ack", "client_id": client_id, "id": id_, "thread": thread}
        case Message():
            out = {
                "type": "message",
                "channel": frame.channel,
                "id": frame.id,
                "thread": frame.thread,
                "reply_to": frame.reply_to,
                "from": frame.sender,
                "text": frame.text,
                "ts": frame.ts,
            }
            if frame.more:
                out["more"] = True
            return out
        case StatusUpdate(channel=channel, thread=thread, text=text):
            return {"type": "status", "channel": channel, "thread": thread, "text": text}
        case Status():
            return {
                "type": "status",
                "channel": frame.channel,
                "thread": frame.thread,
                "from": frame.sender,
                "text": frame.text,
                "ts": frame.ts,
            }
        case ErrorFrame():
            out = {"type": "error", "code": frame.code, "message": frame.message}
            if frame.client_id is not None:
                out["client_id"] = frame.client_id
            if frame.channel is not None:
                out["channel"] = frame.channel
            return out
    raise TypeError(f"not a frame: {frame!r}")


def encode(frame: ClientFrame | ServerFrame) -> str:
    """The frame as compact JSON text (non-ASCII kept as UTF-8, not escaped)."""
    return json.dumps(_to_dict(frame), ensure_ascii=False, separators=(",", ":"))


# -- parsing --------------------------------------------------------------------------


class _Fields:
    """Typed access to a decoded frame's fields, raising ``bad_frame`` with the field's name."""

    def __init__(self, obj: dict[str, Any], frame_type: str) -> None:
        self.obj = obj
        self.frame_type = frame_type
        # Echoed in errors so a client can tell which call failed; only if well-formed.
        cid = obj.get("client_id")
        ch = obj.get("channel")
        self.client_id = cid if isinstance(cid, str) and CLIENT_ID_RE.match(cid) else None
        # A lone surrogate ("\\ud800" in JSON) echoed back could not go out as UTF-8.
        self.channel = ch if isinstance(ch, str) and len(ch) <= 100 and is_utf8(ch) else None
        if frame_type == "status":
            # Nobody waits on a status: a channel echoed would read as a refused subscribe.
            self.client_id = self.channel = None

    def error(self, code: str, message: str) -> ProtocolError:
        return ProtocolError(code, message, client_id=self.client_id, channel=self.channel)

    def string(self, key: str, *, optional: bool = False) -> str | None:
        value = self.obj.get(key)
        if value is None:
            if optional:
                return None
            raise self.error(ErrorCode.BAD_FRAME, f"{self.frame_type}: missing field {key!r}")
        if not isinstance(value, str):
            raise self.error(
                ErrorCode.BAD_FRAME, f"{self.frame_type}: field {key!r} must be a string"
            )
        return value

    def required(self, key: str) -> str:
        value = self.string(key)
        assert value is not None  # string() raised otherwise
        return value

    def channel_name(self, key: str = "channel") -> str:
        value = self.required(key)
        if not is_channel(value):
            raise self.error(
                ErrorCode.BAD_CHANNEL,
                f"invalid channel name {value[:80]!r}: "
                "'#' and 1-64 of letters, digits, '-', '_', '.'",
            )
        return value

    def message_id(self, key: str, *, optional: bool = True) -> str | None:
        value = self.string(key, optional=optional)
        if value is not None and not is_id(value):
            raise self.error(
                ErrorCode.BAD_FRAME,
                f"{self.frame_type}: {key!r} is not a message id: {value[:40]!r}",
            )
        return value

    def nick(self, key: str) -> str:
        value = self.required(key)
        if not is_nick(value):
            raise self.error(
                ErrorCode.BAD_FRAME,
                f"invalid nick {value[:80]!r}: 1-64 of letters, digits, '-', '_', '.'",
            )
        return value

    def boolean(self, key: str) -> bool:
        value = self.obj.get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(
                ErrorCode.BAD_FRAME, f"{self.frame_type}: field {key!r} must be true or false"
            )
        return value

    def integer(self, key: str) -> int | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(
                ErrorCode.BAD_FRAME, f"{self.frame_type}: field {key!r} must be an integer"
            )
        return value


def _decode(text: str | bytes, max_frame: int | None) -> _Fields:
    if isinstance(text, bytes | bytearray | memoryview):
        raise ProtocolError(ErrorCode.BAD_FRAME, "binary frames are not supported: send JSON text")
    # A character takes 1 to 4 bytes: encode only when the count is in doubt.
    if max_frame is not None and len(text) * 4 > max_frame:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_frame:
            raise ProtocolError(
                ErrorCode.TOO_LARGE, f"frame is {size} bytes, the limit is {max_frame}"
            )
    try:
        obj = json.loads(text)
    except RecursionError as exc:  # nesting past the interpreter's limit: a frame never nests
        raise ProtocolError(ErrorCode.BAD_FRAME, "not JSON: nested too deeply") from exc
    except ValueError as exc:  # also an integer past int's digit limit
        raise ProtocolError(ErrorCode.BAD_FRAME, f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, "a frame must be a JSON object")
    frame_type = obj.get("type")
    if not isinstance(frame_type, str):
        raise ProtocolError(ErrorCode.BAD_FRAME, 'a frame needs a string "type"')
    return _Fields(obj, frame_type)


def _valid_text(fields: _Fields, max_text: int | None) -> str:
    text = fields.required("text")
    if not text:
        raise fields.error(ErrorCode.BAD_FRAME, "publish: text is empty")
    if not is_utf8(text):  # a lone surrogate: it could not be sent on
        raise fields.error(ErrorCode.BAD_FRAME, "publish: text is not valid Unicode")
    if max_text is not None:
        size = json_text_size(text)
        if size > max_text:
            raise fields.error(
                ErrorCode.TOO_LARGE,
                f"publish: text is {size} bytes, the limit is {max_text}: split it",
            )
    return text


def parse_client_frame(
    text: str | bytes,
    *,
    max_frame: int | None = DEFAULT_MAX_FRAME,
    max_text: int | None = None,
) -> ClientFrame:
    """Parse a frame a client sent, or raise :class:`ProtocolError` with the precise code.

    ``max_text`` defaults to what ``max_frame`` leaves for the text
    (:func:`max_text_for`); ``None`` for both disables the size checks.
    """
    fields = _decode(text, max_frame)
    if max_text is None and max_frame is not None:
        max_text = max_text_for(max_frame)
    match fields.frame_type:
        case "hello":
            return Hello(nick=fields.nick("nick"))
        case "subscribe":
            return Subscribe(channel=fields.channel_name(), since=fields.message_id("since"))
        case "unsubscribe":
            return Unsubscribe(channel=fields.channel_name())
        case "publish":
            channel = fields.channel_name()
            client_id = fields.required("client_id")
            if not CLIENT_ID_RE.match(client_id):
                raise fields.error(
                    ErrorCode.BAD_FRAME,
                    "publish: client_id must be 1-128 of letters, digits, '-', '_', '.', ':'",
                )
            return Publish(
                channel=channel,
                text=_valid_text(fields, max_text),
                client_id=client_id,
                thread=fields.message_id("thread"),
                reply_to=fields.message_id("reply_to"),
                more=fields.boolean("more"),
            )
        case "status":
            channel = fields.channel_name()
            thread = _required_id(fields, "thread")
            text = fields.required("text")
            problem = status_problem(text)
            if problem is not None:
                code = ErrorCode.TOO_LARGE if len(text) > MAX_STATUS_TEXT else ErrorCode.BAD_FRAME
                raise fields.error(code, f"status: {problem}")
            return StatusUpdate(channel=channel, thread=thread, text=text)
        case "welcome" | "subscribed" | "ack" | "message" | "error":
            raise fields.error(
                ErrorCode.UNKNOWN_TYPE, f"{fields.frame_type!r} is sent by the hub, not to it"
            )
    raise fields.error(ErrorCode.UNKNOWN_TYPE, f"unknown frame type {fields.frame_type[:40]!r}")


def parse_server_frame(text: str | bytes, *, max_frame: int | None = None) -> ServerFrame:
    """Parse a frame the hub sent, or raise :class:`ProtocolError` with the precise code.

    Lenient where a newer hub may say more (unknown fields, unknown error
    codes), strict where the client relies on a field.
    """
    fields = _decode(text, max_frame)
    match fields.frame_type:
        case "welcome":
            return Welcome(nick=fields.required("nick"), max_text=fields.integer("max_text"))
        case "subscribed":
            return Subscribed(
                channel=fields.channel_name(),
                head=fields.message_id("head"),
                oldest=fields.message_id("oldest"),
            )
        case "ack":
            return Ack(
                client_id=fields.required("client_id"),
                id=_required_id(fields, "id"),
                thread=_required_id(fields, "thread"),
            )
        case "message":
            return Message(
                channel=fields.channel_name(),
                id=_required_id(fields, "id"),
                thread=_required_id(fields, "thread"),
                reply_to=fields.message_id("reply_to"),
                sender=fields.required("from"),
                text=fields.required("text"),
                ts=fields.required("ts"),
                more=fields.boolean("more"),
            )
        case "error":
            return ErrorFrame(
                code=fields.required("code"),
                message=fields.required("message"),
                client_id=fields.string("client_id", optional=True),
                channel=fields.string("channel", optional=True),
            )
        case "status":
            return Status(
                channel=fields.channel_name(),
                thread=_required_id(fields, "thread"),
                sender=fields.required("from"),
                text=fields.required("text"),
                ts=fields.required("ts"),
            )
        case "hello" | "subscribe" | "unsubscribe" | "publish":
            raise fields.error(
                ErrorCode.UNKNOWN_TYPE, f"{fields.frame_type!r} is sent to the hub, not by it"
            )
    raise fields.error(ErrorCode.UNKNOWN_TYPE, f"unknown frame type {fields.frame_type[:40]!r}")


def _required_id(fields: _Fields, key: str) -> str:
    value = fields.message_id(key, optional=False)
    assert value is not None  # message_id raised otherwise
    return value
