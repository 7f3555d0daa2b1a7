"""The pure parts of channels/: frames, ids, text splitting, the rate bucket, tokens, notify.

No sockets except the notify test, which needs a real datagram socket to
receive what the helper sends.
"""

from __future__ import annotations

import json
import os
import socket
import uuid

import pytest

import channels
from channels.client import WebSocketChannel
from channels.errors import ChannelConfigError, ProtocolError
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
from channels.ids import ZERO_ID, IdGenerator, id_for_time, id_time_ms, id_timestamp, is_id
from channels.names import is_channel
from channels.notify import notify, watchdog_interval
from channels.protocol import (
    DEFAULT_MAX_FRAME,
    encode,
    max_text_for,
    parse_client_frame,
    parse_server_frame,
)
from channels.ratelimit import TokenBucket, Verdict
from channels.split import json_text_size, split_text
from channels.tokens import parse_tokens

ID1 = "01JDN5X6Q7R8S9T0V1W2X3Y4Z5"
ID2 = "01JDN5X6Q7R8S9T0V1W2X3Y4Z6"


def _pub(**fields: object) -> str:
    """A publish frame's JSON with ``fields`` over a minimal valid-looking base."""
    frame: dict[str, object] = {"type": "publish", "channel": "#x", "text": "t"}
    frame.update(fields)
    return json.dumps(frame)


def _error(text: str, **kw: object) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(text, **kw)  # type: ignore[arg-type]
    return info.value


# -- frames --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Hello(nick="alice"),
        Subscribe(channel="#ops"),
        Subscribe(channel="#ops", since=ID1),
        Unsubscribe(channel="#a.b-c_d"),
        Publish(channel="#ops", text="hi ✓", client_id="c-1"),
        Publish(channel="#ops", text="x", client_id="c:2", thread=ID1, reply_to=ID2, more=True),
    ],
)
def test_client_frames_round_trip(frame):
    """Every client frame encodes to JSON that parses back to an equal frame."""
    assert parse_client_frame(encode(frame)) == frame


@pytest.mark.parametrize(
    "frame",
    [
        Welcome(nick="alice", max_text=1000),
        Welcome(nick="alice"),
        Subscribed(channel="#ops", head=None, oldest=None),
        Subscribed(channel="#ops", head=ID2, oldest=ID1),
        Ack(client_id="c-1", id=ID1, thread=ID1),
        Message(
            channel="#ops",
            id=ID2,
            thread=ID1,
            reply_to=ID1,
            sender="bob",
            text="ok",
            ts="2026-11-29T18:00:00.000Z",
            more=True,
        ),
        ErrorFrame(code="bad_frame", message="no"),
        ErrorFrame(code="rate_limited", message="slow", client_id="c-1", channel="#ops"),
    ],
)
def test_server_frames_round_trip(frame):
    """Every hub frame encodes to JSON that parses back to an equal frame."""
    assert parse_server_frame(encode(frame)) == frame


def test_message_frame_matches_the_design_table():
    """The message frame uses the table's field names: ``from``, null ``reply_to``, ``ts``."""
    message = Message("#ops", ID1, ID1, None, "alice", "…", "2026-11-29T18:00:00.000Z")
    assert json.loads(encode(message)) == {
        "type": "message",
        "channel": "#ops",
        "id": ID1,
        "thread": ID1,
        "reply_to": None,
        "from": "alice",
        "text": "…",
        "ts": "2026-11-29T18:00:00.000Z",
    }
    subscribed = json.loads(encode(Subscribed("#ops", None, None)))
    assert subscribed == {"type": "subscribed", "channel": "#ops", "head": None, "oldest": None}


def test_unknown_fields_are_ignored():
    """A newer client's extra fields do not break an older hub; ``from`` in a publish is ignored."""
    frame = parse_client_frame(
        '{"type":"publish","channel":"#x","text":"t","client_id":"c","from":"root","x":1}'
    )
    assert frame == Publish(channel="#x", text="t", client_id="c")


