"""The hub and the websocket client together: a real hub on 127.0.0.1 port 0, real connections.

Raw protocol clients (tests/fakes/channels_helpers.py) send what the real
client never would: bad frames, floods, forged senders, oversize frames.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from channels.client import Channel, PublishAck
from channels.errors import (
    ChannelBrokenError,
    ChannelClosedError,
    HubUnreachableError,
    ProtocolError,
    UnauthorizedError,
)
from channels.hub import FLOOD_CLOSE, GOING_AWAY_CLOSE, SLOW_CLOSE, Hub, _is_loopback
from channels.ids import ZERO_ID, is_id
from channels.protocol import max_text_for
from tests.fakes.channels_helpers import (
    WAIT,
    Clients,
    GatedBackoff,
    Hubs,
    RawClient,
    give_up,
    take,
)

TOKEN_ALICE = "alice-token-0123456789"
TOKEN_BOB = "bob-token-0123456789ab"


@pytest.fixture
async def hubs(tmp_path):
    """Hubs over one database file in tmp_path, closed after the test."""
    made = Hubs(tmp_path / "hub.db")
    yield made
    await made.aclose()


@pytest.fixture
async def hub(hubs):
    """A hub without tokens, default limits."""
    return await hubs.start()


@pytest.fixture
async def clients():
    """WebSocketChannels closed after the test."""
    made = Clients()
    yield made
    await made.aclose()


# -- publish and subscribe -----------------------------------------------------------------


async def test_round_trip(hub, clients):
    """A published message reaches a subscriber with the hub's id, thread, sender and time."""
    alice = await clients.connect(hub.url, nick="alice")
    bob = await clients.connect(hub.url, nick="bob")
    assert isinstance(alice, Channel)  # the interface the daemon codes against
    subscribed = await bob.subscribe("#ops")
    assert (subscribed.head, subscribed.oldest) == (None, None)
    assert alice.nick == "alice"
    assert bob.nick == "bob"

    ack = await alice.publish("#ops", "deploy?")
    assert is_id(ack.id)
    assert ack.thread == ack.id
    assert ack.ids == (ack.id,)
    [message] = await take(bob, 1)
    assert (message.channel, message.id, message.thread) == ("#ops", ack.id, ack.id)
    assert (message.sender, message.text, message.reply_to) == ("alice", "deploy?", None)
    assert message.ts.endswith("Z")
    assert message.ts.startswith("20")

    reply = await bob.publish("#ops", "yes", thread=ack.thread, reply_to=ack.id)
    assert reply.thread == ack.id
    assert reply.id > ack.id
    [echo] = await take(bob, 1)  # subscribers get their own messages too
    assert (echo.id, echo.thread, echo.reply_to, echo.sender) == (reply.id, ack.id, ack.id, "bob")


async def test_a_thread_of_another_channel_is_refused_with_bad_thread(hub, clients):
    """Issue 26: a publish in #pub naming an #ops thread (its root, or a reply's thread)
    gets a bad_thread error frame, is neither stored nor delivered, and the connection
    stays up; the thread's own channel, and a thread the hub never saw, are accepted."""
    alice = await clients.connect(hub.url, nick="alice")
    mallory = await clients.connect(hub.url, nick="mallory")
    watcher = await clients.connect(hub.url, nick="watcher")
    await watcher.subscribe("#pub")
    root = await alice.publish("#ops", "the secret is in a variable")
    await alice.publish("#ops", "and in a reply", thread=root.thread)
    with pytest.raises(ProtocolError) as info:
        await mallory.publish("#pub", "let me in", thread=root.thread)
    assert info.value.code == "bad_thread"
    assert info.value.message == f"thread {root.thread} is not a thread of #pub"  # no #ops
    raw = await RawClient.connect(hub.url, nick="raw")
    await raw.send(
        {"type": "publish", "channel": "#pub", "text": "t", "client_id": "c1", "thread": root.id}
    )
    error = await raw.recv()
    assert (error["type"], error["code"], error["client_id"]) == ("error", "bad_thread", "c1")
    fresh = await mallory.publish("#pub", "a thread of my own")  # the connection stays up
    unknown = await mallory.publish("#pub", "a thread nobody saw", thread="0" * 25 + "1")
    assert unknown.thread == "0" * 25 + "1"  # today's behaviour: taken as given
    assert (await alice.publish("#ops", "mine", thread=root.thread)).thread == root.id
    assert [m.id for m in await take(watcher, 2)] == [fresh.id, unknown.id]
    await raw.close()


