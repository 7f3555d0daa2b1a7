"""The ``Channel`` contract, run against both implementations: the hub and NATS JetStream.

``hub``: :class:`WebSocketChannel` clients of a real :class:`Hub` on 127.0.0.1.
``nats``: :class:`NatsChannel` clients of a real ``nats-server -js`` on 127.0.0.1
(tests/fakes/nats_server.py). Each test gets a fresh server; both are set to
the same text limit, so a split happens at the same length.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from structlog.testing import capture_logs

from channels.client import Channel, WebSocketChannel, exponential_backoff
from channels.errors import (
    ChannelBrokenError,
    ChannelClosedError,
    ProtocolError,
    UnauthorizedError,
)
from channels.frames import Message, Status
from channels.hub import Hub
from channels.ids import ZERO_ID, is_id
from channels.nats import NatsChannel
from channels.protocol import max_text_for
from tests.fakes.channels_helpers import give_up
from tests.fakes.nats_server import NatsServer

WAIT = 10.0  # seconds: every wait here is bounded by this
MAX_FRAME = 4096
MAX_TEXT = max_text_for(MAX_FRAME)


class Transport:
    """One server of one kind and its clients; ``restart`` and ``stop`` the server."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.clients: list[WebSocketChannel | NatsChannel] = []
        self.hub: Hub | None = None
        self.nats: NatsServer | None = None
        self.port = 0

    async def start(self) -> None:
        if self.kind == "hub":
            self.hub = Hub(self.tmp / "hub.db", port=self.port, max_frame=MAX_FRAME, rate=10_000)
            await self.hub.start()
            self.port = self.hub.port
        else:
            if self.nats is None:
                self.nats = NatsServer(self.tmp / "nats")
            await self.nats.start()

    @property
    def url(self) -> str:
        if self.kind == "hub":
            return f"ws://127.0.0.1:{self.port}/"
        assert self.nats is not None
        return self.nats.url

    async def stop(self) -> None:
        if self.hub is not None:
            await self.hub.aclose()
        if self.nats is not None:
            await self.nats.stop()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def client(
        self, nick: str, *, broken_soon: bool = False, **kwargs: Any
    ) -> WebSocketChannel | NatsChannel:
        """A connected client; ``broken_soon``: it gives up at once when the server goes."""
        client: WebSocketChannel | NatsChannel
        if self.kind == "hub":
            # retrying every 50-100 ms while a hub restarts
            backoff = give_up if broken_soon else exponential_backoff(initial=0.05, maximum=0.1)
            client = WebSocketChannel(
                self.url, nick=nick, ack_timeout=WAIT, backoff=backoff, **kwargs
            )
        else:
            attempts = 0 if broken_soon else None
            client = NatsChannel(
                self.url,
                nick=nick,
                ack_timeout=WAIT,
                max_text=MAX_TEXT,
                heartbeat=0.5,
                reconnect_wait=0.1,
                reconnect_attempts=attempts,
                **kwargs,
            )
        self.clients.append(client)
        await client.connect()
        return client

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()
        await self.stop()


@pytest.fixture(params=["hub", "nats"])
async def transport(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Transport]:
    t = Transport(request.param, tmp_path)
    await t.start()
    try:
        yield t
    finally:
        await t.aclose()


async def take(channel: Channel, count: int) -> list[Message]:
    """The next ``count`` messages, within the test bound."""
    async with asyncio.timeout(WAIT):
        return [await channel.receive() for _ in range(count)]


