"""The client's sans-I/O protocol (channels.client.protocol), without sockets or an event loop.

Each test plays the hub by hand: it feeds :class:`ClientProtocol` the frames a
hub would send and checks the frames the protocol says to send, the events
it reports and the messages it puts in its inbox.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from channels.client.protocol import (
    ClientProtocol,
    MessageReceived,
    PublishAcked,
    PublishRefused,
    SubscriptionConfirmed,
    SubscriptionRefused,
    check_publish,
    check_subscribe,
)
from channels.errors import ProtocolError, UnauthorizedError
from channels.frames import Ack, ErrorCode, ErrorFrame, Message, Subscribed, Welcome
from channels.ids import ZERO_ID, id_for_time
from channels.protocol import DEFAULT_MAX_FRAME, encode, max_text_for
from channels.split import split_text

URL = "ws://127.0.0.1:6680/"
IDS = [id_for_time(1_700_000_000_000 + n) for n in range(10)]


def _protocol(*, hello_nick: str | None = "alice", inbox_size: int = 100) -> ClientProtocol:
    return ClientProtocol(URL, hello_nick=hello_nick, inbox_size=inbox_size)


def _connected(*, inbox_size: int = 100) -> ClientProtocol:
    """A protocol whose connection has been welcomed."""
    proto = _protocol(inbox_size=inbox_size)
    proto.connection_made(Welcome(nick="alice"))
    return proto


def _sent(text: str | None) -> dict[str, object]:
    """The JSON object of a frame the protocol says to send."""
    assert text is not None
    decoded = json.loads(text)
    assert isinstance(decoded, dict)
    return decoded


def _message(index: int, channel: str = "#ops", text: str = "hi") -> str:
    """A ``message`` frame as the hub sends it, with id ``IDS[index]``."""
    return encode(
        Message(
            channel=channel,
            id=IDS[index],
            thread=IDS[index],
            reply_to=None,
            sender="bob",
            text=text,
            ts="2026-11-29T18:00:00.000Z",
        )
    )


def _subscribed(channel: str = "#ops", head: str | None = None, oldest: str | None = None) -> str:
    return encode(Subscribed(channel=channel, head=head, oldest=oldest))


def _drain(proto: ClientProtocol) -> list[str]:
    """The ids of every message in the inbox, taking them out."""
    ids = []
    while (message := proto.next_message()) is not None:
        ids.append(message.id)
    return ids


def _live(proto: ClientProtocol, channel: str = "#ops", since: str | None = None) -> None:
    """Subscribe ``channel`` and have the hub confirm it."""
    proto.subscribe(channel, since)
    proto.receive_frame(_subscribed(channel))


# -- the handshake ---------------------------------------------------------------------------


def test_greeting_is_hello_without_a_token_and_nothing_with_one():
    """Without a token the first frame claims the nick; with one the hub knows us already."""
    assert _sent(_protocol(hello_nick="alice").greeting()) == {"type": "hello", "nick": "alice"}
    assert _protocol(hello_nick=None).greeting() is None


def test_welcome_sets_nick_and_the_hubs_text_limit():
    """connection_made learns nick and max_text; a missing or silly max_text keeps the default."""
    proto = _protocol()
    assert proto.nick is None
    assert not proto.connected
    proto.connection_made(Welcome(nick="alice", max_text=5000))
    assert (proto.nick, proto.max_text, proto.connected) == ("alice", 5000, True)

    for max_text in (None, 0, -1):
        other = _protocol()
        other.connection_made(Welcome(nick="bob", max_text=max_text))
        assert other.max_text == max_text_for(DEFAULT_MAX_FRAME)


def test_expect_welcome_returns_the_welcome():
    """The first frame being ``welcome`` is the happy path; the protocol's state is unchanged."""
    proto = _protocol()
    welcome = proto.expect_welcome(encode(Welcome(nick="alice", max_text=100)))
    assert welcome == Welcome(nick="alice", max_text=100)
    assert proto.nick is None  # only connection_made commits it