async def test_two_subscribers_and_channels_stay_apart(hub, clients):
    """Every subscriber of a channel gets each message once; other channels get nothing."""
    pub = await clients.connect(hub.url, nick="pub")
    first = await clients.connect(hub.url, nick="first")
    second = await clients.connect(hub.url, nick="second")
    other = await clients.connect(hub.url, nick="other")
    await first.subscribe("#a")
    await second.subscribe("#a")
    await other.subscribe("#b")
    acks = [await pub.publish("#a", f"m{i}") for i in range(5)]
    await pub.publish("#b", "elsewhere")
    ids = [a.id for a in acks]
    assert [m.id for m in await take(first, 5)] == ids
    assert [m.id for m in await take(second, 5)] == ids
    assert [m.text for m in await take(other, 1)] == ["elsewhere"]


async def test_replay_with_since_then_live(hub, clients):
    """since replays the stored messages after it, in order, then live ones follow."""
    pub = await clients.connect(hub.url, nick="pub")
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(5)]
    sub = await clients.connect(hub.url, nick="sub")
    subscribed = await sub.subscribe("#ops", since=ids[1])
    assert (subscribed.head, subscribed.oldest) == (ids[-1], ids[0])
    assert [m.id for m in await take(sub, 3)] == ids[2:]
    live = await pub.publish("#ops", "live")
    assert [m.id for m in await take(sub, 1)] == [live.id]


async def test_since_zero_replays_everything_and_live_subscribe_replays_nothing(hub, clients):
    """ZERO_ID replays all retained messages; no since means only new ones."""
    pub = await clients.connect(hub.url, nick="pub")
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(3)]
    everything = await clients.connect(hub.url, nick="all")
    await everything.subscribe("#ops", since=ZERO_ID)
    assert [m.id for m in await take(everything, 3)] == ids
    live = await clients.connect(hub.url, nick="live")
    await live.subscribe("#ops")
    new = await pub.publish("#ops", "new")
    assert [m.id for m in await take(live, 1)] == [new.id]


async def test_replay_seam_under_concurrent_publishing(hubs, clients):
    """Publishing during a paged replay: every message arrives once, in id order, no gap."""
    hub = await hubs.start(replay_page=3, queue_size=6)
    pub = await clients.connect(hub.url, nick="pub")
    before = [(await pub.publish("#ops", f"old{i}")).id for i in range(20)]
    sub = await clients.connect(hub.url, nick="sub")

    async def publish_more() -> list[str]:
        return [(await pub.publish("#ops", f"new{i}")).id for i in range(40)]

    async with asyncio.TaskGroup() as tg:
        during = tg.create_task(publish_more())
        await sub.subscribe("#ops", since=before[4])
    expected = before[5:] + during.result()
    got = [m.id for m in await take(sub, len(expected))]
    assert got == expected
    marker = await pub.publish("#ops", "end")
    assert [m.id for m in await take(sub, 1)] == [marker.id]


async def test_unsubscribe_stops_delivery(hub, clients):
    """After unsubscribe, the channel's messages no longer arrive."""
    pub = await clients.connect(hub.url, nick="pub")
    sub = await clients.connect(hub.url, nick="sub")
    await sub.subscribe("#a")
    await sub.subscribe("#b")
    await sub.unsubscribe("#a")
    await pub.publish("#a", "not for you")
    b = await pub.publish("#b", "for you")
    assert [m.id for m in await take(sub, 1)] == [b.id]


# -- idempotency ----------------------------------------------------------------------------


