"""The daemon end to end, in this process: a real hub, store, MCP server over stdio,
Monty pool and backend; only the model is scripted (tests/fakes/fake_openai.py).

One daemon serves every test of this module (starting one costs an MCP server
process and a Monty worker); each test talks in its own threads and consumes
exactly the model steps it adds, which the autouse fixture checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from channels.client import Message, PublishAck, WebSocketChannel
from channels.frames import Subscribed
from channels.hub import Hub
from daemon.app import Daemon, running
from daemon.config import load_config
from daemon.runtime.intake import ChannelPublisher, ChunkJoiner
from daemon.runtime.ports import PublishRefused
from daemon.runtime.timing import SPLIT_PARTS
from sessions.errors import StoreClosedError
from sessions.report import transcript_report
from tests.fakes.channels_helpers import RawClient, give_up
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import Error, FakeOpenAI, Hold, Reply, ToolCalls
from tests.fakes.notify import NotifySocket

TEST_SERVER = Path(__file__).parent / "fakes" / "mcp_test_server.py"
WAIT = 20.0  # bound on every wait for the daemon (a loaded 2-core machine is slow)


def write_config(
    path: Path,
    *,
    hub_url: str,
    model_url: str,
    servers: bool = True,
    grace: float = 2.0,
    runtime: str = "",
) -> Path:
    """A complete asyncai.toml for a test daemon (``runtime``: more ``[runtime]`` lines)."""
    text = f"""
[model]
base_url = "{model_url}"
model = "fake-model"
api_key = "test-key"
retries = 0

[channels]
url = "{hub_url}"
nick = "asyncai"
channels = ["#ops"]

[runtime]
shutdown_grace = {grace}
{runtime}

[sessions]
db = "asyncai.db"
"""
    if servers:
        text += f"""
[mcp_servers.test]
command = "{sys.executable}"
args = ["{TEST_SERVER}", "--label", "daemon"]
"""
    path.write_text(text)
    return path


class Person:
    """Someone on the hub: publishes prompts and reads the daemon's replies."""

    def __init__(self, url: str, nick: str = "alice"):
        self.client = WebSocketChannel(url, nick=nick)
        self.replies: dict[str, list[Message]] = {}  # thread → the daemon's messages
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and follow #ops."""
        await self.client.connect()
        await self.client.subscribe("#ops")
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.client:
            if message.sender == "asyncai":
                self.replies.setdefault(message.thread, []).append(message)
                self._arrived.set()

    async def say(self, text: str, thread: str | None = None) -> tuple[str, str]:
        """Publish; the new message's ``(id, thread)``."""
        ack = await self.client.publish("#ops", text, thread=thread)
        return ack.id, ack.thread

    async def reply_in(self, thread: str, count: int = 1) -> list[Message]:
        """The first ``count`` replies of the daemon in ``thread`` (waits, bounded)."""
        async with asyncio.timeout(WAIT):
            while len(self.replies.get(thread, [])) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.replies[thread][:count]

    async def ask(self, text: str, thread: str | None = None) -> tuple[str, Message]:
        """Publish and wait for the next reply in the thread; ``(prompt id, reply)``."""
        before = len(self.replies.get(thread or "", []))
        mid, tid = await self.say(text, thread)
        replies = await self.reply_in(tid, before + 1)
        return mid, replies[before]

    async def close(self) -> None:
        """Disconnect."""
        await self.client.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


@pytest.fixture(scope="module")
async def env(tmp_path_factory):
    """Hub, scripted model, daemon and a person, shared by the module's tests."""
    tmp = tmp_path_factory.mktemp("daemon")
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        config = load_config(
            write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url),
            environ={},
        )
        daemon = Daemon(config, env={})
        await daemon.start()
        alice = Person(hub.url)
        try:
            await alice.start()
            yield daemon, fake, alice
        finally:
            await alice.close()
            await daemon.aclose()


@pytest.fixture(autouse=True)
def script_used_up(request):
    """Each test consumes exactly the model steps it scripted."""
    yield
    if "env" in request.fixturenames:
        _, fake, _ = request.getfixturevalue("env")
        assert not fake.script, f"unused model steps: {list(fake.script)}"


def user_text(body: dict) -> str:
    """The newest user message of a chat request."""
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


async def until(predicate, what: str) -> None:
    """Poll ``predicate`` (bounded) for state the daemon reaches without telling anyone."""
    async with asyncio.timeout(WAIT):
        while not predicate():  # noqa: ASYNC110 -- bounded polling: nothing signals this state
            await asyncio.sleep(0.01)


