"""Crash points (issue 26 §6): the daemon SIGKILLed at each durable step of a run.

The mechanism (:mod:`daemon.crashpoints`) first, pure; then a real
``asyncai serve`` killed through it and started again.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from channels.client import Message
from channels.hub import Hub
from daemon import crashpoints
from daemon.crashpoints import ENV, STEPS, parse
from daemon.runtime.interrupted import INTERRUPTED_HEAD
from tests.fakes.crashes import effect_lines, integrity, scripted_model
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.notify import NotifySocket
from tests.test_daemon import WAIT, Person, user_text, write_config
from tests.test_daemon_process import DaemonProcess, _session_ended, _stop

ROOT = Path(__file__).resolve().parents[1]


# ---- the mechanism ------------------------------------------------------------------------


def test_parse_names_a_step_and_its_count() -> None:
    assert parse(None) is None
    assert parse("") is None
    assert parse("reply_committed") == ("reply_committed", 1)
    assert parse("reply_committed:2") == ("reply_committed", 2)


@pytest.mark.parametrize("value", ["reply_comitted", "reply_committed:0", "run_started:x", ":1"])
def test_a_value_that_arms_nothing_is_refused(value: str) -> None:
    """A typo cannot make a crash test pass without crashing anything."""
    with pytest.raises(ValueError, match=ENV):
        parse(value)


def test_unset_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crashpoints, "_ARMED", None)
    monkeypatch.setattr(os, "kill", lambda *_: pytest.fail("killed"))
    for step in STEPS:
        crashpoints.crash_point(step)


def test_armed_it_kills_at_the_counted_time_of_its_step_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(crashpoints, "_ARMED", ("call_sent", 2))
    monkeypatch.setattr(crashpoints, "_reached", 0)
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    crashpoints.crash_point("call_sent")
    crashpoints.crash_point("run_started")
    assert kills == []
    crashpoints.crash_point("call_sent")
    assert kills == [(os.getpid(), signal.SIGKILL)]
    crashpoints.crash_point("call_sent")  # once only
    assert len(kills) == 1


def test_the_environment_is_read_at_import_and_the_process_dies_by_sigkill() -> None:
    """In a real process: the 2nd time the armed step is reached it dies, saying so."""
    code = (
        "from daemon.crashpoints import crash_point\n"
        "crash_point('run_started'); print('one', flush=True)\n"
        "crash_point('call_sent')\n"
        "crash_point('run_started'); print('two', flush=True)\n"
    )
    env = {**os.environ, ENV: "run_started:2"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "one\n"
    assert done.stderr == "asyncai: crash point run_started:2 reached, SIGKILL\n"


def _points_in_source() -> dict[str, list[str]]:
    """Every ``crash_point("...")`` literal in daemon/, by step: where it sits."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "daemon").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "crash_point"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.setdefault(node.args[0].value, []).append(where)
    return found


def test_every_point_in_the_code_names_a_documented_step_and_every_step_has_one() -> None:
    assert set(_points_in_source()) == set(STEPS)


# ---- a real daemon killed at each step of a run ----------------------------------------
#
# One hub, one scripted model, one database for the whole matrix of a tool mode;
# each step is one case of a few seconds and two daemon starts:
#
# 1. the running daemon (not armed) answers P0 in a new thread: its snippet
#    sets x = 1 (and, for "count", appends one line to the effects file);
# 2. it stops (SIGTERM); a daemon armed at the step starts, and P1 in the
#    same thread (x += 1, and for "count" one more line) kills it at the step;
# 3. a daemon not armed starts (it recovers), P1 gets its outcome, and P2
#    "show" prints x;
# 4. the promises: each mutating call made at most once (the effects file),
#    P1 answered by exactly one reply or the interrupted notice, the REPL
#    reflecting each finished run once (x), and PRAGMA integrity_check ok.
#
# "count" and "tally" (what each may leave behind): tests/fakes/crashes.py.

# What a crash at each step leads to, after the restart (the table of docs/durability.md): the
# prompt P1 ("count" or "tally"), answered ("reply") or not run again (the
# interrupted notice), how many of its mutating calls may have been made, and how
# many requests the model got for it (a whole run is two: the call, the answer).
OUTCOMES: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...]]] = {
    "prompt_recorded": ("tally", "reply", (0,), (2,)),  # run (again) from the start
    "run_started": ("tally", "reply", (0,), (2,)),
    "scope_restored": ("tally", "reply", (0,), (2,)),  # code mode: a stored REPL loaded
    "audit_started": ("count", "notice", (0,), (1,)),  # its started row is in: not rerun
    "call_sent": ("count", "notice", (0, 1), (1,)),  # in the server's pipe: it may act
    "call_answered": ("count", "notice", (1,), (1,)),
    "audit_completed": ("count", "notice", (1,), (1,)),
    "model_answered": ("count", "notice", (1,), (2,)),  # the run's end never committed
    "reply_committed": ("tally", "reply", (0,), (2,)),  # the outbox publishes it at start
    "reply_published": ("tally", "reply", (0,), (2,)),
    "run_finished": ("tally", "reply", (0,), (2,)),
}