def test_expect_welcome_turns_an_unauthorized_error_into_unauthorized_error():
    """An ``unauthorized`` error frame first means the hub refuses who we are."""
    frame = encode(ErrorFrame(ErrorCode.UNAUTHORIZED, "send hello first"))
    with pytest.raises(UnauthorizedError, match=r"the hub at ws://127\.0\.0\.1:6680/ refused us"):
        _protocol().expect_welcome(frame)


def test_expect_welcome_refuses_other_errors_and_frames():
    """Any other error keeps its code; any other frame is a bad_frame; garbage does not parse."""
    with pytest.raises(ProtocolError) as info:
        _protocol().expect_welcome(encode(ErrorFrame(ErrorCode.INTERNAL, "boom")))
    assert (info.value.code, info.value.message) == (ErrorCode.INTERNAL, "boom")

    with pytest.raises(ProtocolError, match="expected welcome, got subscribed") as info:
        _protocol().expect_welcome(_subscribed())
    assert info.value.code == ErrorCode.BAD_FRAME

    with pytest.raises(ProtocolError):
        _protocol().expect_welcome("not json")


# -- subscribing -----------------------------------------------------------------------------


def test_subscribe_while_connected_sends_subscribe_with_since():
    """A subscribe goes out at once, carrying ``since``."""
    proto = _connected()
    assert _sent(proto.subscribe("#ops", IDS[2])) == {
        "type": "subscribe",
        "channel": "#ops",
        "since": IDS[2],
    }
    assert _sent(proto.subscribe("#dev", None)) == {"type": "subscribe", "channel": "#dev"}
    assert proto.channels() == ["#ops", "#dev"]


def test_subscribe_is_validated_before_anything_changes():
    """A bad channel name or since raises ProtocolError and subscribes to nothing."""
    proto = _connected()
    with pytest.raises(ProtocolError) as info:
        proto.subscribe("ops", None)
    assert info.value.code == ErrorCode.BAD_CHANNEL
    with pytest.raises(ProtocolError) as info:
        proto.subscribe("#ops", "yesterday")
    assert info.value.code == ErrorCode.BAD_FRAME
    assert proto.channels() == []
    check_subscribe("#ops", ZERO_ID)  # valid: no exception


def test_subscribe_without_connection_waits_for_the_next_one():
    """Offline, nothing is sent; the next connection subscribes, once."""
    proto = _protocol()
    assert proto.subscribe("#ops", IDS[1]) is None
    proto.connection_made(Welcome(nick="alice"))
    assert _sent(proto.resubscribe("#ops")) == {
        "type": "subscribe",
        "channel": "#ops",
        "since": IDS[1],
    }
    assert proto.resubscribe("#ops") is None  # already subscribed on this connection
    assert proto.resubscribe("#other") is None  # never subscribed


def test_resubscribe_skips_a_channel_subscribed_on_this_connection_already():
    """A subscribe sent on the new connection before the resubscription wins; no second frame."""
    proto = _protocol()
    proto.subscribe("#ops", None)
    proto.connection_made(Welcome(nick="alice"))
    assert proto.subscribe("#ops", IDS[3]) is not None
    assert proto.resubscribe("#ops") is None


def test_reconnect_resubscribes_from_the_last_delivered_id():
    """After a break, ``since`` is the last id delivered, so nothing is lost."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    proto.receive_frame(_message(0))
    proto.receive_frame(_message(1))
    proto.connection_lost()
    assert not proto.connected
    assert proto.resubscribe("#ops") is None  # no connection: nothing to send on
    proto.connection_made(Welcome(nick="alice"))
    assert [_sent(proto.resubscribe(ch)) for ch in proto.channels()] == [
        {"type": "subscribe", "channel": "#ops", "since": IDS[1]}
    ]


def test_live_subscription_counts_everything_up_to_head_as_seen():
    """Without since, ``head`` becomes the last id: a reconnect replays only what came after."""
    proto = _connected()
    proto.subscribe("#ops", None)
    events = proto.receive_frame(_subscribed("#ops", head=IDS[4], oldest=IDS[0]))
    assert events == [SubscriptionConfirmed(Subscribed("#ops", IDS[4], IDS[0]))]
    proto.receive_frame(_message(3))  # at or before head: not delivered
    proto.receive_frame(_message(5))
    assert _drain(proto) == [IDS[5]]


def test_live_subscription_to_an_empty_channel_replays_all_after_a_reconnect():
    """An empty channel's head is null: the last id becomes ZERO_ID, the next since."""
    proto = _connected()
    _live(proto, "#ops")
    proto.connection_lost()
    proto.connection_made(Welcome(nick="alice"))
    assert _sent(proto.resubscribe("#ops"))["since"] == ZERO_ID