async def settled(daemon: Daemon, *prompt_ids: str) -> None:
    """Until the prompts' runs have landed in the store (just after the hub acked the reply).

    A prompt at the live edge is written with its run (issue 31): until then it is
    not there at all."""
    wanted = set(prompt_ids)
    async with asyncio.timeout(WAIT):
        while True:
            found = await daemon.store.queries.get_prompts(wanted)
            if len(found) == len(wanted) and all(
                p.status not in ("queued", "running") for p in found
            ):
                return
            await asyncio.sleep(0.01)  # bounded polling of the store, which signals nothing


async def run_of(daemon: Daemon, prompt_id: str) -> str:
    """The run id that answered a prompt."""
    [prompt] = await daemon.store.queries.get_prompts([prompt_id])
    assert prompt.run_id is not None
    return prompt.run_id


async def test_prompt_gets_its_reply_in_the_same_thread(env):
    """`atirc pub` → the reply in the same thread, replying to the prompt; stored as done."""
    daemon, fake, alice = env
    fake.add(Reply("Hello alice."))
    mid, reply = await alice.ask("hello?")
    assert reply.text == "Hello alice."
    assert (reply.thread, reply.reply_to) == (mid, mid)
    await settled(daemon, mid)
    [prompt] = await daemon.store.queries.get_prompts([mid])
    assert prompt.status == "done"
    status, _, _ = await daemon.store.queries.run_metrics(prompt.run_id)
    assert status == "done"
    assert user_text(fake.requests[-1]) == "hello?"


