"""Two real daemons (`python -m daemon.cli serve`) on one real nats-server (issue 18).

50 prompts in 50 threads, then follow-ups in half of them: each prompt is
answered exactly once, in thread order, by one daemon or the other. Then one
daemon is SIGKILLed while follow-ups arrive: its threads move to the other
within ``takeover_seconds``, still exactly once, and their REPL variables
(set by the dead daemon) are still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from channels.client import Message
from channels.nats import NatsChannel
from daemon.cluster.leases import Claim, Leases
from daemon.cluster.node import MEMBER_FILE
from daemon.runtime.interrupted import INTERRUPTED_HEAD, INTERRUPTED_TAIL
from tests.fakes.fake_openai import FakeOpenAI, Reply, Step, ToolCalls
from tests.fakes.nats_server import NatsServer
from tests.fakes.notify import NotifySocket
from tests.test_daemon import WAIT, user_text, write_config
from tests.test_daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

THREADS = 50
TAKEOVER = 2.0


def scripted(body: dict) -> Step:
    """``set N`` stores N in the REPL's ``v``; ``get`` reads it back; the reply shows the
    result, and for ``get`` whether the earlier turns of the thread were in the request."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        earlier = [m for m in body["messages"] if m["role"] in ("user", "assistant")]
        remembers = any(str(m.get("content") or "").startswith("set ") for m in earlier) and any(
            str(m.get("content") or "").startswith("result ") for m in earlier
        )
        return Reply(f"result {last['content']}" + (" (after set)" if remembers else ""))
    command = user_text(body).split("\n")[0].strip()
    if command.startswith("set "):
        return ToolCalls(("run_code", {"code": f"v = {int(command[4:])}\nv"}))
    return ToolCalls(("run_code", {"code": "v"}))


class Watcher:
    """alice on the broker: publishes, and collects the replies by the prompt they answer."""

    def __init__(self, url: str):
        self.channel = NatsChannel(url, nick="alice")
        self.replies: dict[str, list[Message]] = {}
        self.order: list[Message] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.channel.subscribe("#ops")
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.channel:
            if message.sender == "asyncai":
                self.replies.setdefault(message.reply_to or "", []).append(message)
                self.order.append(message)
                self._arrived.set()

    async def say(self, text: str, thread: str | None = None) -> tuple[str, str]:
        ack = await self.channel.publish("#ops", text, thread=thread)
        return ack.id, ack.thread

    async def answered(self, prompt_ids: list[str]) -> None:
        async with asyncio.timeout(WAIT):
            while any(p not in self.replies for p in prompt_ids):
                self._arrived.clear()
                await self._arrived.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.channel.close()


@contextlib.asynccontextmanager
async def daemons_on_a_broker(
    tmp_path: Path,
    fake: FakeOpenAI,
    *,
    servers: bool = True,
    grace: float = 2.0,
    extra: str = "",
    runtime: str = "",
) -> AsyncIterator[tuple[NatsServer, Watcher, list[DaemonProcess]]]:
    """A broker, two daemons on it (same nick, same scope.key, ``takeover_seconds`` =
    :data:`TAKEOVER`, ``extra`` appended to their config, ``runtime``: more
    ``[runtime]`` lines), alice."""
    key = os.urandom(32)
    async with NatsServer() as broker:
        daemons: list[DaemonProcess] = []
        for name in ("a", "b"):
            home = tmp_path / name
            home.mkdir()
            (home / "scope.key").write_bytes(key)
            (home / "scope.key").chmod(0o600)
            config = write_config(
                home / "asyncai.toml",
                hub_url=broker.url,
                model_url=fake.base_url,
                servers=servers,
                grace=grace,
                runtime=runtime,
            )
            config.write_text(
                config.read_text().replace('["#ops"]', f'["#ops"]\ntakeover_seconds = {TAKEOVER}')
                + extra
            )
            daemons.append(DaemonProcess(config, NotifySocket(home / "notify.sock")))
        alice = Watcher(broker.url)
        try:
            await asyncio.gather(*(d.start() for d in daemons))
            await alice.start()
            yield broker, alice, daemons
        finally:
            await alice.close()
            for d in daemons:
                d.kill_all()
                if d.proc is not None:
                    await d.wait()
                await d.notify.close()


@contextlib.asynccontextmanager
async def two_daemons(
    tmp_path: Path, fake: FakeOpenAI, *, servers: bool = False
) -> AsyncIterator[tuple[Watcher, list[DaemonProcess]]]:
    """A broker, two daemons on it, alice; approvals would hold a call for a person,
    and these tests are about the calls: every call is allowed."""
    async with daemons_on_a_broker(
        tmp_path, fake, servers=servers, grace=0.5, extra='\n[approvals]\nmode = "allow"\n'
    ) as (_broker, alice, daemons):
        yield alice, daemons


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Watcher, list[DaemonProcess], Path]]:
    """Two daemons answering from the scripted model that keeps a value in the REPL."""
    async with FakeOpenAI(fallback=scripted) as fake, two_daemons(tmp_path, fake) as (alice, ds):
        yield alice, ds, tmp_path


