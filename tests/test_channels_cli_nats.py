"""``atirc pub`` / ``atirc sub`` against NATS JetStream: the same commands, ``ATIRC_URL=nats://…``.

Real subprocesses of the ``atirc`` script and a real ``nats-server -js`` on
loopback; the other side is a :class:`NatsChannel` in the test's loop.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from channels.frames import Status
from channels.ids import ZERO_ID, is_id
from channels.nats import NatsChannel
from channels.protocol import parse_server_frame
from tests.fakes.nats_server import NatsServer
from tests.test_channels_cli import ATIRC, _atirc, _env

WAIT = 10.0


@pytest.fixture
async def nats_url(tmp_path: Path) -> AsyncIterator[str]:
    async with NatsServer(tmp_path / "nats") as server:
        yield server.url


@pytest.fixture
async def channels() -> AsyncIterator[list[NatsChannel]]:
    made: list[NatsChannel] = []
    yield made
    for channel in made:
        await channel.close()


async def _client(url: str, nick: str, made: list[NatsChannel]) -> NatsChannel:
    """A subscriber of #ops; its long texts split at 3 KiB."""
    channel = NatsChannel(url, nick=nick, ack_timeout=WAIT, max_text=4096 - 1024)
    made.append(channel)
    await channel.subscribe("#ops")
    return channel


async def test_pub_on_nats_prints_the_id_and_is_delivered(nats_url, channels) -> None:
    """``atirc pub`` stores the message in the channel's stream, from ATIRC_NICK."""
    watcher = await _client(nats_url, "watcher", channels)
    code, out, err = await _atirc("pub", "#ops", "hello over NATS", env=_env(nats_url))
    assert code == 0, err
    async with asyncio.timeout(WAIT):
        message = await watcher.receive()
    assert out.strip() == message.id
    assert is_id(message.id)
    assert (message.sender, message.text, message.thread) == ("cli", "hello over NATS", message.id)


async def test_pub_on_nats_into_a_thread_of_another_channel_is_refused(nats_url, channels) -> None:
    """Issue 26: on NATS the mapping refuses a thread of another channel's stream
    (bad_thread) before anything is stored; atirc says so in one line and exits 1."""
    watcher = await _client(nats_url, "watcher", channels)
    root = await watcher.publish("#ops", "a thread of #ops")
    code, out, err = await _atirc("pub", "#pub", "in?", "--thread", root.id, env=_env(nats_url))
    assert (code, out) == (1, "")
    assert err.startswith(f"atirc: refused: thread {root.id} is not a thread of #pub;")
    reader = NatsChannel(nats_url, nick="reader", ack_timeout=WAIT)
    channels.append(reader)
    subscribed = await reader.subscribe("#pub", since=ZERO_ID)
    assert subscribed.head is None  # nothing was stored in #pub


async def test_a_raw_nats_publish_into_another_channels_thread_starts_its_own(
    nats_url, channels
) -> None:
    """Issue 26: a client that skips the check (raw NATS) stores a #pub message whose
    Atirc-Thread is an #ops id; every reader (the daemon too) reads it as the root of its
    own #pub thread, so it joins nothing of #ops."""
    ops = await _client(nats_url, "alice", channels)
    root = await ops.publish("#ops", "a thread of #ops")
    reader = NatsChannel(nats_url, nick="reader", ack_timeout=WAIT)
    channels.append(reader)
    await reader.subscribe("#pub")
    await reader.publish("#pub", "creates the #pub stream")
    raw = await nats.connect(nats_url)
    try:
        headers = {"Atirc-From": "eve", "Atirc-Thread": root.id, "Nats-Msg-Id": "eve:1"}
        await raw.jetstream().publish(f"atirc.pub.{root.id}", b"smuggled", headers=headers)
    finally:
        await raw.close()
    async with asyncio.timeout(WAIT):
        first, smuggled = await reader.receive(), await reader.receive()
    assert first.text == "creates the #pub stream"
    assert (smuggled.channel, smuggled.text, smuggled.sender) == ("#pub", "smuggled", "eve")
    assert smuggled.thread == smuggled.id != root.id


async def test_pub_wait_on_nats_prints_the_split_reply(nats_url, channels) -> None:
    """``--wait`` gets the responder's reply in the thread, its chunks joined."""
    responder = await _client(nats_url, "asyncai", channels)
    reply = "\n".join(f"pod-{i} Running" for i in range(400))  # several chunks' worth

    async def respond() -> None:
        async for message in responder:
            if message.sender != "asyncai":
                await responder.status("#ops", "thinking", thread=message.thread)
                await responder.publish("#ops", reply, thread=message.thread, reply_to=message.id)
                return

    async with asyncio.TaskGroup() as tg:
        answering = tg.create_task(respond())
        code, out, err = await _atirc("pub", "#ops", "list pods", "--wait", "8", env=_env(nats_url))
    assert answering.done()
    assert code == 0, err
    first, rest = out.split("\n", 1)
    assert is_id(first)
    assert rest == reply + "\n"


async def test_sub_on_nats_replays_since_and_follows(nats_url, channels) -> None:
    """``atirc sub --since ZERO_ID --json --status``: the stored messages, then live ones and
    statuses; SIGTERM ends it with 0."""
    pub = await _client(nats_url, "pub", channels)
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(3)]
    proc = await asyncio.create_subprocess_exec(
        str(ATIRC),
        "sub",
        "#ops",
        "--since",
        ZERO_ID,
        "--json",
        "--status",
        env=_env(nats_url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(WAIT):
            lines = [await proc.stdout.readline() for _ in range(3)]
            live = await pub.publish("#ops", "live")
            lines.append(await proc.stdout.readline())
            await pub.status("#ops", "working on it", thread=live.thread)
            lines.append(await proc.stdout.readline())
        frames = [parse_server_frame(line.decode()) for line in lines]
        assert [getattr(f, "id", None) for f in frames[:4]] == [*ids, live.id]
        assert isinstance(frames[4], Status)
        assert (frames[4].sender, frames[4].text) == ("pub", "working on it")
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_an_unreachable_nats_server_is_a_clear_error() -> None:
    """No server at the URL: exit 1 and one line naming it, at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{sock.getsockname()[1]}"
        code, out, err = await _atirc("pub", "#ops", "hello", env=_env(url))
    assert code == 1
    assert out == ""
    assert f"atirc: cannot reach the NATS server at {url}" in err
    assert "Traceback" not in err