async def test_follow_up_uses_a_variable_of_the_run_before_without_mcp_calls(env):
    """A follow-up reads a variable bound by the previous run: the note names it and the
    second run makes zero MCP calls."""
    daemon, fake, alice = env
    fake.add(
        ToolCalls(("run_code", {"code": "words = await echo(text='a b c')\nlen(words.split())"})),
        Reply("There are 3 words."),
    )
    first, reply = await alice.ask("how many words?")
    assert reply.text == "There are 3 words."
    fake.add(ToolCalls(("run_code", {"code": "words.upper()"})), Reply("A B C"))
    start = len(fake.requests)
    second, reply = await alice.ask("shout them", thread=first)
    assert reply.text == "A B C"
    assert "[run_code variables still in scope: words: str" in user_text(fake.requests[start])
    tool_message = fake.requests[start + 1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "A B C" in tool_message["content"]
    await settled(daemon, first, second)
    audit = await daemon.store.audit.entries(thread=first)
    by_run = {e.run_id: e.tool for e in audit}
    assert by_run == {await run_of(daemon, first): "echo"}
    assert await run_of(daemon, second) not in by_run


async def test_every_run_keeps_its_time_split_and_the_transcript_shows_it(env):
    """Issue 31: a run's seconds, split from its one timeline (the streamed replies'
    first tokens, the sandbox, the nested call), land in the run row's extra and end the
    run in `asyncai transcript`'s text."""
    daemon, fake, alice = env
    fake.add(
        ToolCalls(("run_code", {"code": "len((await echo(text='a b c')).split())"})),
        Reply("3 words."),
    )
    mid, reply = await alice.ask("count the words")
    assert reply.text == "3 words."
    await settled(daemon, mid)
    run_id = await run_of(daemon, mid)
    assert all(body.get("stream") is True for body in fake.requests[-2:])
    status, metrics, _ = await daemon.store.queries.run_metrics(run_id)
    split = metrics.split
    assert status == "done"
    assert set(split) == set(SPLIT_PARTS)
    assert split["prompt_eval"] > 0
    assert split["sandbox"] > 0
    assert split["tools"] > 0
    parts = sum(v for k, v in split.items() if k != "total")
    assert split["total"] > 0
    assert abs(parts - split["total"]) < 0.01
    lines = await transcript_report(daemon.store.queries, mid, channel="#ops", jsonl=False)
    [line] = [x for x in lines if x.startswith(f"── run {run_id[:12]} done in ")]
    assert f"prompt {split['prompt_eval']:.2f}" in line
    assert "tools " in line
    assert lines[-1] == line  # the run's records end with it


async def test_prompts_sent_during_a_run_become_one_follow_up_run(env):
    """Three prompts sent while a run holds are answered by ONE follow-up run, in order."""
    daemon, fake, alice = env
    hold = Hold(Reply("first answer"))
    fake.add(hold, Reply("all three answered"))
    first, thread = await alice.say("start something long")
    async with asyncio.timeout(WAIT):
        await hold.arrived.wait()
    ids = [(await alice.say(text, thread=thread))[0] for text in ("two", "three", "four")]
    await until(lambda: daemon.runtime.counts().queued_prompts == 3, "three queued")
    hold.release.set()
    replies = await alice.reply_in(thread, 2)
    assert [r.text for r in replies] == ["first answer", "all three answered"]
    assert replies[1].reply_to == ids[-1]
    assert user_text(fake.requests[-1]) == "two\n\nthree\n\nfour"
    await settled(daemon, first, *ids)
    runs = {await run_of(daemon, i) for i in ids}
    assert len(runs) == 1
    assert runs != {await run_of(daemon, first)}


async def test_ninth_thread_evicts_the_least_recently_used_scope(env):
    """With the default LRU of 8, eight newer threads evict a thread's REPL scope; its
    saved copy is loaded for the thread's next run, whose note says so."""
    _, fake, alice = env
    fake.add(ToolCalls(("run_code", {"code": "kept = 41"})), Reply("stored"))
    first, _ = await alice.ask("remember 41")
    for n in range(8):
        fake.add(Reply(f"ok {n}"))
        await alice.ask(f"unrelated {n}")
    fake.add(Reply("41, still."))
    await alice.ask("what did you keep?", thread=first)
    note = user_text(fake.requests[-1])
    assert "run_code REPL was restored from the save of" in note
    assert "kept: int" in note.split("what did you keep?")[1]


async def test_mutating_call_is_audited_in_the_transcript_and_logged(env):
    """A run with a mutating nested call: it waits for approval, then runs; transcript
    records in order, the audit row linked to the assistant record that carried
    run_code and naming who approved, and a warning log line."""
    daemon, fake, alice = env
    fake.add(
        ToolCalls(("run_code", {"code": "await rm(path='/srv/old')"})),
        Reply("Removed /srv/old."),
    )
    with capture_logs() as logs:
        mid, request = await alice.ask("remove /srv/old")
        assert request.text.splitlines()[1] == '- test.rm({"path": "/srv/old"}): destructive'
        request_id = request.text.splitlines()[-2].split()[1]
        assert await daemon.store.audit.entries(thread=mid) == []  # not made while it waits
        _, reply = await alice.ask(f"!approve {request_id}", thread=mid)
    assert reply.text == "Removed /srv/old."
    await settled(daemon, mid)
    [row] = await daemon.store.audit.entries(thread=mid)
    assert (row.tool, row.arguments, row.mutating, row.is_error) == (
        "rm",
        {"path": "/srv/old"},
        True,
        False,
    )
    assert (row.decision, row.decided_by) == ("approved", "alice")
    records = await daemon.store.queries.transcript(mid, "#ops")
    assert [r.type for r in records] == ["user", "assistant", "user", "assistant"]
    assert records[1].uuid == row.record_uuid
    tool_use = next(b for b in records[1].message["content"] if b["type"] == "tool_use")
    tool_result = records[2].message["content"][0]
    assert tool_result["tool_use_id"] == tool_use["id"]
    assert records[2].tool_use_result["nested_calls"][-1]["tool"] == "rm"
    warnings = [e for e in logs if e["log_level"] == "warning" and e.get("mutating") is True]
    assert warnings
    assert {e.get("tool") for e in warnings} == {"rm"}


async def test_stop_cancels_the_active_run(env):
    """`!stop` in a thread cancels its run: a short reply, the run recorded interrupted."""
    daemon, fake, alice = env
    hold = Hold(Reply("too late"))
    fake.add(hold)
    mid, thread = await alice.say("count to a billion")
    async with asyncio.timeout(WAIT):
        await hold.arrived.wait()
    await alice.say("!stop", thread=thread)
    [reply] = await alice.reply_in(thread)
    assert reply.text == "Stopped by alice."
    await settled(daemon, mid)
    run_id = await run_of(daemon, mid)
    status, _, error = await daemon.store.queries.run_metrics(run_id)
    assert (status, error) == ("interrupted", "stopped by alice")
    hold.release.set()  # the fake's held connection was cut; let its task end


async def test_failed_run_gets_a_short_error_reply_and_the_daemon_goes_on(env):
    """The model endpoint failing: a short error reply, a failed run row; the next works."""
    daemon, fake, alice = env
    fake.add(Error(500, "the model fell over"))
    mid, reply = await alice.ask("anything")
    assert reply.text.startswith("Sorry, this run failed:")
    assert len(reply.text) < 600
    await settled(daemon, mid)
    status, _, error = await daemon.store.queries.run_metrics(await run_of(daemon, mid))
    assert status == "failed"
    assert error
    fake.add(Reply("fine again"))
    _, reply = await alice.ask("again?")
    assert reply.text == "fine again"


def test_chunk_joiner_rebuilds_a_split_prompt():
    """Chunks with `more` from one sender in one thread come out as one prompt."""
    joiner = ChunkJoiner()

    def chunk(mid: str, text: str, more: bool, sender: str = "alice") -> Message:
        return Message("#ops", mid, "t1", None, sender, text, "2026-01-01T00:00:00.000Z", more)

    assert joiner.feed(chunk("01", "first half, ", True)) is None
    assert joiner.feed(chunk("02", "other person", False, sender="bob")).text == "other person"
    whole = joiner.feed(chunk("03", "second half", False))
    assert (whole.id, whole.text) == ("03", "first half, second half")


async def test_stop_while_waiting_for_the_hub_exits_zero(tmp_path):
    """A daemon whose hub is down keeps retrying; SIGTERM then ends it cleanly (status 0)."""
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead_url = f"ws://127.0.0.1:{probe.getsockname()[1]}/"
    config = load_config(
        write_config(
            tmp_path / "asyncai.toml",
            hub_url=dead_url,
            model_url="http://127.0.0.1:9/v1",
            servers=False,
        ),
        environ={},
    )
    daemon = Daemon(config, env={})
    with capture_logs() as logs:
        running = asyncio.create_task(daemon.run())
        await until(lambda: any(e["event"] == "daemon.hub_unreachable" for e in logs), "retrying")
        daemon.request_stop()
        async with asyncio.timeout(WAIT):
            assert await running == 0
    assert any(e["event"] == "daemon.stopped_while_starting" for e in logs)


# ---- faults an attack campaign found (issue 15) ---------------------------------------


async def test_lone_surrogate_in_a_model_reply_still_ends_the_prompt(env):
    """A model reply with a lone surrogate ("\\ud800") never leaves the thread silent and
    the prompt queued: the thread gets a valid reply (the text with U+FFFD, or the failure
    line when the backend refuses the response) and the prompt is finished."""
    daemon, fake, alice = env
    fake.add(Reply("broken \ud800 text"))
    mid, reply = await alice.ask("say something odd")
    assert reply.text == "broken \ufffd text" or reply.text.startswith("Sorry, this run failed")
    await settled(daemon, mid)
    [prompt] = await daemon.store.queries.get_prompts([mid])
    assert prompt.status in ("done", "failed")


async def test_channel_publisher_sends_valid_text_and_names_a_refusal(tmp_path):
    """Through a real hub: a text with lone surrogates goes out with U+FFFD in their
    place (a surrogate pair as the character it encodes); a publish the hub refuses for
    what it is raises PublishRefused, which the runtime does not retry."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub:
        reader = Person(hub.url, nick="reader")
        client = WebSocketChannel(hub.url, nick="asyncai")
        await reader.start()
        await client.connect()
        try:
            root, thread = await reader.say("root")
            publisher = ChannelPublisher(client, "asyncai")
            await publisher.publish(
                "#ops", "a\ud800b \ud83d\ude00", thread=thread, reply_to=root, client_id="c1"
            )
            [message] = await reader.reply_in(thread)
            assert message.text == "a\ufffdb \U0001f600"
            with pytest.raises(PublishRefused, match="bad_channel"):
                await publisher.publish(
                    "no-hash", "x", thread=thread, reply_to=root, client_id="c2"
                )
        finally:
            await client.close()
            await reader.close()


@contextlib.asynccontextmanager
async def world(tmp_path: Path, runtime: str = "") -> AsyncIterator[tuple[Hub, FakeOpenAI, Path]]:
    """A hub, a scripted model and the config of a daemon without MCP servers, for
    tests that start and stop daemons themselves."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml",
            hub_url=hub.url,
            model_url=fake.base_url,
            servers=False,
            runtime=runtime,
        )
        yield hub, fake, path