def _done(db: Path) -> set[str]:
    """The prompts this daemon's database holds as done."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT id FROM prompts WHERE status = 'done'").fetchall()
    return {r[0] for r in rows}


async def _recorded(dbs: list[Path], prompts: set[str]) -> None:
    """Until the daemons' databases hold ``prompts`` as done (the reply comes first)."""
    async with asyncio.timeout(WAIT):
        while not prompts <= set().union(*(_done(db) for db in dbs)):  # noqa: ASYNC110 -- other processes' databases signal nothing
            await asyncio.sleep(0.05)


async def thread_entry(url: str, thread: str) -> Claim:
    """``thread``'s entry in the threads bucket, read as an observer."""
    nc = await nats.connect(url)
    try:
        leases = Leases(nc.jetstream(), "asyncai", "observer", member_ttl=TAKEOVER * 2 / 3)
        claim = await (await leases.open()).get("#ops", thread)
    finally:
        await nc.close()
    assert claim is not None
    return claim


def member(daemon: DaemonProcess) -> str:
    """The member id a daemon process holds threads as."""
    return (daemon.config.parent / MEMBER_FILE).read_text().strip()


async def _holder(daemons: list[DaemonProcess], url: str, thread: str) -> DaemonProcess:
    """The daemon that holds ``thread``, as its entry in the threads bucket says."""
    claim = await thread_entry(url, thread)
    [holder] = [d for d in daemons if member(d) == claim.owner]
    return holder


