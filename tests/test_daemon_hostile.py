"""Hostile and buggy clients against the hub and the daemon, from outside: a real hub on
127.0.0.1, the daemon in this process with its real store, MCP server and Monty pool, the
scripted model. Each probe sends what a person or a broken client could, and checks
that every prompt is answered in its own thread, with a clear line, never a traceback.
"""

from __future__ import annotations

import uuid

from daemon.app import Daemon, running
from daemon.config import load_config
from daemon.runtime.commands import RESET_DONE
from tests.fakes.channels_helpers import RawClient
from tests.fakes.fake_openai import Reply, ToolCalls
from tests.test_daemon import Person, settled, world


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