async def test_a_publish_is_acked_with_its_id_and_delivered_as_sent(transport: Transport) -> None:
    """The ack names the stored message; a subscriber gets it with the publisher's nick."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    subscribed = await bob.subscribe("#ops")
    assert subscribed.channel == "#ops"
    ack = await alice.publish("#ops", "hello")
    assert is_id(ack.id)
    assert ack.thread == ack.id
    assert ack.ids == (ack.id,)
    [message] = await take(bob, 1)
    assert (message.channel, message.id, message.thread, message.reply_to) == (
        "#ops",
        ack.id,
        ack.id,
        None,
    )
    assert (message.sender, message.text, message.more) == ("alice", "hello", False)
    assert message.ts.endswith("Z")
    assert alice.nick == "alice"


async def test_the_same_client_id_is_stored_once(transport: Transport) -> None:
    """Publishing again with a client_id gets the first ack; a replay shows one message."""
    alice = await transport.client("alice")
    first = await alice.publish("#ops", "once", client_id="reply-to-42")
    again = await alice.publish("#ops", "once", client_id="reply-to-42")
    assert again == first
    other = await alice.publish("#ops", "twice", client_id="reply-to-43")
    bob = await transport.client("bob")
    await bob.subscribe("#ops", since=ZERO_ID)
    assert [m.id for m in await take(bob, 2)] == [first.id, other.id]


async def test_replies_carry_the_thread_and_what_they_reply_to(transport: Transport) -> None:
    """A reply's ack and message name the root as thread; ``reply_to`` is kept."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await bob.subscribe("#ops")
    root = await alice.publish("#ops", "question")
    reply = await bob.publish("#ops", "answer", thread=root.thread, reply_to=root.id)
    assert reply.thread == root.id
    assert reply.id > root.id
    messages = await take(bob, 2)
    assert [(m.id, m.thread, m.reply_to, m.sender) for m in messages] == [
        (root.id, root.id, None, "alice"),
        (reply.id, root.id, root.id, "bob"),
    ]


async def test_since_replays_what_came_after_and_then_goes_live(transport: Transport) -> None:
    """``since`` an id: the messages after it in order, then live; ZERO_ID: all; none: new."""
    alice = await transport.client("alice")
    acks = [await alice.publish("#ops", f"m{i}") for i in range(3)]
    bob = await transport.client("bob")
    subscribed = await bob.subscribe("#ops", since=acks[0].id)
    assert (subscribed.head, subscribed.oldest) == (acks[2].id, acks[0].id)
    assert [m.text for m in await take(bob, 2)] == ["m1", "m2"]
    await alice.publish("#ops", "live")
    assert [m.text for m in await take(bob, 1)] == ["live"]
    carol = await transport.client("carol")
    await carol.subscribe("#ops", since=ZERO_ID)
    assert [m.text for m in await take(carol, 4)] == ["m0", "m1", "m2", "live"]
    dave = await transport.client("dave")
    subscribed = await dave.subscribe("#ops")
    assert subscribed.head is not None
    await alice.publish("#ops", "after dave")
    assert [m.text for m in await take(dave, 1)] == ["after dave"]