@pytest.mark.parametrize(
    ("text", "code", "needle"),
    [
        ("not json", ErrorCode.BAD_FRAME, "not JSON"),
        ("[1, 2]", ErrorCode.BAD_FRAME, "JSON object"),
        ('{"channel": "#x"}', ErrorCode.BAD_FRAME, '"type"'),
        ('{"type": 7}', ErrorCode.BAD_FRAME, '"type"'),
        ('{"type": "dance"}', ErrorCode.UNKNOWN_TYPE, "dance"),
        ('{"type": "welcome", "nick": "a"}', ErrorCode.UNKNOWN_TYPE, "sent by the hub"),
        ('{"type": "subscribe"}', ErrorCode.BAD_FRAME, "'channel'"),
        ('{"type": "subscribe", "channel": 5}', ErrorCode.BAD_FRAME, "string"),
        ('{"type": "subscribe", "channel": "ops"}', ErrorCode.BAD_CHANNEL, "'ops'"),
        ('{"type": "subscribe", "channel": "#a b"}', ErrorCode.BAD_CHANNEL, "channel"),
        ('{"type": "subscribe", "channel": "#' + "a" * 65 + '"}', ErrorCode.BAD_CHANNEL, "1-64"),
        ('{"type": "subscribe", "channel": "#x", "since": "nope"}', ErrorCode.BAD_FRAME, "since"),
        ('{"type": "hello", "nick": "a b"}', ErrorCode.BAD_FRAME, "nick"),
        ('{"type": "hello"}', ErrorCode.BAD_FRAME, "'nick'"),
        (_pub(), ErrorCode.BAD_FRAME, "client_id"),
        (_pub(text="", client_id="c"), ErrorCode.BAD_FRAME, "empty"),
        (_pub(client_id="c d"), ErrorCode.BAD_FRAME, "client_id"),
        (_pub(text="\ud800", client_id="c"), ErrorCode.BAD_FRAME, "Unicode"),
        (_pub(client_id="c", more=1), ErrorCode.BAD_FRAME, "more"),
        (_pub(client_id="c", thread="z"), ErrorCode.BAD_FRAME, "thread"),
    ],
)
def test_bad_client_frames_get_precise_codes(text, code, needle):
    """Each kind of invalid frame raises ProtocolError with its code and names the cause."""
    error = _error(text)
    assert error.code == code
    assert needle in error.message


def test_errors_name_the_publish_they_are_about():
    """A refused publish's error carries its client_id and channel, so the sender can match it."""
    error = _error('{"type":"publish","channel":"#x","text":"","client_id":"c-9"}')
    assert (error.client_id, error.channel) == ("c-9", "#x")


def test_binary_frames_are_bad_frames():
    """Only JSON text frames are part of the protocol."""
    assert _error(b'{"type":"hello","nick":"a"}').code == ErrorCode.BAD_FRAME  # type: ignore[arg-type]


def test_frame_over_the_limit_is_too_large():
    """A frame over max_frame bytes (counted as UTF-8) is too_large, whatever it contains."""
    text = json.dumps({"type": "hello", "nick": "é" * 600})
    assert _error(text, max_frame=1000).code == ErrorCode.TOO_LARGE
    assert len(text) < 4000
    big = json.loads(text)
    big["nick"] = "é" * 300  # 600 bytes of UTF-8 in 300 characters
    assert _error(json.dumps(big, ensure_ascii=False), max_frame=610).code == ErrorCode.TOO_LARGE


def test_publish_text_over_the_text_limit_is_too_large():
    """A publish whose text leaves no room for the message envelope is too_large and says so."""
    limit = max_text_for(4096)
    ok = encode(Publish(channel="#x", text="a" * limit, client_id="c"))
    assert parse_client_frame(ok, max_frame=4096) == Publish("#x", "a" * limit, "c")
    over = encode(Publish(channel="#x", text="a" * (limit + 1), client_id="c"))
    error = _error(over, max_frame=4096)
    assert error.code == ErrorCode.TOO_LARGE
    assert "split" in error.message


def test_channel_name_syntax():
    """'#' plus 1-64 of letters, digits, '-', '_', '.'; nothing else."""
    assert is_channel("#ops")
    assert is_channel("#a" * 1 + "b" * 63)
    assert is_channel("#A.b-c_9")
    assert not is_channel("ops")
    assert not is_channel("#")
    assert not is_channel("#a/b")
    assert not is_channel("#" + "a" * 65)
    assert not is_channel("#é")
    assert not is_channel(None)


