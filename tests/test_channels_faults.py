"""Issue 15: the channels faults an attack campaign found, each pinned by a test that fails
without its fix.

- item 5: a client whose supervisor task dies must say so (``receive()``
  raises :class:`ChannelBrokenError`, ``broken`` turns true) instead of
  waiting forever while the daemon keeps pinging systemd;
- item 8a: every subscribe waiter ends (subscribed, or a clear error), however
  subscribes and unsubscribes of one channel interleave;
- item 11: a deeply nested frame is ``bad_frame`` for the hub (the
  connection stays up) and a bad frame for the client (its reader survives);
  a lone surrogate in a refused frame's channel is not echoed back;
- item 17: a tokens file others may read stops the hub (tests/test_channels_cli.py
  runs it through ``atirc hub``).

Real hubs on 127.0.0.1 port 0 and real connections; the fake hub below is a
websockets server on loopback that plays a scripted conversation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.server import ServerConnection, serve

from channels.client.pending import Pending
from channels.client.protocol import ClientProtocol, SubscriptionConfirmed
from channels.errors import ChannelBrokenError, ChannelClosedError, ChannelConfigError
from channels.frames import ErrorCode, Message, Subscribed, Welcome
from channels.ids import ZERO_ID, id_for_time
from channels.protocol import encode
from channels.tokens import load_tokens
from tests.fakes.channels_helpers import WAIT, Clients, GatedBackoff, Hubs, RawClient, take

IDS = [id_for_time(1_700_000_000_000 + n) for n in range(4)]
DEEP = "[" * 30_000 + "]" * 30_000  # 60 KB: inside the frame limit, far past the recursion limit


@pytest.fixture
async def hubs(tmp_path: Path) -> AsyncIterator[Hubs]:
    """Hubs over one database file in tmp_path, closed after the test."""
    made = Hubs(tmp_path / "hub.db")
    yield made
    await made.aclose()


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """WebSocketChannels closed after the test."""
    made = Clients()
    yield made
    await made.aclose()


def _message(index: int, channel: str = "#ops") -> Message:
    return Message(
        channel=channel,
        id=IDS[index],
        thread=IDS[index],
        reply_to=None,
        sender="bob",
        text=f"m{index}",
        ts="2026-11-29T18:00:00.000Z",
    )


# -- item 5: a dead supervisor breaks the channel ---------------------------------------------


async def test_receive_raises_broken_when_the_supervisor_dies_of_an_unexpected_error(
    hubs: Hubs, clients: Clients
) -> None:
    """A bug in the reconnect path (here: the backoff raising) kills the supervisor task:
    a waiting ``receive()`` raises ChannelBrokenError with the bug as its cause, and
    ``broken`` turns true, instead of waiting forever while the process looks alive."""

    async def buggy_backoff(attempt: int) -> bool:
        raise RuntimeError("bug in the backoff")

    hub = await hubs.start()
    client = await clients.connect(hub.url, backoff=buggy_backoff)
    receiving = asyncio.create_task(client.receive())
    await hub.aclose()  # the reconnect attempt is refused, and the backoff raises
    async with asyncio.timeout(WAIT):  # a bound for the test run, not a timed assert
        with pytest.raises(ChannelBrokenError) as info:
            await receiving
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "bug in the backoff" in str(info.value)
    assert client.broken
    with pytest.raises(ChannelBrokenError):
        await client.publish("#ops", "anyone?")


async def test_a_frame_handler_that_raises_breaks_the_channel_and_ends_iteration(
    hubs: Hubs, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure injected into the reader (the protocol's frame handler raising) ends
    ``async for`` with ChannelBrokenError, not StopAsyncIteration and not a hang, and
    the channel reports itself broken; closing it afterwards is quiet."""
    hub = await hubs.start()
    bob = await clients.connect(hub.url, nick="bob")
    alice = await clients.connect(hub.url, nick="alice")
    await alice.subscribe("#ops")

    def explode(raw: str | bytes) -> list[object]:
        raise ValueError("injected fault")

    monkeypatch.setattr(alice._protocol, "receive_frame", explode)  # the injected fault
    await bob.publish("#ops", "boom")

    async def iterate() -> None:
        async with asyncio.timeout(WAIT):  # a bound for the test run, not a timed assert
            async for _ in alice:
                raise AssertionError("no message can get through the broken reader")

    with pytest.raises(ChannelBrokenError) as info:
        await iterate()
    assert isinstance(info.value.__cause__, ValueError)
    assert alice.broken
    await alice.close()
    assert not alice.broken  # closed by its owner: no longer a fault to report