# Direct mode has no REPL: no scope_restored, and the run that answers P1 makes the
# model's own call ("count") where code mode's tally makes none.
DIRECT = {
    step: ("count", expected, (1,), asked) if kind == "tally" else (kind, expected, calls, asked)
    for step, (kind, expected, calls, asked) in OUTCOMES.items()
    if step != "scope_restored"
}


@dataclass
class Matrix:
    """The shared world of one tool mode's crash cases."""

    mode: str
    hub: Hub
    fake: FakeOpenAI
    alice: Person
    config: Path
    notify: NotifySocket
    effects: Path
    daemon: DaemonProcess | None = None  # the one running now (not armed)
    spawned: list[DaemonProcess] = field(default_factory=list)

    async def start(self, **env: str) -> DaemonProcess:
        d = DaemonProcess(self.config, self.notify)
        self.spawned.append(d)
        await d.start(**env)
        return d

    async def running(self) -> DaemonProcess:
        """The daemon not armed, started if none runs."""
        if (
            self.daemon is None
            or self.daemon.proc is None
            or self.daemon.proc.returncode is not None
        ):
            self.daemon = await self.start()
        return self.daemon

    def lines(self) -> list[str]:
        return effect_lines(self.effects)


@pytest.fixture(scope="module")
async def matrix(request, tmp_path_factory) -> AsyncIterator[Matrix]:
    """The world of the tool mode each test names (``parametrize("matrix", [MODE],
    indirect=True)``): set up once, for the module's tests of that mode."""
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"crash-{mode}")
    effects = tmp / "effects.txt"
    async with (
        Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub,
        FakeOpenAI(fallback=scripted_model(effects, mode)) as fake,
    ):
        config = write_config(
            tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=True
        )
        text = config.read_text().replace("shutdown_grace = 2.0", "shutdown_grace = 0.5")
        text = text.replace("retries = 0", f'retries = 0\ntool_mode = "{mode}"')
        config.write_text(text + '\n[approvals]\nmode = "allow"\n')
        notify = NotifySocket(tmp / "notify.sock")
        alice = Person(hub.url)
        await alice.start()
        world = Matrix(mode, hub, fake, alice, config, notify, effects)
        try:
            yield world
        finally:
            for d in world.spawned:
                d.kill_all()
                if d.proc is not None:
                    await d.wait()
            await alice.close()
            await notify.close()


async def _acked(db: Path) -> None:
    """Until no reply waits in the outbox: the run before is over, to its last step.

    Otherwise the armed daemon's recovery, publishing it, could reach the
    armed step before the case's own run does. Polls: nothing signals it.
    """
    async with asyncio.timeout(WAIT):
        while True:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                query = "SELECT count(*) FROM outbox WHERE status = 'pending'"
                if conn.execute(query).fetchone()[0] == 0:
                    return
            await asyncio.sleep(0.02)


@pytest.mark.timeout(180)  # two daemon starts and three runs: ~20 s, more on a busy machine
@pytest.mark.parametrize("step", list(OUTCOMES))
@pytest.mark.parametrize("matrix", ["code"], indirect=True)
async def test_a_crash_at_each_step_keeps_every_promise(matrix: Matrix, step: str):
    """SIGKILL at ``step`` of a run, restart: see the comment above for the promises."""
    await _crash_at(matrix, step, *OUTCOMES[step])


@pytest.mark.crash_matrix
@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", list(DIRECT))
@pytest.mark.parametrize("matrix", ["direct"], indirect=True)
async def test_a_crash_at_each_step_in_direct_mode_keeps_every_promise(matrix: Matrix, step: str):
    """The same in direct mode, by the table ``DIRECT``."""
    await _crash_at(matrix, step, *DIRECT[step])


async def _crash_at(
    m: Matrix, step: str, kind: str, expected: str, calls: tuple[int, ...], asked: tuple[int, ...]
) -> None:
    """One case: P0 answered, P1 cut off at ``step``, the restart; the promises checked."""
    alice = m.alice
    before = m.lines()
    # P0, answered in full: the thread has a stored REPL (x = 1) and one line
    await m.running()
    p0, first = await alice.ask(f"{kind} {step} 0")
    thread = p0
    assert first.text.startswith("result:"), first.text
    await _acked(m.config.parent / "asyncai.db")
    assert m.daemon is not None
    await _stop(m.daemon)

    armed = await m.start(**{ENV: step})
    p1, _ = await alice.say(f"{kind} {step} 1", thread=thread)
    assert await armed.wait() == -signal.SIGKILL, armed.log.read_text()[-3000:]
    armed.kill_all()  # its workers and servers, as systemd would
    await _session_ended(armed)
    assert f"crash point {step}:1 reached" in armed.log.read_text()

    m.daemon = await m.start()
    [_, outcome] = await alice.reply_in(thread, 2)
    shown = await _answer(alice, "show", thread)

    answers = [r for r in alice.replies[thread] if r.reply_to == p1]
    assert len(answers) == 1, [r.text for r in answers]  # one reply, or the notice
    assert outcome.reply_to == p1
    if expected == "reply":
        assert outcome.text.startswith("result:"), outcome.text
    else:
        assert outcome.text.startswith(INTERRUPTED_HEAD), outcome.text
    made = [line for line in m.lines()[len(before) :] if line == f"count {step} 1"]
    assert len(made) in calls  # each mutating call at most once
    # the model was asked for P1 once, or again after a crash before anything durable
    requests = [r for r in m.fake.requests if user_text(r).startswith(f"{kind} {step} 1")]
    assert len(requests) in asked, len(requests)
    if m.mode == "code":  # the REPL reflects each finished run once
        finished = 2 if expected == "reply" else 1
        assert shown.text == f"result: {finished}", shown.text
    assert integrity(m.config.parent / "asyncai.db") == "ok"