async def test_same_client_id_is_stored_once_even_after_a_restart(hubs, clients):
    """A retried publish (same client_id) gets the first id back, also from a restarted hub."""
    hub = await hubs.start()
    raw = await RawClient.connect(hub.url, nick="alice")
    frame = {"type": "publish", "channel": "#ops", "text": "once", "client_id": "retry-1"}
    await raw.send(frame)
    await raw.send(frame)
    first, second = await raw.recv_type("ack"), await raw.recv_type("ack")
    assert first == second
    assert first["client_id"] == "retry-1"
    await raw.close()

    port = hub.port
    await hub.aclose()
    hub = await hubs.start(port=port)
    raw = await RawClient.connect(hub.url, nick="alice")
    await raw.send(frame)
    assert await raw.recv_type("ack") == first
    # The same client_id from someone else is a different publish.
    other = await RawClient.connect(hub.url, nick="mallory")
    await other.send(frame)
    assert (await other.recv_type("ack"))["id"] != first["id"]
    await raw.close()
    await other.close()

    sub = await clients.connect(hub.url, nick="sub")
    await sub.subscribe("#ops", since=ZERO_ID)
    messages = await take(sub, 2)
    assert [(m.sender, m.text) for m in messages] == [("alice", "once"), ("mallory", "once")]


async def test_client_id_given_by_the_caller(hub, clients):
    """WebSocketChannel.publish with the same client_id twice returns the same ack."""
    alice = await clients.connect(hub.url)
    first = await alice.publish("#ops", "reply", client_id="reply-for-42")
    again = await alice.publish("#ops", "reply", client_id="reply-for-42")
    assert first == again
    assert hub.stats.duplicates == 1


# -- long texts -----------------------------------------------------------------------------


async def test_long_text_is_split_into_one_thread(hubs, clients):
    """A text over the frame limit goes out as several acked messages in one thread."""
    hub = await hubs.start(max_frame=4096)
    alice = await clients.connect(hub.url)
    sub = await clients.connect(hub.url, nick="sub")
    await sub.subscribe("#ops")
    text = "\n".join(f"line {i}: " + "é" * 40 for i in range(200))
    ack = await alice.publish("#ops", text)
    assert len(ack.ids) > 3
    parts = await take(sub, len(ack.ids))
    assert [p.id for p in parts] == list(ack.ids)
    assert {p.thread for p in parts} == {ack.id}
    assert [p.more for p in parts] == [True] * (len(parts) - 1) + [False]
    assert "".join(p.text for p in parts) == text
    assert all(len(p.text.encode()) <= max_text_for(4096) for p in parts)


# -- restarts and reconnects ---------------------------------------------------------------


async def test_hub_restart_while_subscribed_delivers_the_gap_exactly_once(hubs, clients):
    """Messages published while the subscriber was away arrive once, in order, after it returns
    (and the client counts the reconnect, for the metrics)."""
    hub = await hubs.start()
    backoff = GatedBackoff()
    sub = await clients.connect(hub.url, nick="sub", backoff=backoff)
    await sub.subscribe("#ops")
    pub_backoff = GatedBackoff()
    pub = await clients.connect(hub.url, nick="pub", backoff=pub_backoff)
    before = [(await pub.publish("#ops", f"before{i}")).id for i in range(3)]
    assert [m.id for m in await take(sub, 3)] == before

    port = hub.port
    await hub.aclose()
    async with asyncio.timeout(WAIT):
        await backoff.waiting.wait()  # the subscriber noticed, failed once, waits
    hub = await hubs.start(port=port)
    gap_client = await clients.connect(hub.url, nick="gap")
    gap = [(await gap_client.publish("#ops", f"gap{i}")).id for i in range(4)]
    backoff.gate.set()
    pub_backoff.gate.set()

    assert [m.id for m in await take(sub, 4)] == gap
    after = await pub.publish("#ops", "after")  # waits for its own reconnect
    assert [m.id for m in await take(sub, 1)] == [after.id]
    assert before[-1] < gap[0]
    assert (sub.reconnects, gap_client.reconnects) == (1, 0)  # asyncai_channel_reconnects_total


async def test_publish_waits_out_a_hub_restart(hubs, clients):
    """A publish made while the hub is down is sent after the reconnect and acked once."""
    hub = await hubs.start()
    backoff = GatedBackoff()
    alice = await clients.connect(hub.url, backoff=backoff)
    port = hub.port
    await hub.aclose()
    async with asyncio.timeout(WAIT):
        await backoff.waiting.wait()
    pending = asyncio.create_task(alice.publish("#ops", "while down", client_id="down-1"))
    hub = await hubs.start(port=port)
    backoff.gate.set()
    async with asyncio.timeout(WAIT):
        ack = await pending
    assert isinstance(ack, PublishAck)
    assert hub.stats.published == 1