def _answered_by(db: Path) -> set[str]:
    """The threads whose prompts this daemon answered (its own database)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT DISTINCT t.thread_id FROM prompts p JOIN threads t ON t.id = p.thread"
            " WHERE p.status = 'done'"
        ).fetchall()
    return {r[0] for r in rows}


async def test_two_daemons_answer_each_prompt_once_and_a_killed_ones_threads_move(cluster):
    """50 threads shared by two daemons; SIGKILL one mid-way: exactly once, in order,
    and the moved threads keep the REPL variables the dead daemon set."""
    alice, (a, b), tmp = cluster
    roots: dict[str, str] = {}  # thread → its first prompt
    for i in range(THREADS):
        prompt, thread = await alice.say(f"set {i}")
        roots[thread] = prompt
    await alice.answered(list(roots.values()))
    await _recorded([tmp / "a" / "asyncai.db", tmp / "b" / "asyncai.db"], set(roots.values()))
    threads = list(roots)
    values = {thread: i for i, thread in enumerate(threads)}
    by_a, by_b = _answered_by(tmp / "a" / "asyncai.db"), _answered_by(tmp / "b" / "asyncai.db")
    assert by_a | by_b == set(threads)
    assert not by_a & by_b  # each thread had one daemon
    assert by_a  # both took part
    assert by_b

    # follow-ups in half of the threads; a dies after the first few of them
    follow = [t for t in threads if values[t] % 2 == 0]
    followups: dict[str, str] = {}
    for n, thread in enumerate(follow):
        prompt, _ = await alice.say("get", thread=thread)
        followups[thread] = prompt
        if n == 5:
            a.kill_all()
    await alice.answered(list(followups.values()))
    moved = [t for t in follow if t in by_a]
    assert moved  # some of the dead daemon's threads had follow-ups

    for thread in threads:
        prompts = [roots[thread]] + ([followups[thread]] if thread in followups else [])
        for prompt in prompts:
            assert len(alice.replies[prompt]) == 1, (thread, prompt, alice.replies[prompt])
        texts = [alice.replies[p][0].text for p in prompts]
        expected = [f"result {values[thread]}", f"result {values[thread]} (after set)"]
        assert texts == expected[: len(prompts)], (thread, texts)
        ids = [alice.replies[p][0].id for p in prompts]
        assert ids == sorted(ids)  # in thread order
    assert sum(len(r) for r in alice.replies.values()) == len(roots) + len(followups)
    # what the dead daemon had not answered, the other one did: some of it in moved threads
    late = set(followups.values()) - _done(tmp / "a" / "asyncai.db")
    await _recorded([tmp / "b" / "asyncai.db"], late)
    assert late & {followups[t] for t in moved}
    b.proc.send_signal(15)
    assert await b.wait() == 0


async def test_a_run_killed_after_a_mutating_call_is_not_repeated_by_the_daemon_taking_over(
    tmp_path: Path,
) -> None:
    """SIGKILL the daemon whose run is inside a mutating call: the other daemon takes the
    thread over and posts the interrupted notice instead of running the prompt again."""
    effects = tmp_path / "effects.txt"
    code = f"await append_and_block(path={str(effects)!r})"

    def model(body: dict) -> Step:
        if body["messages"][-1]["role"] == "tool":
            return Reply("never sent")
        return ToolCalls(("run_code", {"code": code}))

    async with (
        FakeOpenAI(fallback=model) as fake,
        two_daemons(tmp_path, fake, servers=True) as (alice, daemons),
    ):
        prompt, thread = await alice.say("delete the old config map")
        async with asyncio.timeout(WAIT):
            # another process writes the file: there is no event to wait on, so poll it
            while not effects.exists():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        holder = await _holder(daemons, alice.channel.url, thread)
        [other] = [d for d in daemons if d is not holder]
        holder.kill_all()
        await alice.answered([prompt])
        [notice] = alice.replies[prompt]
        head, call, tail = notice.text.splitlines()
        assert (head, tail) == (INTERRUPTED_HEAD, INTERRUPTED_TAIL)
        assert call.startswith("- append_and_block(path='/")
        assert call.endswith(") [mutating]: did not finish (outcome unknown)")
        assert effects.read_text() == "called\n"  # exactly once
        assert len(fake.requests) == 1  # the prompt never reached the model again
        assert other.proc is not None
        other.proc.send_signal(15)
        assert await other.wait() == 0


async def test_a_restarted_daemon_still_answers_what_the_dead_one_left(tmp_path: Path) -> None:
    """b restarts while a holds a thread with a prompt in flight, then a dies: b read
    that prompt again after its restart (its cursor waited before it) and answers it."""
    release = asyncio.Event()

    async def model(body: dict) -> Step:
        if "slow" in user_text(body):
            await release.wait()  # a holds the run here until it is killed
        return Reply("answered " + user_text(body).split("\n")[0])

    async with (
        FakeOpenAI(fallback=model) as fake,
        two_daemons(tmp_path, fake) as (alice, daemons),
    ):
        first, thread = await alice.say("hello")
        await alice.answered([first])
        homes = {d: d.config.parent for d in daemons}
        await _recorded([homes[d] / "asyncai.db" for d in daemons], {first})
        [holder] = [d for d in daemons if first in _done(homes[d] / "asyncai.db")]
        [other] = [d for d in daemons if d is not holder]
        slow, _ = await alice.say("slow one", thread=thread)
        async with asyncio.timeout(WAIT):
            while not any("slow" in user_text(r) for r in fake.requests):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        # more traffic after it moves b's cursor on (replies, its own threads) ...
        later = [(await alice.say(f"hello {n}"))[0] for n in range(4)]
        await alice.answered(later)
        await _recorded([homes[d] / "asyncai.db" for d in daemons], set(later))
        # ... but not past the prompt a has not answered: after a restart b reads it again
        assert other.proc is not None
        other.proc.send_signal(15)
        assert await other.wait() == 0
        await other.start()
        holder.kill_all()
        release.set()
        await alice.answered([slow])
        assert [m.text for m in alice.replies[slow]] == ["answered slow one"]
        await _recorded([homes[other] / "asyncai.db"], {slow})


async def test_a_thread_that_moved_away_and_came_back_keeps_the_turns_answered_elsewhere(
    tmp_path: Path,
) -> None:
    """The holder answers the root and dies; the other daemon answers a follow-up; the
    first comes back and the other dies: the first takes the thread back, and its next
    run's history has the follow-up the other answered, which its own database lacks."""

    def model(body: dict) -> Step:
        said = [m for m in body["messages"] if m["role"] in ("user", "assistant")]
        earlier = " | ".join(str(m.get("content") or "") for m in said[:-1])
        asked = user_text(body).split("\n")[0]  # a note on the REPL may follow
        return Reply(f"answered {asked} after [{earlier}]")

    async with (
        FakeOpenAI(fallback=model) as fake,
        two_daemons(tmp_path, fake) as (alice, daemons),
    ):
        homes = {d: d.config.parent for d in daemons}
        dbs = [homes[d] / "asyncai.db" for d in daemons]
        root, thread = await alice.say("one")
        await alice.answered([root])
        await _recorded(dbs, {root})
        holder = await _holder(daemons, alice.channel.url, thread)
        [other] = [d for d in daemons if d is not holder]
        holder.kill_all()
        await holder.wait()
        second, _ = await alice.say("two", thread=thread)
        await alice.answered([second])
        await _recorded([homes[other] / "asyncai.db"], {second})
        await holder.start()
        other.kill_all()
        await other.wait()
        third, _ = await alice.say("three", thread=thread)
        await alice.answered([third])
        await _recorded([homes[holder] / "asyncai.db"], {third})  # the first one took it back
        [reply] = alice.replies[third]
        assert reply.text == (
            "answered three after [one | answered one after [] | two"
            " | answered two after [one | answered one after []]]"
        )