def test_subscribed_for_an_unknown_channel_is_ignored():
    """A ``subscribed`` nobody asked for (or after unsubscribe) causes nothing."""
    proto = _connected()
    assert proto.receive_frame(_subscribed("#nobody")) == []


def test_unsubscribe_sends_only_for_a_subscribed_channel_when_connected():
    """unsubscribe forgets the channel; the frame goes out only if there is one to send."""
    proto = _connected()
    _live(proto)
    assert _sent(proto.unsubscribe("#ops")) == {"type": "unsubscribe", "channel": "#ops"}
    assert proto.unsubscribe("#ops") is None
    assert proto.receive_frame(_message(0)) == []  # its messages are dropped now

    offline = _protocol()
    offline.subscribe("#ops", None)
    assert offline.unsubscribe("#ops") is None
    assert offline.channels() == []


def test_retention_gap_is_logged_when_since_is_older_than_oldest():
    """A since before the oldest retained id may have lost messages: say so in the log."""
    proto = _connected()
    proto.subscribe("#ops", IDS[1])
    with capture_logs() as logs:
        proto.receive_frame(_subscribed("#ops", head=IDS[9], oldest=IDS[5]))
    gaps = [e for e in logs if e["event"] == "channels.retention_gap"]
    assert len(gaps) == 1
    assert (gaps[0]["since"], gaps[0]["oldest"]) == (IDS[1], IDS[5])


@pytest.mark.parametrize("since", [None, ZERO_ID, IDS[5], IDS[6]])
def test_no_retention_gap_when_nothing_can_be_missing(since):
    """Live only, replay of everything, or a since at or after oldest: no gap to report."""
    proto = _connected()
    proto.subscribe("#ops", since)
    with capture_logs() as logs:
        proto.receive_frame(_subscribed("#ops", head=IDS[9], oldest=IDS[5]))
    assert not [e for e in logs if e["event"] == "channels.retention_gap"]


# -- messages --------------------------------------------------------------------------------


def test_messages_are_delivered_in_order_once_subscribed():
    """After ``subscribed``, each message lands in the inbox and is reported."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    events = proto.receive_frame(_message(0, text="one"))
    assert len(events) == 1
    assert isinstance(events[0], MessageReceived)
    assert events[0].message.text == "one"
    proto.receive_frame(_message(1))
    assert proto.pending == 2
    assert _drain(proto) == [IDS[0], IDS[1]]
    assert proto.next_message() is None


def test_messages_before_subscribed_are_dropped():
    """Between a subscribe and its ``subscribed``, the replay that follows will deliver them."""
    proto = _connected()
    proto.subscribe("#ops", ZERO_ID)
    assert proto.receive_frame(_message(0)) == []
    proto.receive_frame(_subscribed("#ops"))
    proto.receive_frame(_message(0))
    assert _drain(proto) == [IDS[0]]


def test_a_subscribe_lost_with_its_connection_does_not_block_the_next():
    """A subscribe never answered before a break: the new connection's one answer is enough."""
    proto = _connected()
    proto.subscribe("#ops", ZERO_ID)
    proto.connection_lost()
    proto.connection_made(Welcome(nick="alice"))
    proto.resubscribe("#ops")
    proto.receive_frame(_message(0))  # still waiting for this connection's subscribed
    proto.receive_frame(_subscribed("#ops"))
    proto.receive_frame(_message(0))
    assert _drain(proto) == [IDS[0]]