async def test_hub_shutdown_says_going_away(hub):
    """aclose() closes every connection with 1001 and a reason."""
    raw = await RawClient.connect(hub.url)
    await hub.aclose()
    await raw.until_closed()
    assert (raw.ws.close_code, raw.ws.close_reason) == GOING_AWAY_CLOSE


# -- identity -------------------------------------------------------------------------------


async def test_tokens_identify_and_from_cannot_be_forged(hubs, clients):
    """With tokens, the token's nick is the sender, whatever hello or the frame claims."""
    hub = await hubs.start(tokens={TOKEN_ALICE: "alice", TOKEN_BOB: "bob"})
    bob = await clients.connect(hub.url, token=TOKEN_BOB)
    assert bob.nick == "bob"
    await bob.subscribe("#ops")

    raw = await RawClient.connect(
        hub.url, nick=None, additional_headers={"Authorization": f"Bearer {TOKEN_ALICE}"}
    )
    assert await raw.recv() == {"type": "welcome", "nick": "alice", "max_text": hub.max_text}
    await raw.send({"type": "hello", "nick": "bob"})
    refused = await raw.recv()
    assert (refused["type"], refused["code"]) == ("error", "unauthorized")
    await raw.send(
        {"type": "publish", "channel": "#ops", "text": "hi", "client_id": "c", "from": "bob"}
    )
    await raw.recv_type("ack")
    [message] = await take(bob, 1)
    assert message.sender == "alice"
    await raw.close()


async def test_token_in_the_query_string(hubs):
    """?token= works where headers cannot be set."""
    hub = await hubs.start(tokens={TOKEN_ALICE: "alice"})
    raw = await RawClient.connect(f"{hub.url}?token={TOKEN_ALICE}", nick=None)
    assert (await raw.recv())["nick"] == "alice"
    await raw.close()


async def test_wrong_or_missing_token_is_refused(hubs, clients):
    """An unknown or missing token fails the handshake with 401; the client does not retry."""
    hub = await hubs.start(tokens={TOKEN_ALICE: "alice"})
    with pytest.raises(UnauthorizedError, match="401"):
        await clients.connect(hub.url, token="wrong-token-0123456789")
    with pytest.raises(InvalidStatus) as info:
        await connect(hub.url)
    assert info.value.response.status_code == 401
    assert b"token is required" in info.value.response.body


async def test_token_on_a_hub_without_tokens_is_refused(hub, clients):
    """A token sent to a tokenless hub is refused with a message that says what to do."""
    with pytest.raises(UnauthorizedError, match="send hello"):
        await clients.connect(hub.url, token=TOKEN_ALICE)


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        (("127.0.0.1", 5000), True),
        (("127.8.9.10", 5000), True),
        (("::1", 5000, 0, 0), True),
        (("::ffff:127.0.0.1", 5000, 0, 0), True),
        (("192.0.2.2", 5000), False),
        (("::ffff:192.0.2.2", 5000, 0, 0), False),
        (("fd00::2", 5000, 0, 0), False),
        (None, False),
    ],
)
def test_which_peers_count_as_loopback(peer, loopback):
    """Without tokens only these peers may say hello (tests stay on loopback, so no socket here)."""
    assert _is_loopback(peer) is loopback


async def test_without_tokens_hello_comes_first(hub):
    """On a tokenless hub, frames before hello are unauthorized; hello sets the sender."""
    raw = await RawClient.connect(hub.url, nick=None)
    await raw.send({"type": "subscribe", "channel": "#ops"})
    error = await raw.recv()
    assert (error["code"], error["channel"]) == ("unauthorized", "#ops")
    await raw.send({"type": "hello", "nick": "carol"})
    assert (await raw.recv())["nick"] == "carol"
    await raw.send({"type": "hello", "nick": "dave"})
    assert (await raw.recv())["code"] == "bad_frame"
    await raw.close()


