"""Property tests of the frame parsers (issue 15): any input is a frame or a ProtocolError.

The hub parses whatever a client sends and the client whatever the hub
sends; an uncaught exception in either kills a connection (the hub's handler
closes it with 1011) or a client's reader. So for any text or bytes, deeply
nested, with huge numbers, lone surrogates or a JSON value that is not an
object, both parsers give a typed frame or a :class:`ProtocolError` with a
protocol code, and whatever the hub would send back about it is valid UTF-8.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.errors import ProtocolError
from channels.frames import (
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
)
from channels.protocol import encode, parse_client_frame, parse_server_frame

CLIENT_FRAMES = (Hello, Subscribe, Unsubscribe, Publish)
SERVER_FRAMES = (Welcome, Subscribed, Ack, Message, ErrorFrame)
CODES = {code.value for code in ErrorCode}
TYPES = ["hello", "subscribe", "unsubscribe", "publish"]
TYPES += ["welcome", "subscribed", "ack", "message", "error", "", "nope"]
KEYS = ["type", "nick", "channel", "since", "text", "client_id", "thread", "reply_to", "more"]
KEYS += ["max_text", "head", "oldest", "id", "from", "ts", "code", "message"]

# Every code point, lone surrogates (category Cs) included: json.loads lets "\ud800" through.
ANY_CHAR = st.characters(codec=None, exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=40)
PLAUSIBLE = st.sampled_from(["#ops", "alice", "01JDN5X6Q7R8S9T0V1W2X3Y4Z5", "c-1", "hi", "#"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**20, max_value=10**400)
    | st.floats()
    | ANY_TEXT
    | PLAUSIBLE
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=8,
)
# Strings around a lone surrogate: valid JSON ("\ud800"), but never valid UTF-8.
SURROGATED = st.builds(
    lambda head, tail: head + "\ud800" + tail, st.sampled_from(["", "#", "#ops"]), ANY_TEXT
)
# Objects shaped like frames: a known type, known keys, values of any JSON type.
FIELD = VALUES | PLAUSIBLE | SURROGATED
FRAME_LIKE = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | VALUES},
    optional={key: FIELD for key in KEYS[1:]},
)


def _dumps(obj: Any, ascii_only: bool) -> str:
    return json.dumps(obj, ensure_ascii=ascii_only)


JSON_TEXTS = st.builds(_dumps, FRAME_LIKE | VALUES, st.booleans())


@st.composite
def _nested(draw: st.DrawFn) -> str:
    """Nesting far past the recursion limit, balanced or not, inside a frame or bare."""
    depth = draw(st.integers(min_value=1, max_value=30_000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"a":[', "]}")]))
    body = (
        opener * depth
        + draw(st.sampled_from(["1", "", '"x"']))
        + closer * draw(st.sampled_from([0, depth]))
    )
    if draw(st.booleans()):
        return body
    return (
        json.dumps({"type": draw(st.sampled_from(TYPES)), "channel": "#x"})[:-1]
        + ',"x":'
        + body
        + "}"
    )


@st.composite
def _huge_number(draw: st.DrawFn) -> str:
    """Integers past int's digit limit, exponents past float's range, as a field or bare."""
    digits = "9" * draw(st.integers(min_value=1, max_value=20_000))
    number = draw(
        st.sampled_from([digits, "-" + digits, "1e" + digits, "0." + digits + "e-999999"])
    )
    if draw(st.booleans()):
        return number
    return '{"type":"welcome","nick":"a","max_text":' + number + "}"


# Frame-shaped JSON twice as often as the rest: it reaches the field checks.
ANY_INPUT = st.one_of(
    JSON_TEXTS, JSON_TEXTS, ANY_TEXT, st.binary(max_size=64), _nested(), _huge_number()
)


def _outcome(parse: Callable[[str | bytes], object], raw: str | bytes) -> object:
    """What ``parse`` makes of ``raw``: a frame, or the ProtocolError it raised."""
    try:
        return parse(raw)
    except ProtocolError as exc:
        return exc


def _sendable(text: str) -> None:
    """What goes on the wire must be UTF-8: websockets fails the connection otherwise."""
    text.encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(ANY_INPUT)
def test_any_input_from_a_client_is_a_frame_or_a_protocol_error(raw: str | bytes) -> None:
    """The hub's parser returns a client frame or a ProtocolError whose error frame is sendable.

    The error frame echoes the offending frame's ``channel`` and
    ``client_id``: those must never carry a lone surrogate into the reply.
    """
    outcome = _outcome(parse_client_frame, raw)
    if isinstance(outcome, ProtocolError):
        assert outcome.code in CODES
        reply = ErrorFrame(outcome.code, outcome.message, outcome.client_id, outcome.channel)
        _sendable(encode(reply))
    else:
        assert isinstance(outcome, CLIENT_FRAMES)
        _sendable(encode(outcome))


@settings(max_examples=400, deadline=None)
@given(ANY_INPUT)
def test_any_input_from_the_hub_is_a_frame_or_a_protocol_error(raw: str | bytes) -> None:
    """The client's parser returns a server frame or a ProtocolError, never anything else."""
    outcome = _outcome(parse_server_frame, raw)
    if isinstance(outcome, ProtocolError):
        assert outcome.code in CODES
    else:
        assert isinstance(outcome, SERVER_FRAMES)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1_000, max_value=60_000), st.sampled_from(["[", '{"a":']))
def test_deep_nesting_is_a_bad_frame_for_both_parsers(size: int, opener: str) -> None:
    """Nesting past the recursion limit, within the frame limit, is ``bad_frame`` for both."""
    text = opener * (size // len(opener))
    for parse in (parse_client_frame, parse_server_frame):
        outcome = _outcome(parse, text)
        assert isinstance(outcome, ProtocolError)
        assert outcome.code == ErrorCode.BAD_FRAME