def test_duplicates_are_dropped():
    """An id at or below the last delivered one (a replay overlapping a reconnect) is dropped."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    for index in (0, 1, 1, 0, 2):
        proto.receive_frame(_message(index))
    assert _drain(proto) == [IDS[0], IDS[1], IDS[2]]


def test_messages_of_channels_not_subscribed_are_dropped():
    """The hub should not send them; if it does, they are ignored."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    assert proto.receive_frame(_message(0, channel="#elsewhere")) == []
    assert proto.pending == 0


def test_a_full_inbox_drops_and_resyncs_from_the_last_delivered_id():
    """Overflow drops the channel's messages; at half full, resync subscribes again from there."""
    proto = _connected(inbox_size=4)
    _live(proto, "#ops", ZERO_ID)
    _live(proto, "#dev", ZERO_ID)
    with capture_logs() as logs:
        for index in range(6):
            proto.receive_frame(_message(index))
    assert proto.pending == 4
    assert [e["event"] for e in logs] == ["channels.inbox_full"]
    assert proto.overflowed() == ["#ops"]
    assert proto.receive_frame(_message(6)) == []  # overflowed: dropped even with room later
    assert not proto.wants_resync()  # 4 of 4
    assert proto.resync("#dev") is None  # not overflowed

    proto.next_message()
    proto.next_message()
    assert proto.wants_resync()  # 2 of 4: half
    assert _sent(proto.resync("#ops")) == {"type": "subscribe", "channel": "#ops", "since": IDS[3]}
    assert proto.overflowed() == []
    assert proto.receive_frame(_message(4)) == []  # until the new subscribed
    proto.receive_frame(_subscribed("#ops"))
    proto.receive_frame(_message(4))
    assert _drain(proto) == [IDS[2], IDS[3], IDS[4]]


def test_resync_without_connection_sends_nothing():
    """Offline, an overflowed channel waits for the next connection's resubscription."""
    proto = _connected(inbox_size=2)
    _live(proto, "#ops", ZERO_ID)
    for index in range(3):
        proto.receive_frame(_message(index))
    proto.connection_lost()
    assert proto.resync("#ops") is None
    proto.connection_made(Welcome(nick="alice"))
    assert _sent(proto.resubscribe("#ops"))["since"] == IDS[1]
    assert proto.overflowed() == []


def test_inbox_size_below_two_is_refused():
    """An inbox must hold at least two messages (half of it is the resync mark)."""
    with pytest.raises(ValueError, match="inbox_size"):
        _protocol(inbox_size=1)


# -- publishing ------------------------------------------------------------------------------


def test_ack_is_reported_by_client_id():
    """An ``ack`` becomes PublishAcked carrying the publish's client_id, id and thread."""
    proto = _connected()
    events = proto.receive_frame(encode(Ack(client_id="c1", id=IDS[0], thread=IDS[0])))
    assert events == [PublishAcked(Ack(client_id="c1", id=IDS[0], thread=IDS[0]))]


def test_error_with_client_id_refuses_that_publish():
    """An error naming a client_id is about that publish, even if it also names a channel."""
    proto = _connected()
    _live(proto)
    frame = ErrorFrame(ErrorCode.RATE_LIMITED, "slow down", client_id="c1", channel="#ops")
    [event] = proto.receive_frame(encode(frame))
    assert isinstance(event, PublishRefused)
    assert event.client_id == "c1"
    assert (event.error.code, event.error.client_id) == (ErrorCode.RATE_LIMITED, "c1")
    assert proto.channels() == ["#ops"]  # the subscription is untouched


def test_error_naming_a_subscribed_channel_refuses_the_subscription():
    """An error with a channel but no client_id ends that subscription."""
    proto = _connected()
    _live(proto)
    frame = ErrorFrame(ErrorCode.INTERNAL, "could not read", channel="#ops")
    [event] = proto.receive_frame(encode(frame))
    assert isinstance(event, SubscriptionRefused)
    assert (event.channel, event.error.code) == ("#ops", ErrorCode.INTERNAL)
    assert proto.channels() == []
    assert proto.receive_frame(_message(0)) == []


