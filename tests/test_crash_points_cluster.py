"""Crash points on two daemons on NATS (issue 26 §6): the holder SIGKILLed at each step.

The one-daemon matrix (tests/test_crash_points.py) restarts the daemon it
killed. Here two daemons share one nats-server (for the whole module), and
the daemon that holds the thread is killed at each durable step of a run
and never comes back; the other one takes the thread over
(``takeover_seconds``) and finishes what is left. One case, for each step
and tool mode:

1. the steady daemon answers P0 in a new thread in full: its snippet sets
   ``x = 1`` (and, for "count", appends one line to the effects file);
2. the steady daemon stalls (SIGSTOP) and a new daemon starts, armed at
   the step: it takes the thread over when P1 comes (``x += 1``, and for
   "count" one more line) and is killed at the step while running it;
3. the steady daemon goes on (SIGCONT) and takes the thread back: P1 gets
   its outcome, and (code mode) P2 "show" prints ``x``;
4. the promises: each mutating call made at most once, P1 answered by
   exactly one message (the reply or the interrupted notice), the REPL
   reflecting each finished run once, ``PRAGMA integrity_check`` ok on
   both daemons' databases.

What differs from one daemon: a run cut off after its reply was committed
(in the dead daemon's outbox, which is never published) and before the hub
acked it is run again by the other daemon, since the thread's ``answered``
marker moves only at the ack: the model is asked again, on the REPL from
before the run. In direct mode the call was recorded in the thread's entry,
so the other daemon posts the interrupted notice instead. A run cut off
after the hub acked its reply and before the marker moved is not run again:
the other daemon finds the reply in the stream as it takes the thread over,
also when a follow-up came meanwhile (which would otherwise be coalesced with
the re-run into one run and one more reply).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.crashpoints import ENV
from daemon.runtime.interrupted import INTERRUPTED_HEAD
from tests.fakes.crashes import effect_lines, integrity, scripted_model
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.nats_server import NatsServer
from tests.fakes.notify import NotifySocket
from tests.test_cluster_process import TAKEOVER, Watcher, member, thread_entry
from tests.test_daemon import WAIT, user_text, write_config
from tests.test_daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.crash_matrix]

# What a crash of the holder at each step leads to, once the other daemon took the
# thread over: P1's kind, its outcome ("reply", or "notice": not run again), how many
# of its mutating calls may have been made, and how many requests the model got for it
# (a whole run is two: the call, the answer; a run done again on the other daemon, four).
OUTCOMES: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...]]] = {
    "prompt_recorded": ("tally", "reply", (0,), (2,)),  # the other daemon runs it
    "run_started": ("tally", "reply", (0,), (2,)),
    "scope_restored": ("tally", "reply", (0,), (2,)),
    "audit_started": ("count", "notice", (0,), (1,)),  # in the thread's entry: not rerun
    "call_sent": ("count", "notice", (0, 1), (1,)),
    "call_answered": ("count", "notice", (1,), (1,)),
    "audit_completed": ("count", "notice", (1,), (1,)),
    "model_answered": ("count", "notice", (1,), (2,)),  # its dump is passed over
    "reply_committed": ("tally", "reply", (0,), (4,)),  # in the dead daemon's outbox only
    "reply_published": ("tally", "reply", (0,), (2,)),  # the reply found in the stream
    "run_finished": ("tally", "reply", (0,), (2,)),  # answered: nothing left to do
}


# Direct mode: P1 is always the model's own mutating call ("count"); a run the other
# daemon does again makes it once, and a reply published before the marker moved is
# found in the stream (no notice follows it).
DIRECT: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...]]] = {
    "prompt_recorded": ("count", "reply", (1,), (2,)),
    "run_started": ("count", "reply", (1,), (2,)),
    "audit_started": ("count", "notice", (0,), (1,)),
    "call_sent": ("count", "notice", (0, 1), (1,)),
    "call_answered": ("count", "notice", (1,), (1,)),
    "audit_completed": ("count", "notice", (1,), (1,)),
    "model_answered": ("count", "notice", (1,), (2,)),
    "reply_committed": ("count", "notice", (1,), (2,)),
    "reply_published": ("count", "reply", (1,), (2,)),
    "run_finished": ("count", "reply", (1,), (2,)),
}


@dataclass
class Cluster:
    """The shared world of one tool mode's cases: a broker, the model, the daemon that
    stays (``steady``) and a home for each case's holder."""

    mode: str
    tmp: Path
    broker: NatsServer
    fake: FakeOpenAI
    alice: Watcher
    effects: Path
    key: bytes
    steady: DaemonProcess | None = None
    spawned: list[DaemonProcess] = field(default_factory=list)

    def home(self, name: str) -> Path:
        """A daemon's state directory with the cluster's scope.key and its config."""
        home = self.tmp / name
        home.mkdir()
        (home / "scope.key").write_bytes(self.key)
        (home / "scope.key").chmod(0o600)
        config = write_config(
            home / "asyncai.toml", hub_url=self.broker.url, model_url=self.fake.base_url, grace=0.5
        )
        text = config.read_text().replace('["#ops"]', f'["#ops"]\ntakeover_seconds = {TAKEOVER}')
        text = text.replace("retries = 0", f'retries = 0\ntool_mode = "{self.mode}"')
        config.write_text(text + '\n[approvals]\nmode = "allow"\n')
        return config

    async def start(self, config: Path, **env: str) -> DaemonProcess:
        daemon = DaemonProcess(config, NotifySocket(config.parent / "notify.sock"))
        self.spawned.append(daemon)
        await daemon.start(**env)
        return daemon

    def lines(self) -> list[str]:
        return effect_lines(self.effects)


