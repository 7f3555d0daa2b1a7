"""Hostile and buggy clients against the hub and the daemon, from outside: a real hub on
127.0.0.1, the daemon in this process with its real store, MCP server and Monty pool, the
scripted model. Each probe sends what a person or a broken client could, and checks
that every prompt is answered in its own thread, with a clear line, never a traceback.
"""

from __future__ import annotations

import uuid

import pytest

from channels.hub import Hub
from daemon.app import Daemon, running
from daemon.config import load_config
from daemon.runtime.commands import RESET_DONE
from daemon.runtime.intake import CUT_NOTICE
from tests.fakes.channels_helpers import RawClient
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import Person, settled, world, write_config


@pytest.fixture(scope="module")
async def env(tmp_path_factory):
    """Hub, scripted model, a daemon on #ops and #pub, alice and bob on #ops."""
    tmp = tmp_path_factory.mktemp("hostile")
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        path.write_text(path.read_text().replace('["#ops"]', '["#ops", "#pub"]'))
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice, bob = Person(hub.url), Person(hub.url, nick="bob")
        try:
            await alice.start()
            await bob.start()
            yield daemon, fake, alice, bob, hub
        finally:
            await alice.close()
            await bob.close()
            await daemon.aclose()


@pytest.fixture
def script_used_up(env):
    """A test on the shared daemon consumes exactly the model steps it scripted."""
    yield
    assert not env[1].script, f"unused model steps: {list(env[1].script)}"


def clean(text: str) -> None:
    """A reply is a clear line, not a traceback."""
    assert "Traceback" not in text
    assert 'File "' not in text


async def raw_publish(raw: RawClient, frame: dict) -> dict:
    """Send a publish frame; the hub's answer to it (ack or error)."""
    cid = frame.setdefault("client_id", uuid.uuid4().hex)
    await raw.send({"type": "publish", **frame})
    while True:
        answer = await raw.recv()
        if answer.get("client_id") == cid:
            return answer


async def test_a_command_is_not_run_again_after_a_restart_behind_a_held_chunk(tmp_path):
    """Someone's first chunk that never gets its last one holds the channel's cursor, so
    the next start reads the channel again from before it: a `!reset` handled meanwhile
    used to run again then, wiping the REPL made since (and saying so twice)."""
    async with world(tmp_path) as (hub, fake, path):
        alice = Person(hub.url)
        await alice.start()
        raw = await RawClient.connect(hub.url, nick="carol")
        try:
            async with running(Daemon(load_config(path, environ={}), env={})) as first:
                held = await raw_publish(raw, {"channel": "#ops", "text": "half", "more": True})
                assert held["type"] == "ack"
                fake.add(ToolCalls(("run_code", {"code": "x = 1"})), Reply("set x"))
                _, reply = await alice.ask("set x")
                thread = reply.thread
                _, reply = await alice.ask("!reset", thread=thread)
                assert reply.text == RESET_DONE
                fake.add(ToolCalls(("run_code", {"code": "y = 2"})), Reply("set y"))
                mid, _ = await alice.ask("set y", thread=thread)
                await settled(first, mid)
            async with running(Daemon(load_config(path, environ={}), env={})) as second:
                fake.add(ToolCalls(("run_code", {"code": "y"})), Reply("y is there"))
                mid, reply = await alice.ask("y?", thread=thread)
                assert reply.text == "y is there"
                await settled(second, mid)
                tool = next(
                    m["content"]
                    for m in reversed(fake.requests[-1]["messages"])
                    if m["role"] == "tool"
                )
                assert "NameError" not in tool, tool
                assert "2" in tool
            resets = [m for m in alice.replies[thread] if m.text == RESET_DONE]
            assert len(resets) == 1
        finally:
            await raw.close()
            await alice.close()


@pytest.mark.usefixtures("script_used_up")
async def test_a_broken_decision_is_answered_in_one_short_line(env):
    """`!approve`, `!deny`, `!show` with a missing, unknown, huge or unprintable id or an
    unknown word: one short line each. An unknown id or word of 5 000 or 70 000
    characters used to be repeated whole (a 64 KB reply, split in two messages)."""
    _, fake, alice, _, _ = env
    fake.add(Reply("root"))
    thread, _ = await alice.ask("start")
    texts = [
        "!approve",
        "!deny",
        "!show",
        "!approve nope",
        "!approve nope maybe",
        "!deny nope because",
        "!show nope extra",
        "!approve " + "x" * 5000,
        "!approve a\x00b",
        "!approve\tnope\trun",
        "!approve nope " + "y" * 70000,
    ]
    for text in texts:
        _, reply = await alice.ask(text, thread=thread)
        clean(reply.text)
        assert len(reply.text) < 200, (text[:20], reply.text[:200])
        assert reply.thread == thread
    assert len(alice.replies[thread]) == 1 + len(texts)  # one message each: none split


@pytest.mark.usefixtures("script_used_up")
async def test_chunks_of_others_never_turn_a_split_prompt_into_half_of_it(env):
    """alice's split prompt waits for its last chunk while carol sends 64 first chunks
    of her own, which drop alice's held one: alice's last chunk used to be answered as if
    it were all she wrote ("the pods", without "delete nothing, only list"). Her thread is
    now told to send it again, and nothing is run."""
    daemon, fake, alice, _, hub = env
    raw_alice = await RawClient.connect(hub.url, nick="alice")
    raw_carol = await RawClient.connect(hub.url, nick="carol")
    try:
        first = await raw_publish(
            raw_alice, {"channel": "#ops", "text": "delete nothing, only list ", "more": True}
        )
        for _ in range(64):
            held = await raw_publish(raw_carol, {"channel": "#ops", "text": "x", "more": True})
            assert held["type"] == "ack"
        asked = len(fake.requests)
        last = await raw_publish(
            raw_alice, {"channel": "#ops", "text": "the pods", "thread": first["thread"]}
        )
        [reply] = await alice.reply_in(first["thread"])
        assert (reply.text, reply.reply_to) == (CUT_NOTICE, last["id"])
        assert len(fake.requests) == asked
        assert await daemon.store.queries.get_prompts([last["id"]]) == []
    finally:
        await raw_alice.close()
        await raw_carol.close()