async def test_live_messages_come_in_publish_order(transport: Transport) -> None:
    """Many messages from two publishers: each publisher's in its order, ids increasing."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    watcher = await transport.client("watcher")
    await watcher.subscribe("#ops")
    await asyncio.gather(
        *(alice.publish("#ops", f"a{i}") for i in range(20)),
    )
    for i in range(20):
        await bob.publish("#ops", f"b{i}")
    messages = await take(watcher, 40)
    ids = [m.id for m in messages]
    assert ids == sorted(ids)
    assert len(set(ids)) == 40
    assert [m.text for m in messages if m.sender == "bob"] == [f"b{i}" for i in range(20)]


async def test_a_long_text_is_split_into_chunks_of_one_thread(transport: Transport) -> None:
    """Over the text limit: several messages, ``more`` on all but the last, one thread."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await bob.subscribe("#ops")
    text = "".join(f"line {i}: {'x' * 60}\n" for i in range(3 * MAX_TEXT // 60))
    ack = await alice.publish("#ops", text)
    assert len(ack.ids) >= 3
    messages = await take(bob, len(ack.ids))
    assert [m.id for m in messages] == list(ack.ids)
    assert {m.thread for m in messages} == {ack.thread} == {ack.id}
    assert [m.more for m in messages] == [True] * (len(messages) - 1) + [False]
    assert "".join(m.text for m in messages) == text


async def test_statuses_reach_subscribers_and_are_never_stored(transport: Transport) -> None:
    """A status goes to who is subscribed now; a replay afterwards has only messages."""
    statuses: list[Status] = []
    arrived = asyncio.Event()

    def on_status(status: Status) -> None:
        statuses.append(status)
        arrived.set()

    alice = await transport.client("alice")
    bob = await transport.client("bob", on_status=on_status)
    await bob.subscribe("#ops")
    root = await alice.publish("#ops", "question")
    await take(bob, 1)
    await alice.status("#ops", "thinking", thread=root.thread)
    async with asyncio.timeout(WAIT):
        await arrived.wait()
    [status] = statuses
    assert (status.channel, status.thread, status.sender, status.text) == (
        "#ops",
        root.thread,
        "alice",
        "thinking",
    )
    await alice.publish("#ops", "answer", thread=root.thread)
    carol = await transport.client("carol")
    await carol.subscribe("#ops", since=ZERO_ID)
    assert [m.text for m in await take(carol, 2)] == ["question", "answer"]
    with pytest.raises(ProtocolError):
        await alice.status("#ops", "two\nlines", thread=root.thread)


async def test_an_unsubscribed_channel_delivers_nothing_more(transport: Transport) -> None:
    """After unsubscribe, the channel's new messages do not come; others still do."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await bob.subscribe("#a")
    await bob.subscribe("#b")
    await bob.unsubscribe("#a")
    await alice.publish("#a", "not for bob")
    await alice.publish("#b", "for bob")
    [message] = await take(bob, 1)
    assert (message.channel, message.text) == ("#b", "for bob")


async def test_close_is_idempotent_and_ends_iteration(transport: Transport) -> None:
    """Closed: iteration ends, receive and publish raise ChannelClosedError, never broken."""
    bob = await transport.client("bob")
    await bob.subscribe("#ops")
    ended = asyncio.create_task(_drain(bob))
    await bob.close()
    await bob.close()
    async with asyncio.timeout(WAIT):
        assert await ended == []
    with pytest.raises(ChannelClosedError):
        await bob.receive()
    with pytest.raises(ChannelClosedError):
        await bob.publish("#ops", "late")
    assert not bob.broken


async def _drain(channel: Channel) -> list[Message]:
    return [message async for message in channel]


async def test_bad_requests_are_refused_clearly(transport: Transport) -> None:
    """Bad channel names, empty texts and non-ids fail with ProtocolError before any I/O."""
    alice = await transport.client("alice")
    with pytest.raises(ProtocolError, match="invalid channel"):
        await alice.publish("ops", "no #")
    with pytest.raises(ProtocolError, match="empty"):
        await alice.publish("#ops", "")
    with pytest.raises(ProtocolError, match="not a message id"):
        await alice.subscribe("#ops", since="42")
    with pytest.raises(ProtocolError, match="not a message id"):
        await alice.publish("#ops", "x", thread="nope")
    assert not alice.broken


async def test_a_server_restart_loses_nothing_and_repeats_nothing(transport: Transport) -> None:
    """The server goes away and comes back: publishing and subscriptions go on, no gap,
    no duplicate."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await bob.subscribe("#ops")
    await alice.publish("#ops", "before")
    assert [m.text for m in await take(bob, 1)] == ["before"]
    await transport.restart()
    for i in range(3):
        await alice.publish("#ops", f"after {i}")
    assert [m.text for m in await take(bob, 3)] == ["after 0", "after 1", "after 2"]
    assert not alice.broken
    assert not bob.broken


async def test_a_server_gone_for_good_breaks_the_channel(transport: Transport) -> None:
    """When reconnecting gives up, ``broken`` turns true and receive raises ChannelBrokenError."""
    bob = await transport.client("bob", broken_soon=True)
    await bob.subscribe("#ops")
    assert not bob.broken
    await transport.stop()
    with pytest.raises(ChannelBrokenError):
        async with asyncio.timeout(WAIT):
            await bob.receive()
    assert bob.broken


async def test_a_full_inbox_loses_nothing(transport: Transport) -> None:
    """More messages than the inbox holds, taken only afterwards: all of them, in order, once."""
    alice = await transport.client("alice")
    bob = await transport.client("bob", inbox_size=4)
    await bob.subscribe("#ops")
    acks = [await alice.publish("#ops", f"m{i}") for i in range(30)]
    messages = await take(bob, 30)
    assert [m.id for m in messages] == [a.id for a in acks]
    assert bob.pending == 0


@pytest.mark.parametrize(
    ("server_args", "token"),
    [
        (("--auth", "s3cret-token-0123"), "s3cret-token-0123"),
        (("--user", "alice", "--pass", "pw-0123"), "alice:pw-0123"),
    ],
)
async def test_nats_credentials_from_the_token_setting(
    tmp_path: Path, server_args: tuple[str, ...], token: str
) -> None:
    """A NATS server that wants a token or a user: the right ``token`` connects (the user is
    the nick when none is given), a wrong one is UnauthorizedError, not retried."""
    async with NatsServer(tmp_path / "nats", args=server_args) as server:
        nick = None if ":" in token else "bob"
        good = NatsChannel(server.url, token=token, nick=nick, ack_timeout=WAIT)
        try:
            await good.subscribe("#ops")
            ack = await good.publish("#ops", "with credentials")
            [message] = await take(good, 1)
            assert message.id == ack.id
            assert message.sender == (token.split(":")[0] if ":" in token else "bob")
        finally:
            await good.close()
        bad = NatsChannel(server.url, token=token + "x", nick="bob", ack_timeout=WAIT)
        with pytest.raises(UnauthorizedError, match="refused us"):
            await bad.connect(retry=False)
        await bad.close()


async def test_concurrent_subscribes_of_one_channel_deliver_each_message_once(
    transport: Transport,
) -> None:
    """Subscribing to one channel twice at once: one subscription, no duplicates."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await asyncio.gather(bob.subscribe("#ops"), bob.subscribe("#ops"))
    acks = [await alice.publish("#ops", f"m{i}") for i in range(3)]
    await bob.subscribe("#other")
    marker = await alice.publish("#other", "marker")
    messages = await take(bob, 4)
    assert [m.id for m in messages] == [*(a.id for a in acks), marker.id]


async def test_a_publish_while_the_server_is_down_lands_once(transport: Transport) -> None:
    """A publish made while the server is away waits, is stored once it is back, and is
    delivered exactly once."""
    alice = await transport.client("alice")
    bob = await transport.client("bob")
    await bob.subscribe("#ops")
    await alice.publish("#ops", "before")
    await take(bob, 1)
    await transport.stop()
    publishing = asyncio.create_task(alice.publish("#ops", "while down", client_id="down-1"))
    await asyncio.sleep(0.2)  # let it try (and fail) at least once; no assert on timing
    await transport.start()
    async with asyncio.timeout(WAIT):
        ack = await publishing
    after = await alice.publish("#ops", "after")
    messages = await take(bob, 2)
    assert [(m.id, m.text) for m in messages] == [(ack.id, "while down"), (after.id, "after")]


async def test_a_nats_stream_keeps_what_the_hubs_retention_options_say(tmp_path: Path) -> None:
    """A stream NatsChannel creates has the hub's count and age limits (and a duplicate
    window within the age); a ``since`` older than what it kept is logged as a gap."""
    async with NatsServer(tmp_path / "nats") as server:
        alice = NatsChannel(server.url, nick="alice", retention_count=3, retention_age=3600.0)
        try:
            acks = [await alice.publish("#ops", f"m{i}") for i in range(5)]
            nc = await nats.connect(server.url)
            try:
                info = await nc.jetstream().stream_info("ATIRC_ops")
            finally:
                await nc.close()
            assert info.config.max_msgs == 3
            assert info.config.max_age == 3600.0
            assert info.config.duplicate_window == 3600.0
            assert info.config.subjects == ["atirc.ops.>"]
            with capture_logs() as logs:
                subscribed = await alice.subscribe("#ops", since=acks[0].id)
            assert subscribed.oldest == acks[2].id
            assert [e["event"] for e in logs if e["event"] == "channels.retention_gap"] == [
                "channels.retention_gap"
            ]
            assert [m.text for m in await take(alice, 3)] == ["m2", "m3", "m4"]
        finally:
            await alice.close()