# -- bad frames and limits -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{oops", "bad_frame"),
        ({"type": "publish", "channel": "#ops", "text": "t"}, "bad_frame"),
        ({"type": "shout", "text": "t"}, "unknown_type"),
        ({"type": "subscribe", "channel": "no-hash"}, "bad_channel"),
        ({"type": "publish", "channel": "#ops", "text": "x" * 3100, "client_id": "c"}, "too_large"),
    ],
)
async def test_bad_frame_gets_an_error_and_the_connection_stays(hubs, frame, code):
    """Each bad frame kind is answered with its error code; the next good frame still works."""
    hub = await hubs.start(max_frame=4096)
    raw = await RawClient.connect(hub.url)
    await raw.send(frame)
    error = await raw.recv()
    assert (error["type"], error["code"]) == ("error", code)
    await raw.send({"type": "publish", "channel": "#ops", "text": "fine", "client_id": "ok"})
    assert (await raw.recv())["type"] == "ack"
    await raw.close()


async def test_client_side_errors_surface_as_protocol_errors(hubs, clients):
    """The client checks names before sending; a frame the hub refuses raises with its code."""
    hub = await hubs.start()
    alice = await clients.connect(hub.url)
    with pytest.raises(ProtocolError) as info:
        await alice.publish("ops", "x")
    assert info.value.code == "bad_channel"
    with pytest.raises(ProtocolError) as info:
        await alice.subscribe("#ops", since="not-an-id")
    assert info.value.code == "bad_frame"


async def test_text_with_a_lone_surrogate_is_refused_before_sending(hub, clients):
    """A text that is not valid Unicode (a lone surrogate, which json.loads lets through
    from a model's reply) raises bad_frame at once; it used to make websockets drop the
    connection on every resend until the ack timeout. The connection stays usable."""
    alice = await clients.connect(hub.url)
    bob = await clients.connect(hub.url, nick="bob")
    await bob.subscribe("#ops")
    with capture_logs() as logs, pytest.raises(ProtocolError) as info:
        async with asyncio.timeout(WAIT):
            await alice.publish("#ops", "broken \ud800 text")
    assert info.value.code == "bad_frame"
    assert not [e for e in logs if e["event"] == "channels.disconnected"]
    ack = await alice.publish("#ops", "fine")
    assert [m.id for m in await take(bob, 1)] == [ack.id]


async def test_oversize_frame_closes_only_that_connection(hubs):
    """A frame over max_frame closes the sender with 1009; other connections carry on."""
    hub = await hubs.start(max_frame=4096)
    bystander = await RawClient.connect(hub.url, nick="bystander")
    big = await RawClient.connect(hub.url, nick="big")
    await big.send("x" * 5000)
    await big.until_closed()
    assert big.ws.close_code == 1009
    assert "4096" in big.ws.close_reason
    await bystander.send({"type": "publish", "channel": "#ops", "text": "ok", "client_id": "b"})
    assert (await bystander.recv())["type"] == "ack"
    await bystander.close()


async def test_rate_limit_then_flood_closes_only_that_connection(hubs):
    """Over the rate: rate_limited errors; still sending: closed with 1008. Others unaffected."""
    hub = await hubs.start(rate=1, burst=3)
    bystander = await RawClient.connect(hub.url, nick="bystander")
    flooder = await RawClient.connect(hub.url, nick="flooder")  # hello took one token
    for i in range(12):
        await flooder.send(
            {"type": "publish", "channel": "#ops", "text": "spam", "client_id": f"s{i}"}
        )
    frames = await flooder.until_closed()
    codes = [f.get("code") for f in frames if f["type"] == "error"]
    assert codes
    assert set(codes) == {"rate_limited"}
    assert frames[-1]["type"] == "error"
    assert "client_id" in frames[-1]
    assert (flooder.ws.close_code, flooder.ws.close_reason) == FLOOD_CLOSE
    assert hub.stats.flood_closed == 1
    await bystander.send({"type": "publish", "channel": "#ops", "text": "ok", "client_id": "b"})
    assert (await bystander.recv())["type"] == "ack"
    await bystander.close()


