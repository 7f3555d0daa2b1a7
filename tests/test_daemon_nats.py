"""The daemon on NATS JetStream (``[channels] url = "nats://…"``), in this process.

A real ``nats-server -js`` and a real hub on loopback; only the model is
scripted (tests/fakes/fake_openai.py) and the tools are in memory. Checks that
the daemon picks its transport by URL, answers in the prompt's thread, and
that switching one database between a hub and NATS neither loses a prompt
nor answers one twice (the cursors belong to one id space).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.client import Channel, Message
from channels.hub import Hub
from channels.nats import NatsChannel
from channels.transport import open_channel
from daemon.app import Daemon
from daemon.config import load_config
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI, Reply
from tests.fakes.nats_server import NatsServer

WAIT = 20.0  # bound on every wait for the daemon


def _config(tmp: Path, url: str, model_url: str) -> Path:
    path = tmp / "asyncai.toml"
    path.write_text(f"""
[model]
base_url = "{model_url}"
model = "fake-model"
api_key = "test-key"
retries = 0

[channels]
url = "{url}"
nick = "asyncai"
channels = ["#ops"]

[runtime]
shutdown_grace = 1

[sessions]
db = "{tmp / "asyncai.db"}"
""")
    return path


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as model:
        yield model


async def _run_daemon(tmp: Path, url: str, fake: FakeOpenAI) -> Daemon:
    config = load_config(_config(tmp, url, fake.base_url), environ={})
    daemon = Daemon(config, executor=FakeToolExecutor(), env={})
    await daemon.start()
    return daemon


async def _reply(channel: Channel, thread: str) -> Message:
    """The daemon's next message in ``thread``."""
    async with asyncio.timeout(WAIT):
        async for message in channel:
            if message.sender == "asyncai" and message.thread == thread:
                return message
    raise AssertionError("the channel closed")


async def _ask(channel: Channel, text: str) -> tuple[str, Message]:
    ack = await channel.publish("#ops", text)
    return ack.id, await _reply(channel, ack.thread)


async def test_the_daemon_answers_on_nats_in_the_prompts_thread(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """``nats://`` in ``[channels] url``: a NatsChannel, the reply in the prompt's thread,
    and a restarted daemon answers the next prompt, not the old one again."""
    async with NatsServer(tmp_path / "nats") as server:
        alice = open_channel(server.url, nick="alice")
        assert isinstance(alice, NatsChannel)
        await alice.subscribe("#ops")
        fake.add(Reply("pong"))
        daemon = await _run_daemon(tmp_path, server.url, fake)
        try:
            assert isinstance(daemon._channel, NatsChannel)
            prompt, reply = await _ask(alice, "ping")
            assert (reply.text, reply.thread, reply.reply_to) == ("pong", prompt, prompt)
        finally:
            await daemon.aclose()
        fake.add(Reply("pong again"))
        daemon = await _run_daemon(tmp_path, server.url, fake)
        try:
            _, reply = await _ask(alice, "ping again")
            assert reply.text == "pong again"
            assert len(fake.requests) == 2  # the first prompt was not run again
        finally:
            await daemon.aclose()
            await alice.close()


async def test_switching_between_a_hub_and_nats_loses_no_prompt(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    """hub → NATS → hub on one database: a hub prompt published while the daemon was on
    NATS, before NATS's newest id in time, is still answered once back on the hub; nothing
    is answered twice. Without dropping the cursors of the other id space, the NATS
    cursor would make the hub skip it."""
    async with Hub(tmp_path / "hub.db", port=0) as hub, NatsServer(tmp_path / "nats") as server:
        on_hub = open_channel(hub.url, nick="alice")
        on_nats = open_channel(server.url, nick="alice")
        await on_hub.subscribe("#ops")
        try:
            fake.add(Reply("hub 1"))
            daemon = await _run_daemon(tmp_path, hub.url, fake)
            try:
                assert (await _ask(on_hub, "first on the hub"))[1].text == "hub 1"
            finally:
                await daemon.aclose()
            waiting = await on_hub.publish("#ops", "published while the daemon is on NATS")
            await asyncio.sleep(0.01)
            # the stream is created now: its ids sort after the waiting prompt's
            await on_nats.subscribe("#ops")
            fake.add(Reply("nats 1"))
            daemon = await _run_daemon(tmp_path, server.url, fake)
            try:
                assert (await _ask(on_nats, "first on NATS"))[1].text == "nats 1"
            finally:
                await daemon.aclose()
            fake.add(Reply("hub 2"))
            daemon = await _run_daemon(tmp_path, hub.url, fake)
            try:
                reply = await _reply(on_hub, waiting.thread)
                assert reply.text == "hub 2"
            finally:
                await daemon.aclose()
            prompts = [r["messages"][-1]["content"] for r in fake.requests]
            assert len(prompts) == 3
            assert "published while the daemon is on NATS" in prompts[2]
        finally:
            await on_hub.close()
            await on_nats.close()
