"""Cluster fencing (issue 26 §2.6): a daemon whose lease lapsed makes no call and
publishes nothing in the thread another daemon took over; and a mutating call whose
start the broker cannot record is not made (§2.3, the broker side).

On a real nats-server: the leases refuse a non-holder's mutating call and its
answered marker, the fenced publisher holds a non-holder's message back; and
with two real daemon processes, the holder is SIGSTOPped while its snippet
waits before a mutating call, the other takes the thread over and answers,
then SIGCONT: one call, one reply. A daemon in this process whose threads bucket
refuses writes makes no mutating call.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from structlog.testing import capture_logs

from daemon.app import Daemon
from daemon.cluster.errors import ThreadMoved
from daemon.cluster.fence import FencedPublisher
from daemon.cluster.leases import Leases, bucket_names
from daemon.config import load_config
from tests.fakes.fake_openai import FakeOpenAI, Reply, Step, ToolCalls
from tests.fakes.nats_server import NatsServer
from tests.fakes.runtime_helpers import FakePublisher
from tests.test_cluster_process import Watcher, _holder, member, thread_entry, two_daemons
from tests.test_daemon import WAIT, write_config


async def _taken_over(nc: Client) -> tuple[Leases, Leases]:
    """``a`` claimed thread 1 of #c, then ``b`` took it over (as after a's key expired)."""
    a = await Leases(nc.jetstream(), "asyncai", "a", member_ttl=30.0).open()
    b = await Leases(nc.jetstream(), "asyncai", "b", member_ttl=30.0).open()
    old = await a.claim("#c", "1")
    assert (await b.take_over("#c", "1", old)).owner == "b"
    return a, b


async def test_a_daemon_that_lost_the_thread_cannot_record_a_mutating_call(nc: Client) -> None:
    """mark_mutating is the fence: once b took the thread over, a's write is refused
    (ThreadMoved) and leaves the entry as b has it; b's own call is recorded."""
    a, b = await _taken_over(nc)
    with pytest.raises(ThreadMoved, match="held by another daemon now"):
        await a.mark_mutating("#c", "1", "run-a", ["000000000001"], ("append_line", {}))
    entry = await b.get("#c", "1")
    assert entry is not None
    assert (entry.owner, entry.mutating) == ("b", None)
    await b.mark_mutating("#c", "1", "run-b", ["000000000001"], ("append_line", {"x": 1}))
    entry = await b.get("#c", "1")
    assert entry is not None
    assert entry.mutating is not None
    assert entry.mutating.run == "run-b"


async def test_a_daemon_that_lost_the_thread_moves_no_marker(nc: Client) -> None:
    """a's run ended after b took the thread over: a published nothing, so its
    answered marker would say too much (and would clear b's mutating run)."""
    a, b = await _taken_over(nc)
    await b.mark_mutating("#c", "1", "run-b", ["000000000001"], ("append_line", {}))
    assert not await a.mark_answered("#c", "1", "000000000001")
    entry = await b.get("#c", "1")
    assert entry is not None
    assert entry.answered == ""
    assert entry.mutating is not None
    assert await b.mark_answered("#c", "1", "000000000001")
    entry = await b.get("#c", "1")
    assert entry is not None
    assert (entry.answered, entry.mutating) == ("000000000001", None)


async def test_the_fenced_publisher_publishes_only_in_threads_the_daemon_holds(
    nc: Client,
) -> None:
    """A message in a thread another daemon holds is held back (""); in its own thread,
    or one nobody claimed, it goes out."""
    a, _b = await _taken_over(nc)
    await a.claim("#c", "2")
    inner = FakePublisher()
    fenced = FencedPublisher(inner, a)
    assert await fenced.publish("#c", "late", thread="1", reply_to="1", client_id="x") == ""
    assert await fenced.publish("#c", "mine", thread="2", reply_to="2", client_id="y") != ""
    assert await fenced.publish("#c", "free", thread="3", reply_to="3", client_id="z") != ""
    assert [m.text for m in inner.sent] == ["mine", "free"]
    assert fenced.suppressed == 1