async def test_a_healthy_channel_is_not_broken_while_it_reconnects(
    hubs: Hubs, clients: Clients
) -> None:
    """``broken`` stays false across a hub restart the client rides out: only a channel
    that cannot recover reports itself broken."""
    hub = await hubs.start()
    port = hub.port
    backoff = GatedBackoff()
    sub = await clients.connect(hub.url, nick="sub", backoff=backoff)
    await sub.subscribe("#ops")
    await hub.aclose()
    async with asyncio.timeout(WAIT):
        await backoff.waiting.wait()  # it noticed, failed once, and waits to retry
    assert not sub.broken
    hub = await hubs.start(port=port)
    backoff.gate.set()
    pub = await clients.connect(hub.url, nick="pub")
    await pub.publish("#ops", "after the restart")
    [message] = await take(sub, 1)
    assert message.text == "after the restart"
    assert not sub.broken


# -- item 8a: no orphaned subscribe waiter ------------------------------------------------------


def test_resubscribing_before_the_answer_confirms_once_with_the_last_answer() -> None:
    """Two subscribes of one channel before the hub answers: the first ``subscribed``
    confirms nothing and its replay is dropped; the answer to the last one confirms."""
    proto = ClientProtocol("ws://127.0.0.1:1/", hello_nick="alice", inbox_size=10)
    proto.connection_made(Welcome(nick="alice"))
    assert proto.subscribe("#ops", None) is not None
    assert proto.subscribe("#ops", IDS[0]) is not None
    first = encode(Subscribed(channel="#ops", head=IDS[2], oldest=IDS[0]))
    assert proto.receive_frame(first) == []
    assert proto.receive_frame(encode(_message(2))) == []  # the replaced subscription's
    last = Subscribed(channel="#ops", head=IDS[2], oldest=IDS[0])
    assert proto.receive_frame(encode(last)) == [SubscriptionConfirmed(last)]
    [received] = proto.receive_frame(encode(_message(1)))
    assert proto.next_message() == _message(1)
    assert received is not None


def test_subscribe_unsubscribe_subscribe_waits_for_the_answer_to_the_last() -> None:
    """subscribe, unsubscribe, subscribe before any answer: the hub answers both
    subscribes in order, and only the second answer confirms the live subscription."""
    proto = ClientProtocol("ws://127.0.0.1:1/", hello_nick="alice", inbox_size=10)
    proto.connection_made(Welcome(nick="alice"))
    proto.subscribe("#ops", None)
    assert proto.unsubscribe("#ops") is not None
    proto.subscribe("#ops", ZERO_ID)
    answer = encode(Subscribed(channel="#ops", head=None, oldest=None))
    assert proto.receive_frame(answer) == []
    assert len(proto.receive_frame(answer)) == 1


async def test_every_waiter_of_one_channel_gets_its_subscribed() -> None:
    """Pending keeps every subscribe waiter of a channel: one confirmation answers all."""
    pending = Pending()
    first, second = pending.subscribe("#ops"), pending.subscribe("#ops")
    subscribed = Subscribed(channel="#ops", head=None, oldest=None)
    pending.settle(SubscriptionConfirmed(subscribed))
    assert first.done()
    assert (first.result(), second.result()) == (subscribed, subscribed)


async def test_unsubscribe_fails_a_waiting_subscribe_with_a_clear_error() -> None:
    """An unsubscribe ends a waiting subscribe with ChannelClosedError, not a cancellation
    that would look like the caller's own task being cancelled."""
    pending = Pending()
    waiter = pending.subscribe("#ops")
    pending.unsubscribe("#ops")
    assert not waiter.cancelled()
    with pytest.raises(ChannelClosedError, match="#ops was unsubscribed"):
        await waiter


async def test_concurrent_subscribes_of_one_channel_all_return(
    hubs: Hubs, clients: Clients
) -> None:
    """Two subscribes of one channel at once on a real hub both return ``subscribed``
    (the first is not orphaned until its timeout), and messages arrive once."""
    hub = await hubs.start()
    alice = await clients.connect(hub.url, nick="alice")
    bob = await clients.connect(hub.url, nick="bob")
    async with asyncio.timeout(WAIT):  # a bound for the test run, not a timed assert
        first, second = await asyncio.gather(
            alice.subscribe("#ops"), alice.subscribe("#ops", since=ZERO_ID)
        )
    assert first.channel == second.channel == "#ops"
    ack = await bob.publish("#ops", "once")
    [message] = await take(alice, 1)
    assert message.id == ack.id


async def test_unsubscribe_during_subscribe_ends_it_with_a_clear_error(
    hubs: Hubs, clients: Clients
) -> None:
    """An unsubscribe while a subscribe of the same channel waits for the hub ends that
    subscribe with ChannelClosedError at once; subscribing again afterwards works."""
    hub = await hubs.start()
    alice = await clients.connect(hub.url, nick="alice")
    bob = await clients.connect(hub.url, nick="bob")
    async with asyncio.timeout(WAIT):  # a bound for the test run, not a timed assert
        outcome, _ = await asyncio.gather(
            alice.subscribe("#ops"), alice.unsubscribe("#ops"), return_exceptions=True
        )
    assert isinstance(outcome, ChannelClosedError)
    await alice.subscribe("#ops")
    ack = await bob.publish("#ops", "after")
    [message] = await take(alice, 1)
    assert message.id == ack.id