async def test_rate_limited_publish_is_retried_by_the_client(hubs, clients):
    """The client backs off on rate_limited and resends; every publish is acked in the end."""
    now = [0.0]
    hub = await hubs.start(rate=1, burst=3, clock=lambda: now[0])
    waits = []

    async def backoff(attempt: int) -> bool:
        waits.append(attempt)
        now[0] += 10.0  # the hub's clock moves on: the bucket refills
        return True

    # hello costs a token; 4 in flight: 2 pass, 2 are limited, no flood
    alice = await clients.connect(hub.url, backoff=backoff, max_in_flight=4)
    acks = await asyncio.gather(*(alice.publish("#ops", f"m{i}") for i in range(6)))
    assert len({a.id for a in acks}) == 6
    assert hub.stats.published == 6
    assert waits, "no publish was ever rate limited"


async def test_slow_subscriber_is_closed_and_resumes_with_since(hubs, clients):
    """A subscriber that stops reading is closed with 1013; with since it gets the rest once."""
    hub = await hubs.start(queue_size=4)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", hub.port))
    slow = RawClient(await connect(hub.url, sock=sock, max_queue=1, compression=None))
    await slow.send({"type": "hello", "nick": "slow"})
    await slow.send({"type": "subscribe", "channel": "#ops"})
    bystander = await clients.connect(hub.url, nick="bystander")
    await bystander.subscribe("#ops")
    pub = await clients.connect(hub.url, nick="pub")

    published = []
    text = "y" * 30_000
    while hub.stats.slow_closed == 0:  # the slow reader's buffers fill, then its outbox
        assert len(published) < 2000, "the hub never gave up on the slow subscriber"
        published.append((await pub.publish("#ops", text)).id)
    published += [(await pub.publish("#ops", f"after{i}")).id for i in range(3)]

    frames = await slow.until_closed()
    assert (slow.ws.close_code, slow.ws.close_reason) == SLOW_CLOSE
    got = [f["id"] for f in frames if f["type"] == "message"]
    assert got == published[: len(got)]

    resumed = await clients.connect(hub.url, nick="slow")
    await resumed.subscribe("#ops", since=got[-1] if got else ZERO_ID)
    rest = await take(resumed, len(published) - len(got))
    assert got + [m.id for m in rest] == published
    assert [m.id for m in await take(bystander, len(published))] == published


# -- the client's own bounds ----------------------------------------------------------------


async def test_full_inbox_resyncs_from_the_store(hub, clients):
    """With a tiny inbox and a consumer that is not reading, nothing is lost or doubled."""
    pub = await clients.connect(hub.url, nick="pub")
    sub = await clients.connect(hub.url, nick="sub", inbox_size=4)
    await sub.subscribe("#ops")
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(20)]
    assert [m.id for m in await take(sub, 20)] == ids
    last = await pub.publish("#ops", "last")
    assert [m.id for m in await take(sub, 1)] == [last.id]


async def test_retention_bound_and_the_gap_is_logged(hubs, clients):
    """Retention keeps the newest N; a since older than oldest is logged as a retention gap."""
    hub = await hubs.start(retention_count=3, prune_interval=0)
    pub = await clients.connect(hub.url, nick="pub")
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(6)]
    await pub.publish("#other", "keeps its own count")
    sub = await clients.connect(hub.url, nick="sub")
    with capture_logs() as logs:
        subscribed = await sub.subscribe("#ops", since=ids[0])
    assert subscribed.oldest == ids[3]
    assert subscribed.head == ids[5]
    assert [m.id for m in await take(sub, 3)] == ids[3:]
    gaps = [e for e in logs if e["event"] == "channels.retention_gap"]
    assert len(gaps) == 1
    assert gaps[0]["since"] == ids[0]
    assert gaps[0]["oldest"] == ids[3]


async def test_retention_by_age(hubs, clients):
    """Messages older than retention_age are pruned (here: everything, with a tiny age)."""
    hub = await hubs.start(retention_age=1e-6, prune_interval=0)
    pub = await clients.connect(hub.url, nick="pub")
    await pub.publish("#ops", "old")
    # Ids and the prune cut-off count milliseconds: within the same one nothing
    # is older than the cut-off yet, so let one pass.
    await asyncio.sleep(0.003)
    await pub.publish("#ops", "triggers a prune")
    # The writer prunes right after it acked the publish, so a subscriber that
    # comes quickly may still see "old": look again, a bounded number of times.
    for attempt in range(50):
        sub = await clients.connect(hub.url, nick=f"sub{attempt}")
        subscribed = await sub.subscribe("#ops", since=ZERO_ID)
        await sub.close()
        # Each prune drops what is older than now: at most the very last message survives.
        if subscribed.oldest is None or subscribed.oldest == subscribed.head:
            break
        await asyncio.sleep(0.02)
    assert subscribed.oldest is None or subscribed.oldest == subscribed.head


