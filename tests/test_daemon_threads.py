"""Issue 26, threads kept apart, from outside: a real hub on 127.0.0.1, the daemon in
this process with its real store, MCP server and Monty pool, the scripted model.

A user of ``#pub`` who knows an ``#ops`` thread id tries to reach ``#ops``'s REPL:
through the hub (refused, ``bad_thread``), and handed to the daemon directly, as a
hostile or older hub would deliver it (the daemon keys every REPL, its stored dump
and ``!reset`` by channel and thread, so ``#pub`` gets an empty REPL of its own).
"""

from __future__ import annotations

import asyncio

import pytest

from channels.client import WebSocketChannel
from channels.errors import ProtocolError
from channels.hub import Hub
from channels.ids import IdGenerator
from daemon.app import Daemon
from daemon.config import load_config
from daemon.runtime.ports import InboundMessage
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import WAIT, Person, settled, write_config

SECRET = "ops-secret-42"
_ids = IdGenerator()


@pytest.fixture(scope="module")
async def env(tmp_path_factory):
    """Hub, scripted model, a daemon on #ops and #pub, alice on #ops and mallory."""
    tmp = tmp_path_factory.mktemp("threads")
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        path.write_text(path.read_text().replace('["#ops"]', '["#ops", "#pub"]'))
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Person(hub.url)
        mallory = WebSocketChannel(hub.url, nick="mallory")
        try:
            await alice.start()
            await mallory.connect()
            yield daemon, fake, alice, mallory
        finally:
            await mallory.close()
            await alice.close()
            await daemon.aclose()


@pytest.fixture(autouse=True)
def script_used_up(env):
    """Each test consumes exactly the model steps it scripted."""
    yield
    assert not env[1].script, f"unused model steps: {list(env[1].script)}"


def tool_result(body: dict) -> str:
    """The last tool message of a chat request (what run_code returned)."""
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")


async def ops_thread_with_a_secret(fake: FakeOpenAI, alice: Person) -> str:
    """A #ops thread whose REPL holds ``secret``; its id."""
    fake.add(ToolCalls(("run_code", {"code": f"secret = {SECRET!r}\nlen(secret)"})), Reply("kept"))
    _, thread = await alice.say("keep the secret")
    await alice.reply_in(thread)
    return thread


async def ops_still_has_it(fake: FakeOpenAI, alice: Person, thread: str) -> str:
    """What ``secret`` evaluates to in the #ops thread's REPL now."""
    fake.add(ToolCalls(("run_code", {"code": "secret"})), Reply("still there"))
    await alice.ask("is it there?", thread=thread)
    return tool_result(fake.requests[-1])


async def handed_directly(daemon: Daemon, thread: str, text: str) -> str:
    """Give the daemon a #pub message in ``thread`` as a hub that checks nothing would;
    wait until it is answered (its reply is refused by this hub: bad_thread)."""
    message = InboundMessage(
        channel="#pub", id=_ids.new(), thread=thread, sender="mallory", text=text
    )
    await daemon.runtime.submit(message)
    await settled(daemon, message.id)
    return message.id


async def test_the_hub_refuses_a_pub_publish_in_an_ops_thread(env):
    """mallory's publish to #pub with an #ops thread id: bad_thread, no run, no reply."""
    daemon, fake, alice, mallory = env
    thread = await ops_thread_with_a_secret(fake, alice)
    asked = len(fake.requests)
    with pytest.raises(ProtocolError) as info:
        await mallory.publish("#pub", "print the secret", thread=thread)
    assert info.value.code == "bad_thread"
    fake.add(Reply("hello mallory"))
    fine = await mallory.publish("#pub", "still connected")  # the connection stays up…
    async with asyncio.timeout(WAIT):
        await fake.wait_for_requests(asked + 1)
    await settled(daemon, fine.id)
    assert len(fake.requests) == asked + 1  # …and only this one reached the model
    assert "print the secret" not in str(fake.requests[asked:])


async def test_a_pub_message_in_an_ops_thread_cannot_read_the_ops_repl(env):
    """Handed to the daemon directly, the #pub run gets an empty REPL of its own: its
    snippet finds no ``secret``, and its note names no #ops variable."""
    daemon, fake, alice, _ = env
    thread = await ops_thread_with_a_secret(fake, alice)
    fake.add(ToolCalls(("run_code", {"code": "secret"})), Reply("no secret here"))
    start = len(fake.requests)
    await handed_directly(daemon, thread, "what is secret?")
    assert "secret: str" not in fake.requests[start]["messages"][-1]["content"]  # no note of it
    seen = tool_result(fake.requests[start + 1])
    assert "NameError" in seen
    assert SECRET not in seen
    assert SECRET in await ops_still_has_it(fake, alice, thread)


async def test_a_pub_reset_in_an_ops_thread_does_not_wipe_the_ops_repl(env):
    """``!reset`` in #pub with the #ops thread id empties nothing of #ops, live or stored."""
    daemon, fake, alice, _ = env
    thread = await ops_thread_with_a_secret(fake, alice)
    message = InboundMessage(
        channel="#pub", id=_ids.new(), thread=thread, sender="mallory", text="!reset"
    )
    await daemon.runtime.submit(message)
    assert SECRET in await ops_still_has_it(fake, alice, thread)


async def test_a_pub_message_cannot_load_the_stored_ops_repl(env):
    """Evicted from the LRU (eight newer threads), #ops's REPL lives in its stored dump:
    a #pub run in the same thread id loads nothing of it; #ops's next run does."""
    daemon, fake, alice, _ = env
    thread = await ops_thread_with_a_secret(fake, alice)
    for n in range(8):
        fake.add(Reply(f"ok {n}"))
        await alice.ask(f"unrelated {n}")
    fake.add(ToolCalls(("run_code", {"code": "secret"})), Reply("nothing"))
    start = len(fake.requests)
    await handed_directly(daemon, thread, "and now?")
    assert "restored" not in fake.requests[start]["messages"][-1]["content"]
    seen = tool_result(fake.requests[start + 1])
    assert "NameError" in seen
    assert SECRET not in seen
    assert SECRET in await ops_still_has_it(fake, alice, thread)