async def test_prompt_published_while_a_new_daemon_was_stopped_is_answered(tmp_path):
    """A daemon that never handled a message (no cursor) still answers, at its next
    start, a prompt published while it was stopped: it reads from its first start."""
    async with world(tmp_path) as (hub, fake, path):
        first = Daemon(load_config(path, environ={}), env={})
        async with running(first):
            pass  # started (the first start is stored), subscribed, stopped: no cursor
        alice = Person(hub.url)
        await alice.start()
        try:
            mid, thread = await alice.say("anyone there?")
            fake.add(Reply("I was away, but here it is."))
            async with running(Daemon(load_config(path, environ={}), env={})) as second:
                [reply] = await alice.reply_in(thread)
                assert reply.text == "I was away, but here it is."
                await settled(second, mid)
        finally:
            await alice.close()


async def test_split_prompt_survives_a_restart_between_its_chunks(tmp_path):
    """The first chunk of a split prompt, then someone else's prompt (which used to move
    the cursor past the chunk), then the daemon stops: after the restart the last
    chunk completes the prompt with ALL its text, and nothing is answered twice."""
    async with world(tmp_path) as (hub, fake, path):
        bob = Person(hub.url, nick="bob")
        await bob.start()
        raw = await RawClient.connect(hub.url, nick="alice")
        try:
            async with running(Daemon(load_config(path, environ={}), env={})) as first:
                await raw.send(
                    {
                        "type": "publish",
                        "channel": "#ops",
                        "text": "first half, ",
                        "client_id": "chunk-1",
                        "more": True,
                    }
                )
                thread = (await raw.recv_type("ack"))["id"]
                fake.add(Reply("hello bob"))
                bob_id, reply = await bob.ask("hello?")
                assert reply.text == "hello bob"
                await settled(first, bob_id)
            fake.add(Reply("joined"))
            async with running(Daemon(load_config(path, environ={}), env={})) as second:
                await raw.send(
                    {
                        "type": "publish",
                        "channel": "#ops",
                        "text": "second half",
                        "client_id": "chunk-2",
                        "thread": thread,
                    }
                )
                last = (await raw.recv_type("ack"))["id"]
                [reply] = await bob.reply_in(thread)
                assert reply.text == "joined"
                assert user_text(fake.requests[-1]) == "first half, second half"
                await settled(second, last)
                assert len(bob.replies[bob_id]) == 1  # bob's replayed prompt: not again
        finally:
            await raw.close()
            await bob.close()