# -- ids -----------------------------------------------------------------------------------


def test_ids_sort_in_assignment_order_within_one_millisecond():
    """Many ids in the same millisecond still sort in the order they were made."""
    gen = IdGenerator(clock=lambda: 1_700_000_000_000)
    ids = [gen.new() for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 1000
    assert all(is_id(i) and id_time_ms(i) == 1_700_000_000_000 for i in ids)


def test_ids_never_go_back_when_the_clock_does():
    """A clock stepping back keeps the last millisecond instead of issuing smaller ids."""
    times = iter([2_000, 1_000, 1_000, 3_000])
    gen = IdGenerator(clock=lambda: next(times))
    ids = [gen.new() for _ in range(4)]
    assert ids == sorted(ids)
    assert [id_time_ms(i) for i in ids] == [2_000, 2_000, 2_000, 3_000]


def test_ids_continue_after_a_seed():
    """Seeded with the largest stored id (a restarted hub), new ids sort after it."""
    stored = IdGenerator(clock=lambda: 5_000).new()
    gen = IdGenerator(after=stored, clock=lambda: 4_000)  # the clock went back meanwhile
    assert gen.new() > stored


def test_id_helpers():
    """ids carry their time: ts rendering, and the bound id for age-based pruning."""
    gen = IdGenerator(clock=lambda: 1_764_439_200_123)
    message_id = gen.new()
    assert id_timestamp(message_id) == "2025-11-29T18:00:00.123Z"
    assert id_for_time(1_764_439_200_123) <= message_id < id_for_time(1_764_439_200_124)
    assert message_id > ZERO_ID
    assert is_id(ZERO_ID)
    assert not is_id("8" + "0" * 25)  # would overflow 128 bits
    assert not is_id("01JDN5X6Q7R8S9T0V1W2X3Y4ZU")  # U is not Crockford base32


# -- text splitting --------------------------------------------------------------------------


def test_short_text_is_one_chunk():
    """A text that fits is not split."""
    assert split_text("hello", 100) == ["hello"]


def test_split_prefers_newlines_then_spaces_and_loses_nothing():
    """Chunks break after a newline when one is in reach, else after a space; they join back."""
    lines = "\n".join(f"line {i} " + "word " * 10 for i in range(50))
    chunks = split_text(lines, 300)
    assert "".join(chunks) == lines
    assert all(json_text_size(c) <= 300 for c in chunks)
    assert all(c.endswith("\n") for c in chunks[:-1])
    words = "word " * 200
    chunks = split_text(words, 64)
    assert "".join(chunks) == words
    assert all(c.endswith(" ") for c in chunks[:-1])


def test_split_counts_utf8_and_escapes():
    """Sizes are JSON bytes on the wire: multibyte characters and escapes count in full."""
    text = "é" * 100 + '"' * 50 + "\x01" * 10 + "😀" * 20
    chunks = split_text(text, 32)
    assert "".join(chunks) == text
    assert all(json_text_size(c) <= 32 for c in chunks)
    for chunk in chunks:
        chunk.encode("utf-8")  # never a broken character


def test_split_hard_cuts_text_without_spaces():
    """A text with no spaces or newlines is cut at the limit."""
    text = "x" * 1000
    chunks = split_text(text, 100)
    assert [len(c) for c in chunks] == [100] * 10


def test_split_measures_each_character_a_bounded_number_of_times(monkeypatch):
    """Splitting is linear in the text: each chunk measures at most one window of
    ``max_bytes`` characters (a few times, to find its end), never the whole rest. It
    measured and copied the rest once per chunk: a 20 MB approval request (a snippet's
    argument, shown in full) held the daemon's event loop for 10 s, 200 MB for minutes."""
    import channels.split as split

    measured = [0]
    real = split.json_text_size

    def counting(text: str) -> int:
        measured[0] += len(text)
        return real(text)

    monkeypatch.setattr(split, "json_text_size", counting)
    text = ("word " * 20 + "\n") * 2_000  # 202 000 characters
    chunks = split.split_text(text, 100)
    assert "".join(chunks) == text
    assert all(real(c) <= 100 for c in chunks)
    assert measured[0] <= 40 * len(text)


def test_split_refuses_tiny_limits():
    """A chunk limit below one escaped character's size is a programming error."""
    with pytest.raises(ValueError, match="at least"):
        split_text("abc", 4)


# -- rate limiting ---------------------------------------------------------------------------


def test_bucket_allows_bursts_then_limits_then_calls_a_flood():
    """burst frames pass, the next are limited, and burst more after that are a flood."""
    bucket = TokenBucket(rate=10, burst=5, now=0.0)
    verdicts = [bucket.take(0.0) for _ in range(11)]
    assert verdicts[:5] == [Verdict.OK] * 5
    assert verdicts[5:10] == [Verdict.LIMITED] * 5
    assert verdicts[10] is Verdict.FLOOD


def test_bucket_recovers_when_the_client_backs_off():
    """After being limited, a client that waits gets tokens back."""
    bucket = TokenBucket(rate=10, burst=2, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [Verdict.OK, Verdict.OK, Verdict.LIMITED]
    assert bucket.take(0.25) is Verdict.OK  # 2.5 tokens back, 1 owed


# -- tokens file -----------------------------------------------------------------------------


def test_tokens_file_format():
    """'TOKEN NICK' lines; comments and blank lines ignored."""
    text = "# token nick\n\n" + "a" * 16 + "  alice\n" + "b" * 20 + "\tbob  \n"
    assert parse_tokens(text) == {"a" * 16: "alice", "b" * 20: "bob"}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("onlyonefield", "TOKEN NICK"),
        ("short alice", "too short"),
        ("a" * 16 + " al/ice", "invalid nick"),
        ("a" * 16 + " alice\n" + "a" * 16 + " bob", "twice"),
    ],
)
def test_tokens_file_errors_name_the_line(text, needle):
    """A bad line is an operator error naming the line, never echoing the token."""
    with pytest.raises(ChannelConfigError, match=needle) as info:
        parse_tokens(text, source="tokens.txt")
    assert "tokens.txt:" in str(info.value)
    assert "a" * 16 not in str(info.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6680/", "ws://127.0.0.1:99999/", "ws://[::1/", "ws://host:port/"]
)
def test_a_bad_hub_url_is_a_config_error(url):
    """Every malformed hub URL (ATIRC_URL, the daemon's config) is a ChannelConfigError
    naming it; a bad port or bracket used to escape as urllib's ValueError."""
    with pytest.raises(ChannelConfigError, match="invalid hub URL"):
        WebSocketChannel(url, nick="alice")