def _runs(db: Path) -> list[str]:
    """The statuses of the runs this daemon's database holds."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [r[0] for r in conn.execute("SELECT status FROM runs").fetchall()]


@pytest.mark.slow
async def test_a_stalled_holder_makes_no_call_and_no_reply_after_the_takeover(
    tmp_path: Path,
) -> None:
    """SIGSTOP the holder while its snippet waits before a mutating call, past
    takeover_seconds: the other daemon takes the thread over, runs the prompt and
    answers. SIGCONT: the old holder's call is refused (the snippet gets the error,
    no call reaches the MCP server) and its reply is held back: one call, one reply."""
    effects, gate = tmp_path / "effects.txt", tmp_path / "gate"
    code = (
        f"await wait_file(path={str(gate)!r})\n"
        f"r = await append_line(path={str(effects)!r}, line='once')\nr"
    )

    def model(body: dict) -> Step:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(f"done: {last['content']}")
        return ToolCalls(("run_code", {"code": code}))

    async with (
        FakeOpenAI(fallback=model) as fake,
        two_daemons(tmp_path, fake, servers=True) as (alice, daemons),
    ):
        prompt, thread = await alice.say("append a line")
        await fake.wait_for_requests(1)
        holder = await _holder(daemons, alice.channel.url, thread)
        [other] = [d for d in daemons if d is not holder]
        assert holder.proc is not None
        holder.proc.send_signal(signal.SIGSTOP)  # its snippet waits for the gate (or is to)
        try:
            await fake.wait_for_requests(2)  # the other daemon took the thread and asked
            assert (await thread_entry(alice.channel.url, thread)).owner == member(other)
            gate.touch()
            await alice.answered([prompt])
        finally:
            holder.proc.send_signal(signal.SIGCONT)
        await fake.wait_for_requests(4)  # the old holder's snippet went on, and ended
        old_db = holder.config.parent / "asyncai.db"
        async with asyncio.timeout(WAIT):
            while "running" in _runs(old_db):  # noqa: ASYNC110 -- another process's database
                await asyncio.sleep(0.05)
        fenced = fake.requests[3]["messages"][-1]["content"]
        assert "append_line was not called" in fenced
        assert "held by another daemon now" in fenced
        assert effects.read_text() == "once\n"  # exactly one call reached the server
        assert [m.text for m in alice.replies[prompt]] == ["done: appended once"]
        # The run's end is committed before its reply is offered to the publisher
        # (the outbox), so the suppression is logged a moment after the run left
        # "running": wait for it (seen missing under load, 2026-12-01).
        async with asyncio.timeout(WAIT):
            while "cluster.publish_suppressed" not in holder.log.read_text():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert "cluster.call_fenced" in holder.log.read_text()
        entry = await thread_entry(alice.channel.url, thread)
        assert (entry.owner, entry.answered, entry.mutating) == (member(other), prompt, None)
        for daemon in daemons:
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGTERM)
            assert await daemon.wait() == 0


async def test_a_mutating_call_the_broker_cannot_record_is_not_made(tmp_path: Path) -> None:
    """A daemon on NATS whose threads bucket refuses writes (sealed): the thread's
    entry cannot say that a mutating call starts, so the call is not made and the
    snippet gets the RuntimeError; read-only calls and the reply still go out."""
    effects = tmp_path / "effects.txt"
    code = (
        "await echo(text='read-only is fine')\n"
        "try:\n"
        f"    await append_line(path={str(effects)!r}, line='x')\n"
        "except RuntimeError as e:\n"
        "    r = str(e)\n"
        "r"
    )

    def model(body: dict) -> Step:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(last["content"])
        if "append" in last["content"]:
            return ToolCalls(("run_code", {"code": code}))
        return Reply("hello")

    async with NatsServer() as broker, FakeOpenAI(fallback=model) as fake:
        path = write_config(tmp_path / "asyncai.toml", hub_url=broker.url, model_url=fake.base_url)
        path.write_text(
            path.read_text().replace('"asyncai.db"', f'"{tmp_path / "asyncai.db"}"')
            + '\n[approvals]\nmode = "allow"\n'
        )
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Watcher(broker.url)
        try:
            await alice.start()
            first, thread = await alice.say("hi")
            await alice.answered([first])  # the thread is claimed: its entry exists
            operator = await nats.connect(broker.url)
            js = operator.jetstream()
            name = "KV_" + bucket_names("asyncai")[1]
            config = (await js.stream_info(name)).config
            config.sealed = True  # every write to the bucket is refused from now on
            await js.update_stream(config)
            await operator.close()
            with capture_logs() as logs:
                second, _ = await alice.say("append a line", thread=thread)
                await alice.answered([second])
            [reply] = alice.replies[second]
            assert reply.text.startswith("append_line was not called")
            assert "cannot record a mutating call" in reply.text
            assert not effects.exists()
            assert any(e["event"] == "cluster.mutating_not_recorded" for e in logs)
        finally:
            await alice.close()
            await daemon.aclose()