@pytest.fixture(scope="module")
async def cluster(request, tmp_path_factory) -> AsyncIterator[Cluster]:
    """The world of the tool mode each test names (``parametrize("cluster", [MODE],
    indirect=True)``): set up once, for the module's tests of that mode."""
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"crash-cluster-{mode}")
    effects = tmp / "effects.txt"
    async with NatsServer() as broker, FakeOpenAI(fallback=scripted_model(effects, mode)) as fake:
        alice = Watcher(broker.url)
        await alice.start()
        world = Cluster(mode, tmp, broker, fake, alice, effects, os.urandom(32))
        try:
            world.steady = await world.start(world.home("steady"))
            yield world
        finally:
            for d in world.spawned:
                d.kill_all()
                if d.proc is not None:
                    await d.wait()
                await d.notify.close()
            await alice.close()


@pytest.mark.parametrize("step", list(OUTCOMES))
@pytest.mark.parametrize("cluster", ["code"], indirect=True)
async def test_the_holder_killed_at_each_step_keeps_every_promise(cluster: Cluster, step: str):
    """SIGKILL the thread's holder at ``step``; the other daemon takes over: see the
    module docstring for the promises."""
    await _holder_killed_at(cluster, step, *OUTCOMES[step])


@pytest.mark.parametrize("step", list(DIRECT))
@pytest.mark.parametrize("cluster", ["direct"], indirect=True)
async def test_the_holder_killed_at_each_step_in_direct_mode_keeps_every_promise(
    cluster: Cluster, step: str
):
    """The same in direct mode, by the table ``DIRECT``."""
    await _holder_killed_at(cluster, step, *DIRECT[step])


@pytest.mark.parametrize("step", ["reply_published", "run_finished"])
@pytest.mark.parametrize("cluster", ["code"], indirect=True)
async def test_a_follow_up_before_the_takeover_is_not_coalesced_with_an_answered_prompt(
    cluster: Cluster, step: str
):
    """The holder killed once its reply was acked (before or after the marker moved),
    and the follow-up "show" sent at once, before the other daemon takes the thread
    back: P1 is answered by one message, its snippet ran once, and "show" is answered
    on its own, on the REPL after P1. (A reply still in the dead daemon's outbox is
    another case: P1 runs again, coalesced with "show", one reply for both.)"""
    await _holder_killed_at(cluster, step, *OUTCOMES[step], follow_up_first=True)


async def _holder_killed_at(
    c: Cluster,
    step: str,
    kind: str,
    expected: str,
    calls: tuple[int, ...],
    asked: tuple[int, ...],
    *,
    follow_up_first: bool = False,
) -> None:
    """One case: P0 answered by the steady daemon, the holder of P1 killed at ``step``,
    the steady daemon taking the thread back; the promises checked. ``follow_up_first``:
    P2 "show" is sent as soon as the holder died, before the thread moves."""
    alice, steady = c.alice, c.steady
    assert steady is not None
    assert steady.proc is not None
    label = f"{step}-early" if follow_up_first else step  # each case's own texts and home
    before = c.lines()
    p0, thread = await alice.say(f"{kind} {label} 0")  # the steady daemon is the only one
    await alice.answered([p0])
    assert alice.replies[p0][0].text.startswith("result:"), alice.replies[p0][0].text
    async with asyncio.timeout(WAIT):
        # the marker moves after the reply's ack: a stall before it would leave P0 to run again
        while (entry := await thread_entry(c.broker.url, thread)).answered != p0:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert entry.owner == member(steady)

    # The steady daemon stalls (SIGSTOP; its key expires while the new one starts), so the
    # new one takes the thread over for P1 ...
    steady.proc.send_signal(signal.SIGSTOP)
    try:
        holder = await c.start(c.home(label), **{ENV: step})
        p1, _ = await alice.say(f"{kind} {label} 1", thread=thread)
        assert await holder.wait() == -signal.SIGKILL, holder.log.read_text()[-3000:]
    finally:
        steady.proc.send_signal(signal.SIGCONT)
    holder.kill_all()  # its workers and servers, as systemd would
    assert f"crash point {step}:1 reached" in holder.log.read_text()

    # ... dies there, for good, and the steady daemon takes the thread back
    show = (await alice.say("show", thread=thread))[0] if follow_up_first else None
    await alice.answered([p1])
    if c.mode == "code":  # the REPL: direct mode has none to show
        if show is None:
            show, _ = await alice.say("show", thread=thread)
        await alice.answered([show])

    [outcome] = alice.replies[p1]  # one message: the reply, or the notice
    if expected == "reply":
        assert outcome.text.startswith("result:"), outcome.text
    else:
        assert outcome.text.startswith(INTERRUPTED_HEAD), outcome.text
    made = [line for line in c.lines()[len(before) :] if line == f"count {label} 1"]
    assert len(made) in calls  # each mutating call at most once
    requests = [r for r in c.fake.requests if user_text(r).startswith(f"{kind} {label} 1")]
    assert len(requests) in asked, len(requests)
    if c.mode == "code":  # the REPL reflects each finished run once
        finished = 2 if expected == "reply" else 1
        [shown] = alice.replies[show]
        assert shown.text == f"result: {finished}", shown.text
    for daemon in (steady, holder):
        assert integrity(daemon.config.parent / "asyncai.db") == "ok"