def test_other_errors_are_only_logged():
    """An error about nothing we know is logged, and causes no event."""
    proto = _connected()
    with capture_logs() as logs:
        assert proto.receive_frame(encode(ErrorFrame(ErrorCode.BAD_FRAME, "what?"))) == []
        assert proto.receive_frame(encode(ErrorFrame(ErrorCode.INTERNAL, "x", channel="#no"))) == []
    assert [e["event"] for e in logs] == ["channels.error_from_hub"] * 2
    assert logs[0]["code"] == ErrorCode.BAD_FRAME


def test_publish_frames_for_a_short_text_is_one_frame():
    """One chunk: the client_id as given, thread and reply_to as given, no ``more``."""
    proto = _connected()
    [frame] = proto.publish_frames("#ops", "hello", thread=IDS[0], reply_to=IDS[1], client_id="c")
    assert (frame.channel, frame.text, frame.client_id) == ("#ops", "hello", "c")
    assert (frame.thread, frame.reply_to, frame.more) == (IDS[0], IDS[1], False)


def test_publish_frames_splits_a_long_text_under_the_hubs_limit():
    """Chunks fit max_text, get client_ids ID, ID.1, ID.2…, and all but the last carry more."""
    proto = _protocol()
    proto.connection_made(Welcome(nick="alice", max_text=100))
    text = "word " * 100
    frames = proto.publish_frames("#ops", text, client_id="base")
    assert [f.text for f in frames] == split_text(text, 100)
    assert len(frames) > 2
    assert [f.client_id for f in frames] == ["base"] + [f"base.{i}" for i in range(1, len(frames))]
    assert [f.more for f in frames] == [True] * (len(frames) - 1) + [False]


def test_publish_frames_without_client_id_makes_a_fresh_one():
    """Each publish without a client_id gets a new one, so two publishes are two messages."""
    proto = _connected()
    [first] = proto.publish_frames("#ops", "x")
    [second] = proto.publish_frames("#ops", "x")
    assert first.client_id != second.client_id


@pytest.mark.parametrize(
    ("channel", "text", "thread", "reply_to", "code"),
    [
        ("ops", "x", None, None, ErrorCode.BAD_CHANNEL),
        ("#ops", "", None, None, ErrorCode.BAD_FRAME),
        ("#ops", "\ud800", None, None, ErrorCode.BAD_FRAME),
        ("#ops", "x", "not-an-id", None, ErrorCode.BAD_FRAME),
        ("#ops", "x", None, "not-an-id", ErrorCode.BAD_FRAME),
    ],
)
def test_publish_is_validated(channel, text, thread, reply_to, code):
    """A publish that could never be sent raises ProtocolError before any frame exists."""
    with pytest.raises(ProtocolError) as info:
        check_publish(channel, text, thread, reply_to)
    assert info.value.code == code
    with pytest.raises(ProtocolError):
        _connected().publish_frames(channel, text, thread=thread, reply_to=reply_to)


# -- odd frames ------------------------------------------------------------------------------


def test_bad_frame_from_the_hub_is_logged_and_ignored():
    """A frame that does not parse changes nothing; the log names the hub."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    with capture_logs() as logs:
        assert proto.receive_frame("{not json") == []
        assert proto.receive_frame(json.dumps({"type": "hello", "nick": "x"})) == []
    assert [e["event"] for e in logs] == ["channels.bad_frame_from_hub"] * 2
    assert logs[0]["url"] == URL


def test_a_second_welcome_is_ignored():
    """Only the first welcome of a connection matters."""
    proto = _connected()
    assert proto.receive_frame(encode(Welcome(nick="mallory", max_text=10))) == []
    assert (proto.nick, proto.max_text) == ("alice", max_text_for(DEFAULT_MAX_FRAME))


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_receive_frame_never_raises(raw):
    """Whatever the hub sends, receive_frame returns events (possibly none), never raises."""
    proto = _connected()
    _live(proto, "#ops", ZERO_ID)
    with capture_logs():
        events = proto.receive_frame(raw)
    assert isinstance(events, list)