class SwitchedChannel:
    """A real websocket client that the test can declare broken, or make fail or wait
    when subscribing (the channel boundary)."""

    def __init__(self, inner: WebSocketChannel):
        self.inner = inner
        self.declared_broken = False
        self.subscribe_error: BaseException | None = None
        self.subscribe_gate: asyncio.Event | None = None  # when set: subscribing waits for it
        self.closed = False

    @property
    def nick(self) -> str | None:
        """The inner client's nick."""
        return self.inner.nick

    @property
    def broken(self) -> bool:
        """Broken when the test says so (or the inner client is)."""
        return self.declared_broken or self.inner.broken

    async def subscribe(self, channel: str, since: str | None = None) -> Subscribed:
        """Subscribe, unless told to fail or to wait."""
        if self.subscribe_gate is not None:
            await self.subscribe_gate.wait()
        if self.subscribe_error is not None:
            raise self.subscribe_error
        return await self.inner.subscribe(channel, since=since)

    async def unsubscribe(self, channel: str) -> None:
        """As the inner client."""
        await self.inner.unsubscribe(channel)

    async def publish(self, channel: str, text: str, **kwargs: Any) -> PublishAck:
        """As the inner client."""
        return await self.inner.publish(channel, text, **kwargs)

    async def status(self, channel: str, text: str, *, thread: str) -> None:
        """As the inner client."""
        await self.inner.status(channel, text, thread=thread)

    async def receive(self) -> Message:
        """As the inner client."""
        return await self.inner.receive()

    def __aiter__(self) -> AsyncIterator[Message]:
        """As the inner client."""
        return self.inner.__aiter__()

    async def close(self) -> None:
        """Close the inner client; remember it was closed."""
        self.closed = True
        await self.inner.close()


