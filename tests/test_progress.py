"""A run's progress as status frames (issue 16): the throttle as a pure unit, the run's
sender, and a real daemon with a scripted model telling its thread what it does."""

from __future__ import annotations

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from channels.client import WebSocketChannel
from channels.frames import Status
from channels.hub import Hub
from daemon.app import Daemon, running
from daemon.config import load_config
from daemon.runtime.progress import (
    PROGRESS_GRACE,
    RunProgress,
    Throttle,
    running_code,
    showing_progress,
)
from tests.fakes.channels_helpers import RawClient
from tests.fakes.fake_openai import FakeOpenAI, Hold, Reply, ToolCalls
from tests.test_daemon import WAIT, write_config


def test_the_throttle_lets_one_text_a_second_and_the_newest_waiting_one_wins():
    """The first text goes at once; texts within the second wait, the newest replacing the
    others, and go when the second is over; the same text twice is not sent again."""
    now = [0.0]
    throttle = Throttle(1.0, clock=lambda: now[0])
    assert throttle.delay() is None
    assert throttle.take() is None
    throttle.offer("thinking")
    assert throttle.take() == "thinking"
    now[0] = 0.2
    throttle.offer("running code")
    throttle.offer("running code (1 tool call so far)")
    assert throttle.delay() == 0.8
    assert throttle.take() is None
    now[0] = 1.0
    assert throttle.take() == "running code (1 tool call so far)"
    throttle.offer("running code (1 tool call so far)")
    assert throttle.delay() is None  # shown already
    now[0] = 5.0
    throttle.offer("answering")
    assert throttle.take() == "answering"


def test_no_text_goes_within_the_grace_and_the_newest_goes_when_it_is_over():
    """With a grace, nothing goes before it is over (the newest offered text waits); a
    run that ends within it sends nothing; after it, one text per interval as before."""
    now = [10.0]
    throttle = Throttle(1.0, clock=lambda: now[0], grace=0.5)
    throttle.offer("thinking")
    assert throttle.delay() == 0.5
    assert throttle.take() is None
    now[0] = 10.3
    throttle.offer("running code")
    assert throttle.delay() == pytest.approx(0.2)
    assert throttle.take() is None
    now[0] = 10.5
    assert throttle.take() == "running code"  # the newest; "thinking" was overtaken
    now[0] = 10.6
    throttle.offer("answering")
    assert throttle.delay() == pytest.approx(0.9)  # the interval again


async def test_a_run_that_ends_within_the_grace_shows_nothing():
    """The sender's task waits out the grace; closing before it is over sends nothing."""
    sent: list[str] = []

    async def send(text: str) -> None:
        sent.append(text)

    tasks = len(asyncio.all_tasks())
    async with showing_progress(send, grace=60.0) as progress:
        progress.report("thinking")
        for _ in range(3):
            await asyncio.sleep(0)
        progress.report("answering")
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == tasks  # no sender task until the grace is over
    assert sent == [] == progress.sent


async def test_the_sender_starts_when_the_grace_is_over():
    """A report made in the grace goes out once it is over, the newest text first."""
    sent: list[str] = []
    went = asyncio.Event()

    async def send(text: str) -> None:
        sent.append(text)
        went.set()

    async with showing_progress(send, grace=0.05) as progress:
        progress.report("thinking")
        progress.report("running code")
        async with asyncio.timeout(5):
            await went.wait()
    assert sent == ["running code"] == progress.sent


def test_running_code_counts_the_nested_calls():
    """No count before the first nested call; "1 tool call", then "N tool calls"."""
    assert [running_code(n) for n in (0, 1, 3)] == [
        "running code",
        "running code (1 tool call so far)",
        "running code (3 tool calls so far)",
    ]


async def test_a_failed_send_is_logged_and_nothing_goes_after_the_close():
    """Best effort: a send that raises is a debug line, the run goes on; after the block
    ends, reports are ignored and the waiting text is dropped."""
    sent: list[str] = []

    async def send(text: str) -> None:
        if text == "thinking":
            raise ConnectionError("hub gone")
        sent.append(text)

    with capture_logs() as logs:
        async with showing_progress(send, interval=0.0, grace=0.0) as progress:
            progress.report("thinking")
            await asyncio.sleep(0)  # the sender task runs: its send fails
            await asyncio.sleep(0)
            progress.report("answering")
            for _ in range(3):
                await asyncio.sleep(0)
        progress.report("late")
    assert sent == ["answering"] == progress.sent
    assert [e["event"] for e in logs] == ["daemon.progress_not_sent"]
    assert logs[0]["log_level"] == "debug"