# -- closed versus broken -------------------------------------------------------------------


async def test_closed_by_you_is_not_broken(hub, clients):
    """After close(): iteration ends, publish raises ChannelClosedError."""
    alice = await clients.connect(hub.url)
    await alice.subscribe("#ops")

    async def drain() -> int:
        return len([m async for m in alice])

    reader = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await alice.close()
    async with asyncio.timeout(WAIT):
        assert await reader == 0
    with pytest.raises(ChannelClosedError):
        await alice.publish("#ops", "x")
    with pytest.raises(ChannelClosedError):
        await alice.receive()


async def test_hub_gone_for_good_is_broken(hubs, clients):
    """When the backoff gives up, waiting calls raise ChannelBrokenError naming the cause."""
    hub = await hubs.start()
    alice = await clients.connect(hub.url, backoff=give_up)
    await alice.subscribe("#ops")
    await hub.aclose()
    with pytest.raises(ChannelBrokenError) as info:
        async with asyncio.timeout(WAIT):
            await alice.receive()
    assert isinstance(info.value.__cause__, HubUnreachableError)
    with pytest.raises(ChannelBrokenError):
        await alice.publish("#ops", "x")


async def test_unreachable_hub_is_a_clear_error(clients):
    """connect(retry=False) to a port nobody listens on raises HubUnreachableError at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        client = clients.make(f"ws://127.0.0.1:{port}/")
        with pytest.raises(HubUnreachableError, match=f"127.0.0.1:{port}"):
            await client.connect(retry=False)


async def test_close_ends_a_connect_that_is_waiting_for_the_hub(clients):
    """close() while connect() retries an unreachable hub: connect raises ChannelClosedError
    (close's promise for pending calls) instead of retrying on until the backoff gives up."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        backoff = GatedBackoff()
        client = clients.make(f"ws://127.0.0.1:{port}/", backoff=backoff)
        connecting = asyncio.create_task(client.connect())
        async with asyncio.timeout(WAIT):
            await backoff.waiting.wait()  # one attempt failed; it waits to retry
        await client.close()
        backoff.gate.set()
        with pytest.raises(ChannelClosedError):
            async with asyncio.timeout(WAIT):
                await connecting
        assert backoff.calls == 1


# -- systemd --------------------------------------------------------------------------------


async def test_hub_notifies_ready_and_watchdog(tmp_path, monkeypatch):
    """Under systemd the hub sends READY=1 once listening and WATCHDOG=1 while healthy."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        monkeypatch.setenv("WATCHDOG_USEC", "20000")  # a ping every 10 ms
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        hub = Hub(tmp_path / "n.db", port=0, systemd_notify=True)
        await hub.start()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(WAIT):
                ready = await loop.sock_recv(sock, 4096)
                assert ready.startswith(b"READY=1\nSTATUS=listening on ws://127.0.0.1:")
                assert await loop.sock_recv(sock, 4096) == b"WATCHDOG=1"
        finally:
            await hub.aclose()
        async with asyncio.timeout(WAIT):
            while (state := await loop.sock_recv(sock, 4096)) == b"WATCHDOG=1":
                pass
        assert state == b"STOPPING=1"


async def test_message_frames_are_compact_json(hub):
    """The hub's frames are the table's JSON, one object per text frame."""
    raw = await RawClient.connect(hub.url, nick="raw")
    await raw.send({"type": "subscribe", "channel": "#ops"})
    assert await raw.recv() == {
        "type": "subscribed",
        "channel": "#ops",
        "head": None,
        "oldest": None,
    }
    await raw.send({"type": "publish", "channel": "#ops", "text": "ü", "client_id": "c"})
    text = await asyncio.wait_for(raw.ws.recv(), WAIT)
    assert '"text":"ü"' in text  # UTF-8 as is, no spaces
    assert json.loads(text)["type"] in ("message", "ack")
    await raw.close()