async def test_watchdog_pings_stop_while_the_channel_is_broken(tmp_path):
    """WATCHDOG=1 is sent while the channel client is not broken; while it is (even with
    the intake still waiting on it), the pings stop and STATUS= says why."""
    notify_socket = NotifySocket(tmp_path / "notify.sock")
    watchdog = {"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "60000"}  # 30 ms
    async with world(tmp_path) as (hub, _, path):
        channel = SwitchedChannel(WebSocketChannel(hub.url, nick="asyncai"))
        await channel.inner.connect()
        try:
            async with running(
                Daemon(load_config(path, environ={}), channel=channel, env=watchdog)
            ):
                await notify_socket.next_datagram("WATCHDOG=1")
                channel.declared_broken = True
                unhealthy = await notify_socket.next_datagram("unhealthy")
                assert "the channel is broken" in unhealthy
                assert "WATCHDOG=1" not in unhealthy
                again = await notify_socket.next_datagram("STATUS=")
                assert "WATCHDOG=1" not in again
                channel.declared_broken = False
                await notify_socket.next_datagram("WATCHDOG=1")
        finally:
            await notify_socket.close()


async def test_watchdog_pings_stop_when_the_hub_goes_away_for_good(tmp_path):
    """With the real client: the hub stops and the client gives up reconnecting, so the
    daemon stops feeding the watchdog."""
    notify_socket = NotifySocket(tmp_path / "notify.sock")
    watchdog = {"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "60000"}
    async with world(tmp_path) as (hub, _, path):
        channel = WebSocketChannel(hub.url, nick="asyncai", backoff=give_up)
        await channel.connect()
        try:
            daemon = Daemon(load_config(path, environ={}), channel=channel, env=watchdog)
            async with running(daemon):
                await notify_socket.next_datagram("WATCHDOG=1")
                await hub.aclose()
                unhealthy = await notify_socket.next_datagram("unhealthy")
                assert "the channel is broken" in unhealthy
                assert "WATCHDOG=1" not in unhealthy
        finally:
            await notify_socket.close()


async def test_unexpected_error_while_starting_closes_everything_and_propagates(tmp_path):
    """An error nobody expected (here: subscribing raises RuntimeError) ends run() with
    that error, logged, after the executor, the channel and the store were closed."""
    async with world(tmp_path) as (hub, _, path):
        channel = SwitchedChannel(WebSocketChannel(hub.url, nick="asyncai"))
        await channel.inner.connect()
        channel.subscribe_error = RuntimeError("injected")
        executor = FakeToolExecutor()
        daemon = Daemon(load_config(path, environ={}), channel=channel, executor=executor, env={})
        with capture_logs() as logs, pytest.raises(RuntimeError, match="injected"):
            await daemon.run()
        assert (executor.started, executor.closed) == (1, 1)
        assert channel.closed
        with pytest.raises(StoreClosedError):
            await daemon.store.cursors.get_cursor("#ops")
        assert any(e["event"] == "daemon.crashed" for e in logs)


async def test_cancelled_while_starting_closes_everything(tmp_path):
    """run() cancelled in the middle of its start (the hub is slow to answer) closes
    what was already open before the cancellation goes on."""
    async with world(tmp_path) as (hub, _, path):
        channel = SwitchedChannel(WebSocketChannel(hub.url, nick="asyncai"))
        await channel.inner.connect()
        channel.subscribe_gate = asyncio.Event()  # never set: the start hangs there
        executor = FakeToolExecutor()
        daemon = Daemon(load_config(path, environ={}), channel=channel, executor=executor, env={})
        task = asyncio.create_task(daemon.run())
        await until(lambda: executor.started == 1 and daemon.runtime is not None, "starting")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert executor.closed == 1
        assert channel.closed


async def test_a_threads_root_reads_no_history_and_no_stored_repl(env, monkeypatch):
    """A prompt that opens its thread has nothing earlier to read: its run makes no history
    read and no stored-REPL lookup (two store jobs a new thread saved, issue 31). Its
    follow-up reads the history and sees the first turn and the REPL's variable."""
    daemon, fake, alice = env
    reads: list[str] = []

    def spy(port: Any, name: str) -> None:
        real = getattr(port, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append(name)
            return await real(*args, **kwargs)

        monkeypatch.setattr(port, name, counted)

    spy(daemon.store.queries, "history")
    spy(daemon.store.scopes, "load_scope")
    fake.add(ToolCalls(("run_code", {"code": "kept = 7"})), Reply("kept 7"))
    first, reply = await alice.ask("keep seven")
    assert reply.text == "kept 7"
    assert reads == []  # the root's run read nothing of its thread
    fake.add(Reply("7, still."))
    await alice.ask("what did you keep?", thread=first)
    assert reads == ["history"]  # the REPL is live here: nothing to load
    messages = fake.requests[-1]["messages"]
    assert any(m["role"] == "assistant" and m["content"] == "kept 7" for m in messages)
    assert "kept: int" in user_text(fake.requests[-1])