async def test_the_text_waiting_for_its_second_is_never_sent_after_the_close():
    """Within the interval a second text waits; closing drops it."""
    sent: list[str] = []

    async def send(text: str) -> None:
        sent.append(text)

    progress = RunProgress(send, interval=60.0, grace=0.0)
    progress.report("thinking")
    await asyncio.sleep(0)
    progress.report("answering")
    await asyncio.sleep(0)
    await progress.aclose()
    assert sent == ["thinking"]


async def test_the_daemon_tells_the_thread_what_it_does_and_nothing_after_the_reply(tmp_path):
    """A scripted run: run_code with two nested calls, then the final round (max_rounds 2).
    A watcher sees thinking, running code…, answering, from the daemon, in the prompt's
    thread; a raw reader sees no status between the reply and the next message."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        path.write_text(path.read_text().replace("retries = 0", "retries = 0\nmax_rounds = 2"))
        config = load_config(path, environ={})
        statuses: list[Status] = []
        watcher = WebSocketChannel(hub.url, nick="watcher", on_status=statuses.append)
        raw = await RawClient.connect(hub.url, nick="raw")
        try:
            await watcher.subscribe("#ops")
            await raw.send({"type": "subscribe", "channel": "#ops"})
            await raw.recv_type("subscribed")
            code = "a = await echo(text='x')\nb = await echo(text='y')\n[a, b]"
            fake.add(ToolCalls(("run_code", {"code": code})), Reply("two echoes"))
            async with running(Daemon(config, env={}, progress_interval=0.0, progress_grace=0.0)):
                ack = await watcher.publish("#ops", "echo twice")
                async with asyncio.timeout(WAIT):
                    while True:
                        frame = await raw.recv()
                        if frame["type"] == "message" and frame["from"] == "asyncai":
                            break
                    assert frame["text"] == "two echoes"
                    await watcher.publish("#ops", "sentinel", thread=ack.thread)
                    after = []
                    while (frame := await raw.recv())["type"] != "message":
                        after.append(frame)
                    assert frame["text"] == "sentinel"
            assert [f for f in after if f["type"] == "status"] == []
        finally:
            await watcher.close()
            await raw.close()
    texts = [s.text for s in statuses]
    assert texts[0] == "thinking", texts
    assert texts[-1] == "answering", texts
    assert any(t.startswith("running code") for t in texts), texts
    allowed = {"thinking", "answering", *(running_code(n) for n in range(3))}
    assert set(texts) <= allowed, texts
    assert {(s.sender, s.thread, s.channel) for s in statuses} == {("asyncai", ack.thread, "#ops")}


async def test_a_fast_run_shows_no_status_and_a_slow_one_at_most_one_a_second(tmp_path):
    """With the default grace and interval: a run that replies within the grace (half a
    second) shows no status; a longer one (a slow machine) none before the grace is over
    and at most one a second after it (later texts wait for their second, and are dropped
    when the reply is ready)."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=False
        )
        statuses: list[Status] = []
        watcher = WebSocketChannel(hub.url, nick="watcher", on_status=statuses.append)
        try:
            await watcher.subscribe("#ops")
            fake.add(ToolCalls(("run_code", {"code": "1 + 1"})), Reply("2"))
            async with running(Daemon(load_config(path, environ={}), env={})):
                started = time.monotonic()
                ack = await watcher.publish("#ops", "add")
                async with asyncio.timeout(WAIT):
                    async for message in watcher:
                        if message.sender == "asyncai" and message.thread == ack.thread:
                            break
                elapsed = time.monotonic() - started
        finally:
            await watcher.close()
    texts = [s.text for s in statuses]
    if elapsed < PROGRESS_GRACE:
        assert texts == [], (texts, elapsed)  # on a fast machine
    else:
        assert len(texts) <= 1 + int(elapsed - PROGRESS_GRACE), (texts, elapsed)


async def test_a_slow_run_shows_thinking_once_the_grace_is_over(tmp_path):
    """With the default grace: a run whose model is still thinking after half a second
    shows "thinking" then, never before; the reply follows when the model answers."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=False
        )
        shown = asyncio.Event()
        statuses: list[tuple[float, Status]] = []

        def seen(status: Status) -> None:
            statuses.append((time.monotonic(), status))
            shown.set()

        watcher = WebSocketChannel(hub.url, nick="watcher", on_status=seen)
        hold = Hold(Reply("done"))
        try:
            await watcher.subscribe("#ops")
            fake.add(hold)
            async with running(Daemon(load_config(path, environ={}), env={})):
                published = time.monotonic()
                ack = await watcher.publish("#ops", "think slowly")
                async with asyncio.timeout(WAIT):
                    await hold.arrived.wait()
                    await shown.wait()
                    hold.release.set()
                    async for message in watcher:
                        if message.sender == "asyncai" and message.thread == ack.thread:
                            break
        finally:
            await watcher.close()
    at, first = statuses[0]
    assert first.text == "thinking"
    assert first.thread == ack.thread
    assert at - published >= PROGRESS_GRACE
    assert message.text == "done"