# -- systemd notify --------------------------------------------------------------------------


@pytest.fixture
def notify_socket(tmp_path):
    """A datagram socket standing in for systemd's notify socket."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        yield str(path), sock


def test_notify_sends_a_datagram(notify_socket):
    """notify() sends the state as one datagram to $NOTIFY_SOCKET."""
    path, sock = notify_socket
    assert notify("READY=1\nSTATUS=ok", env={"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"READY=1\nSTATUS=ok"


def test_notify_reaches_abstract_sockets():
    """'@name' is an abstract socket (a leading NUL byte)."""
    name = f"asyncai-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert notify("WATCHDOG=1", env={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"WATCHDOG=1"


def test_notify_without_systemd_is_a_no_op(tmp_path):
    """No $NOTIFY_SOCKET: nothing sent, no error; a dead socket is logged, not raised."""
    assert notify("READY=1", env={}) is False
    assert notify("READY=1", env={"NOTIFY_SOCKET": str(tmp_path / "gone")}) is False


def test_watchdog_interval():
    """Half of WATCHDOG_USEC, and only for the process WATCHDOG_PID names."""
    assert watchdog_interval(env={}) is None
    assert watchdog_interval(env={"WATCHDOG_USEC": "10000000"}) == 5.0
    mine = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(env=mine) == 1.0
    assert watchdog_interval(env={"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval(env={"WATCHDOG_USEC": "soon"}) is None


# -- the package -----------------------------------------------------------------------------


def test_package_exports_what_it_names():
    """channels.__all__ lists names that exist, and the daemon's needs are among them."""
    for name in channels.__all__:
        assert hasattr(channels, name), name
    assert {"Channel", "WebSocketChannel", "Message", "PublishAck", "Hub"} <= set(channels.__all__)
    assert DEFAULT_MAX_FRAME == 64 * 1024