async def _answer(alice: Person, text: str, thread: str) -> Message:
    """Publish ``text`` in ``thread`` and wait for the daemon's reply to it. A reply in
    the thread to an earlier message is not it: after a restart, a request announced
    again can be approved twice, and the second ``!approve``'s "already approved" may
    come after ``text`` is published (seen under load, 2026-12-05)."""
    seen = len(alice.replies.get(thread, []))
    mid, _ = await alice.say(text, thread=thread)
    while True:
        seen += 1
        message = (await alice.reply_in(thread, seen))[-1]
        if message.reply_to == mid:
            return message


# ---- a crash at each step of an approval ---------------------------------------------------
#
# The same case with [approvals] mode = "ask": P1's append_line waits for a
# person. alice approves each request she sees (after the restart too: a run
# that ran again from the start asks again), until P1 has its answer.

APPROVAL_STEPS = ("approval_stored", "approval_published", "decision_recorded", "resume_started")


def _asking(config: Path, mode: str) -> None:
    """Set ``[approvals] mode`` of the daemons started from now on."""
    text = config.read_text()
    config.write_text(
        text.replace('mode = "allow"', f'mode = "{mode}"').replace(
            'mode = "ask"', f'mode = "{mode}"'
        )
    )


async def _approve_until_answered(alice: Person, thread: str, p1: str, seen: int) -> list[str]:
    """Approve every request in the thread from message ``seen`` on until a message
    answers ``p1`` that is not a request; the request ids approved."""
    approved: list[str] = []
    while True:
        messages = await alice.reply_in(thread, seen + 1)
        message = messages[seen]
        seen += 1
        lines = message.text.splitlines()
        approve = next((line for line in lines if line.startswith("!approve ")), None)
        if approve is None:
            if message.reply_to == p1:
                return approved
            continue  # a line about a decision
        request = approve.split()[1]
        if request not in approved:
            approved.append(request)
            await alice.say(f"!approve {request}", thread=thread)


@pytest.mark.crash_matrix
@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", APPROVAL_STEPS)
@pytest.mark.parametrize("matrix", ["code"], indirect=True)
async def test_a_crash_at_each_approval_step_keeps_every_promise(matrix: Matrix, step: str):
    """SIGKILL at ``step`` of an approval, restart: the request is seen and decided,
    the approved call made once, P1 answered once, the REPL counting it once."""
    m, alice = matrix, matrix.alice
    before = m.lines()
    await m.running()
    p0, first = await alice.ask(f"count {step} 0")  # allowed: the thread's REPL, x = 1
    thread = p0
    assert first.text.startswith("result:"), first.text
    await _acked(m.config.parent / "asyncai.db")
    assert m.daemon is not None
    await _stop(m.daemon)
    _asking(m.config, "ask")
    try:
        armed = await m.start(**{ENV: step})
        p1, _ = await alice.say(f"count {step} 1", thread=thread)
        if step in ("decision_recorded", "resume_started"):
            [_, request] = await alice.reply_in(thread, 2)  # the request
            rid = next(x for x in request.text.splitlines() if x.startswith("!approve "))
            await alice.say(rid, thread=thread)
        assert await armed.wait() == -signal.SIGKILL, armed.log.read_text()[-3000:]
        armed.kill_all()
        await _session_ended(armed)
        assert f"crash point {step}:1 reached" in armed.log.read_text()

        m.daemon = await m.start()
        await _approve_until_answered(alice, thread, p1, 1)
        shown = await _answer(alice, "show", thread)
    finally:
        _asking(m.config, "allow")
        if m.daemon is not None:  # it asks: the next case starts one that allows
            await _stop(m.daemon)
            m.daemon = None
    answers = [r for r in alice.replies[thread] if r.reply_to == p1 and "!approve" not in r.text]
    assert [r.text.startswith("result:") for r in answers] == [True], [r.text for r in answers]
    made = [line for line in m.lines()[len(before) :] if line == f"count {step} 1"]
    assert len(made) == 1  # the approved call, once
    assert shown.text == "result: 2", shown.text
    assert integrity(m.config.parent / "asyncai.db") == "ok"