# -- item 11: deep nesting, lone surrogates ------------------------------------------------------


async def test_hub_answers_bad_frame_to_a_deeply_nested_frame_and_keeps_the_connection(
    hubs: Hubs,
) -> None:
    """60 KB of ``[[[…]]]`` gets a ``bad_frame`` error; the connection stays up and the
    next frame is served (it used to close with 1011 and log a RecursionError)."""
    hub = await hubs.start()
    raw = await RawClient.connect(hub.url)
    with capture_logs() as logs:
        await raw.send(DEEP)
        error = await raw.recv()
        await raw.send({"type": "subscribe", "channel": "#ops"})
        subscribed = await raw.recv()
    assert (error["type"], error["code"]) == ("error", ErrorCode.BAD_FRAME)
    assert subscribed["type"] == "subscribed"
    assert raw.ws.close_code is None
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == []
    await raw.close()


async def test_hub_never_echoes_a_lone_surrogate_channel(hubs: Hubs) -> None:
    """A subscribe whose channel holds a lone surrogate (valid JSON, invalid UTF-8) gets
    ``bad_channel`` without the channel echoed; the connection stays up."""
    hub = await hubs.start()
    raw = await RawClient.connect(hub.url)
    await raw.send('{"type":"subscribe","channel":"#a\\ud800"}')  # ASCII on the wire
    error = await raw.recv()
    assert (error["type"], error["code"]) == ("error", ErrorCode.BAD_CHANNEL)
    assert "channel" not in error
    await raw.send({"type": "subscribe", "channel": "#ops"})
    assert (await raw.recv())["type"] == "subscribed"
    await raw.close()


async def _scripted_hub(
    script: Callable[[ServerConnection], Awaitable[None]],
) -> AsyncIterator[str]:
    async with serve(script, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/"


async def test_client_survives_a_deeply_nested_frame_from_the_hub(clients: Clients) -> None:
    """A hub that sends 60 KB of ``[[[…]]]`` does not kill the client's reader: the frame
    is logged and ignored, the subscription and the next message still come through."""

    async def script(ws: ServerConnection) -> None:
        assert json.loads(await ws.recv())["type"] == "hello"
        await ws.send(encode(Welcome(nick="alice")))
        assert json.loads(await ws.recv())["type"] == "subscribe"
        await ws.send(DEEP)
        await ws.send(encode(Subscribed(channel="#ops", head=None, oldest=None)))
        await ws.send(encode(_message(1)))
        await ws.wait_closed()

    async for url in _scripted_hub(script):
        client = await clients.connect(url)
        with capture_logs() as logs:
            async with asyncio.timeout(WAIT):  # a bound for the test run, not a timed assert
                await client.subscribe("#ops")
                message = await client.receive()
        assert message == _message(1)
        assert not client.broken
        assert "channels.bad_frame_from_hub" in [e["event"] for e in logs]
        await client.close()


# -- item 17: the tokens file is private -----------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660, 0o610], ids=oct)
def test_load_tokens_refuses_a_file_others_may_touch(tmp_path: Path, mode: int) -> None:
    """A tokens file with any group or other permission is refused, in one line that
    names the file and the fix."""
    path = tmp_path / "tokens"
    path.write_text("0123456789abcdef0123 alice\n")
    path.chmod(mode)
    with pytest.raises(ChannelConfigError) as info:
        load_tokens(path)
    assert str(info.value) == (
        f"tokens file {path} is open to other users (mode {mode:04o}): run chmod 600 {path}"
    )


@pytest.mark.parametrize("mode", [0o600, 0o400], ids=oct)
def test_load_tokens_accepts_an_owner_only_file(tmp_path: Path, mode: int) -> None:
    """Mode 0600, or stricter, is accepted."""
    path = tmp_path / "tokens"
    path.write_text("0123456789abcdef0123 alice\n")
    path.chmod(mode)
    assert load_tokens(path) == {"0123456789abcdef0123": "alice"}


def test_load_tokens_refuses_a_file_that_is_not_utf8_in_one_line(tmp_path: Path) -> None:
    """A tokens file that is not UTF-8 is a ChannelConfigError, not a UnicodeDecodeError."""
    path = tmp_path / "tokens"
    path.write_bytes(b"\xff\xfe not text\n")
    path.chmod(0o600)
    with pytest.raises(ChannelConfigError, match="cannot read tokens file"):
        load_tokens(path)
