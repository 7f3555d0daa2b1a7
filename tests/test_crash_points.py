"""Crash points (issue 26 §6): the daemon SIGKILLed at each durable step of a run.

The mechanism (:mod:`daemon.crashpoints`) first, pure; then a real
``asyncai serve`` killed through it and started again.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import crashpoints
from daemon.crashpoints import ENV, STEPS, parse
from tests.test_daemon_process import DaemonProcess, thread_replies, world  # noqa: F401

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


def test_every_point_in_the_code_names_a_documented_step() -> None:
    assert set(_points_in_source()) <= set(STEPS)


# ---- a real daemon killed through a crash point --------------------------------------------


async def test_a_daemon_killed_right_after_recording_a_prompt_answers_it_after_restart(world):  # noqa: F811
    """ASYNCAI_CRASH_AT=prompt_recorded: the daemon dies by its own SIGKILL as the prompt
    is stored; started again, it answers the prompt once."""
    from tests.fakes.fake_openai import Reply

    hub, fake, alice, daemon, _ = world
    fake.add(Reply("answered once"))
    first: DaemonProcess = daemon()
    await first.start(**{ENV: "prompt_recorded"})
    mid, thread = await alice.say("hello?")
    assert await first.wait() == -signal.SIGKILL
    assert "asyncai: crash point prompt_recorded:1 reached, SIGKILL" in first.log.read_text()
    first.kill_all()
    assert not fake.requests  # it died before any run

    second = daemon()
    await second.start()
    [reply] = await alice.reply_in(thread)
    assert (reply.text, reply.reply_to) == ("answered once", mid)
    assert second.proc is not None
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0
    assert await thread_replies(hub, thread) == ["answered once"]
