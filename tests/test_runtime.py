"""The runtime's scheduling rules, over the real store in a temporary file.

These tests are about scheduling (which prompt starts which run, when), so
the channel and the model are the fakes of tests/fakes/runtime_helpers.py;
the store is the real ``SessionsRuntimeStore`` over a SQLite file, and the
assertions read what it holds. What lands beyond statuses (records,
history, restarts) is tests/test_runtime_store.py; the end-to-end tests
with a real hub and daemon are tests/test_daemon*.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from daemon.errors import BackendError
from daemon.runtime.commands import RESET_BUSY, RESET_DONE, RESET_NONE, ToolsOffered
from daemon.runtime.complete import cancel_until_done, complete
from daemon.runtime.interrupted import INTERRUPTED_HEAD, INTERRUPTED_TAIL, interrupted_notice
from daemon.runtime.ports import (
    InboundMessage,
    RecordOutcome,
    RuntimeOptions,
    mentions,
    reply_client_id,
)
from daemon.runtime.scheduler import Runtime
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import ThreadKey, ToolDefinition
from sessions.model import PromptStatus, StartedCall
from sessions.store import Store
from tests.fakes.runtime_helpers import NICK, FakePublisher, ScriptedModel, msg
from tests.fakes.writer_jobs import count_jobs

Parts = tuple[SessionsRuntimeStore, FakePublisher, ScriptedModel]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionsRuntimeStore]:
    """The runtime's real store over a fresh SQLite file, closed after the test."""
    sessions = await Store(tmp_path / "asyncai.db").open()
    try:
        yield SessionsRuntimeStore(sessions)
    finally:
        await sessions.aclose()


@pytest.fixture
def parts(store: SessionsRuntimeStore) -> Parts:
    """The real store, a fresh fake channel and a fresh scripted model."""
    return store, FakePublisher(), ScriptedModel()


def runtime_of(parts: Parts, **options: Any) -> Runtime:
    """A runtime over the store and the fakes."""
    store, pub, model = parts
    return Runtime(store=store, publisher=pub, run=model, options=RuntimeOptions(**options))


async def status(store: SessionsRuntimeStore, prompt_id: str) -> PromptStatus:
    """One recorded prompt's status, as stored."""
    [prompt] = await store.store.queries.get_prompts([prompt_id])
    return prompt.status


async def run_row(store: SessionsRuntimeStore, run_id: str) -> tuple[str, str | None]:
    """One run's ``(status, error)``, as stored."""
    found = await store.store.queries.run_metrics(run_id)
    assert found is not None, f"no run {run_id} in the store"
    run_status, _, error = found
    return run_status, error


def recorded_prompts(store: SessionsRuntimeStore) -> list[tuple[str, str]]:
    """Every recorded prompt as ``(sender, text)``, in id order.

    Read from the file on a read-only connection: the ``Store`` serves
    pending prompts and prompts by id, but has no query for "all of them".
    """
    uri = store.store.path.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return db.execute("SELECT sender, text FROM prompts ORDER BY id").fetchall()


class RecordingStore(SessionsRuntimeStore):
    """The real store, noting each prompt the runtime asks it to record.

    The note is taken when the call starts, before any I/O, so "never asked"
    is certain without waiting for the database.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.asked: list[str] = []

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Note the id, then record for real."""
        self.asked.append(message.id)
        return await super().record_prompt(message)


async def test_prompt_gets_reply_in_its_thread_and_is_marked_done(parts):
    """One prompt: one run, the reply in its thread replying to it, then the prompt done."""
    store, pub, model = parts
    rt = runtime_of(parts)
    m = msg("hello")
    assert await rt.submit(m)
    await model.wait_started(1)
    # the prompt (newer than every stored one), the run's row and claim go with the
    # store's next write (none yet), or alone within DEFER_WITHIN: a crash before
    # leaves the cursor before the prompt, which the channel then replays
    assert await store.store.queries.get_prompts([m.id]) == []
    await store.store.connection.flush()
    assert await status(store, m.id) == "running"
    assert pub.sent == []
    model.release(0)
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert pub.sent[0].text == "re: hello"
    assert (pub.sent[0].thread, pub.sent[0].reply_to) == (m.thread, m.id)
    assert pub.sent[0].client_id == reply_client_id("#ops", m.id)
    assert await status(store, m.id) == "done"
    assert await store.store.cursors.get_cursor("#ops") == m.id
    req = model.requests[0]
    assert (req.channel, req.thread_id, [p.id for p in req.prompts]) == ("#ops", m.thread, [m.id])


async def test_a_live_prompt_is_written_with_its_runs_end_and_a_replay_is_read(parts):
    """A prompt newer than every stored one is new without a read, and written with its
    run's end (one store job for both); a message the store may hold (an id not above
    the newest stored) is read and recorded at once, and a replay of an answered one
    starts nothing."""
    store, pub, model = parts
    rt = runtime_of(parts)
    older, live = msg("older"), msg("live")
    writes = count_jobs(store.store)
    assert await rt.submit(live)
    await model.wait_started(1)
    assert writes == []
    model.release(0)
    await pub.wait_for(1)
    assert len(writes) == 1  # the record, the run's start and its end, in one transaction
    assert await status(store, live.id) == "done"
    assert await store.store.cursors.get_cursor("#ops") == live.id

    assert not await rt.submit(live)  # the hub replays it: answered already
    assert await rt.submit(older)  # below the newest stored: read, then written at once
    assert await status(store, older.id) in ("queued", "running")
    await model.wait_started(2)
    model.release(1)
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert [p.text for p in model.requests[1].prompts] == ["older"]
    assert len(model.requests) == 2


async def test_prompts_during_a_run_coalesce_into_one_follow_up(parts):
    """Three prompts sent during a run become ONE follow-up run, in order, same thread."""
    store, pub, model = parts
    rt = runtime_of(parts)
    first = msg("first")
    await rt.submit(first)
    await model.wait_started(1)
    later = [msg(t, thread=first.thread) for t in ("two", "three", "four")]
    for m in later:
        await rt.submit(m)
    assert rt.counts().queued_prompts == 3
    assert len(model.requests) == 1  # never two runs on one thread
    model.release(0)
    await model.wait_started(2)
    model.release(1)
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    follow = model.requests[1]
    assert [p.text for p in follow.prompts] == ["two", "three", "four"]
    assert follow.thread_id == first.thread
    assert model.peak == 1
    assert pub.sent[1].text == "re: two | three | four"
    assert pub.sent[1].reply_to == later[-1].id
    assert [await status(store, m.id) for m in [first, *later]] == ["done"] * 4


async def test_concurrency_is_bounded_and_every_thread_is_answered(parts):
    """Six threads with max_concurrent_runs=2: never more than two runs, all answered, FIFO."""
    _, pub, model = parts
    rt = runtime_of(parts, max_concurrent_runs=2)
    roots = [msg(f"q{i}") for i in range(6)]
    for m in roots:
        await rt.submit(m)
    await model.wait_started(2)
    assert rt.counts().active_runs == 2
    assert rt.counts().waiting_threads == 4
    for i in range(6):  # each release frees the slot for the next waiting thread
        await model.wait_started(min(i + 2, 6))
        model.release(i)
    await pub.wait_for(6)
    await rt.shutdown(grace=1)
    assert model.peak == 2
    assert [r.prompts[0].text for r in model.requests] == [f"q{i}" for i in range(6)]
    assert rt.counts().active_runs == 0


async def test_a_burst_blocks_intake_at_the_queue_bound(parts):
    """With max_queued_prompts prompts waiting, submit blocks until a run takes them."""
    store, pub, model = parts
    recording = RecordingStore(store.store)
    rt = runtime_of((recording, pub, model), max_concurrent_runs=1, max_queued_prompts=2)
    await rt.submit(msg("running"))
    await model.wait_started(1)
    await rt.submit(msg("waits 1"))
    last_taken = msg("waits 2")
    await rt.submit(last_taken)
    third = msg("blocked")
    blocked = asyncio.create_task(rt.submit(third))
    for _ in range(20):  # let the loop run: the submit must still be parked
        await asyncio.sleep(0)
    assert not blocked.done()
    assert third.id not in recording.asked  # not even recorded: the cursor did not move past it
    assert await store.store.queries.get_prompts([third.id]) == []
    await store.store.connection.flush()  # the records put off (issue 31), written
    assert await store.store.cursors.get_cursor("#ops") == last_taken.id
    model.release(0)
    async with asyncio.timeout(5):
        assert await blocked
    model.release_all()
    await pub.wait_for(4)
    await rt.shutdown(grace=1)
    assert await status(store, third.id) == "done"


async def test_stop_cancels_the_active_run_and_drops_the_queue(parts):
    """`!stop` cancels the run, records it interrupted, drops queued prompts, says so."""
    store, pub, model = parts
    rt = runtime_of(parts)
    m = msg("long job")
    await rt.submit(m)
    await model.wait_started(1)
    queued = msg("and then this", thread=m.thread)
    await rt.submit(queued)
    assert not await rt.submit(msg("!stop", thread=m.thread, sender="bob"))
    await pub.wait_for(1)
    assert model.cancelled == [model.requests[0].run_id]
    assert pub.sent[0].text == "Stopped by bob."
    assert pub.sent[0].reply_to == m.id
    assert await run_row(store, model.requests[0].run_id) == ("interrupted", "stopped by bob")
    assert await status(store, m.id) == "failed"
    assert await status(store, queued.id) == "failed"
    assert "!stop" not in [text for _, text in recorded_prompts(store)]
    # The thread takes new prompts afterwards.
    after = msg("fresh start", thread=m.thread)
    assert await rt.submit(after)
    await model.wait_started(2)
    model.release(1)
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert [p.text for p in model.requests[1].prompts] == ["fresh start"]


async def test_stop_without_a_run_is_ignored(parts):
    """`!stop` in an idle thread starts nothing and publishes nothing."""
    store, pub, model = parts
    rt = runtime_of(parts)
    stop = msg("!stop")
    assert not await rt.submit(stop)
    await rt.shutdown(grace=1)
    assert pub.sent == []
    assert model.requests == []
    assert recorded_prompts(store) == []
    assert await store.store.cursors.get_cursor("#ops") == stop.id


async def test_own_messages_are_never_answered(parts):
    """The daemon's own messages (its nick) are skipped, the cursor still moves."""
    store, _, model = parts
    rt = runtime_of(parts)
    own = msg("my earlier reply", sender=NICK)
    assert not await rt.submit(own)
    await rt.shutdown(grace=1)
    assert model.requests == []
    assert recorded_prompts(store) == []
    assert await store.store.cursors.get_cursor("#ops") == own.id


async def test_shared_channel_answers_mentions_and_its_threads_only(parts):
    """In a shared channel: chatter ignored, a mention answered, then its thread followed."""
    _, pub, model = parts
    model.release_all()
    rt = runtime_of(parts, shared_channels=frozenset({"#ops"}))
    assert not await rt.submit(msg("people talking"))
    ask = msg("@asyncai how many pods?")
    assert await rt.submit(ask)
    await pub.wait_for(1)
    assert await rt.submit(msg("and nodes?", thread=ask.thread))  # no mention, known thread
    await pub.wait_for(2)
    assert await rt.submit(msg("not shared here", channel="#private"))
    await pub.wait_for(3)
    await rt.shutdown(grace=1)
    assert [r.prompts[0].text for r in model.requests] == [
        "@asyncai how many pods?",
        "and nodes?",
        "not shared here",
    ]


async def test_a_shared_channels_follow_up_right_after_a_mention_is_answered(parts):
    """The mention's record is put off to its run's write (issue 31); a follow-up with no
    mention that comes before that write still finds the thread known: the lookup
    writes what is put off before it reads."""
    _, pub, model = parts
    rt = runtime_of(parts, shared_channels=frozenset({"#ops"}))
    ask = msg("@asyncai how many pods?")
    assert await rt.submit(ask)
    await model.wait_started(1)
    assert await rt.submit(msg("and nodes?", thread=ask.thread))  # the run still going
    model.release_all()
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert [p.text for r in model.requests for p in r.prompts] == [
        "@asyncai how many pods?",
        "and nodes?",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@asyncai hi", True),
        ("asyncai: list pods", True),
        ("hey AsyncAI, what now?", True),
        ("asyncai", True),
        ("asyncaibot is someone else", False),
        ("see x-asyncai", False),
        ("mail me@asyncai.example", False),
        ("nothing here", False),
    ],
)
def test_mentions(text, expected):
    """A mention is the nick as a word, optionally with @, in any case."""
    assert mentions(text, NICK) is expected


async def test_allow_list_ignores_other_senders_with_a_log_line(parts):
    """With allowed_senders, everyone else is ignored and logged."""
    store, pub, model = parts
    model.release_all()
    rt = runtime_of(parts, allowed_senders=frozenset({"alice"}))
    with capture_logs() as logs:
        assert not await rt.submit(msg("let me in", sender="mallory"))
    assert await rt.submit(msg("hi", sender="alice"))
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    ignored = [e for e in logs if e["event"] == "runtime.sender_ignored"]
    assert [e["sender"] for e in ignored] == ["mallory"]
    assert [sender for sender, _ in recorded_prompts(store)] == ["alice"]


async def test_run_deadline_fails_the_run_with_a_short_reply(parts):
    """A run past max_run_seconds is cancelled: failed row, error reply, prompt failed."""
    store, pub, model = parts
    rt = runtime_of(
        parts, max_run_seconds=0.05
    )  # the model holds forever: only the deadline ends it
    m = msg("slow")
    await rt.submit(m)
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert pub.sent[0].text == "Sorry, this run failed: run deadline of 0.05 s exceeded"
    assert (await run_row(store, model.requests[0].run_id))[0] == "failed"
    assert await status(store, m.id) == "failed"


async def test_failed_run_replies_briefly_and_the_runtime_goes_on(parts):
    """A backend failure gives a short error reply and a failed row; the next prompt works."""
    store, pub, model = parts
    model.hold = False
    model.fail_with = BackendError("model endpoint unreachable: http://127.0.0.1:9/v1 " + "x" * 500)
    rt = runtime_of(parts)
    bad = msg("first")
    await rt.submit(bad)
    await pub.wait_for(1)
    assert pub.sent[0].text.startswith("Sorry, this run failed: BackendError: model endpoint")
    assert len(pub.sent[0].text) <= 300
    model.fail_with = None
    await rt.submit(msg("second"))
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert pub.sent[1].text == "re: second"
    # Read after shutdown: the store is written just after the hub's ack.
    assert (await run_row(store, model.requests[0].run_id))[0] == "failed"
    assert await status(store, bad.id) == "failed"


async def test_shutdown_waits_the_grace_then_interrupts_and_requeues(parts):
    """Shutdown: no new prompts; a run still going after the grace is recorded interrupted
    and its prompt goes back to queued for the next start."""
    store, pub, model = parts
    rt = runtime_of(parts)
    m = msg("never finishes")
    await rt.submit(m)
    await model.wait_started(1)
    await rt.shutdown(grace=0)
    assert model.cancelled == [model.requests[0].run_id]
    assert await run_row(store, model.requests[0].run_id) == (
        "interrupted",
        "daemon shutting down",
    )
    assert await status(store, m.id) == "queued"
    late = msg("too late")
    assert not await rt.submit(late)
    assert await store.store.queries.get_prompts([late.id]) == []
    assert pub.sent == []


async def test_shutdown_lets_runs_within_the_grace_finish(parts):
    """A run that ends within the grace period is answered and marked done."""
    store, pub, model = parts
    rt = runtime_of(parts)
    m = msg("almost done")
    await rt.submit(m)
    await model.wait_started(1)
    stopping = asyncio.create_task(rt.shutdown(grace=5))
    await asyncio.sleep(0)
    model.release(0)
    async with asyncio.timeout(5):
        await stopping
    assert await status(store, m.id) == "done"
    assert pub.sent[0].text == "re: almost done"


async def test_recover_runs_pending_prompts_once_coalesced_per_thread(parts):
    """After a restart, prompts recorded but not done run again, one run per thread;
    replays of answered prompts are ignored."""
    store, pub, model = parts
    model.release_all()
    root = msg("asked before the crash")
    more = msg("and this", thread=root.thread)
    answered = msg("answered long ago")
    await store.record_prompt(root)
    await store.record_prompt(more)
    await store.record_prompt(answered)
    await store.set_prompt_status([answered.id], "done")
    rt = runtime_of(parts)
    assert await rt.recover() == 2
    # The channel replays from the cursor: nothing is scheduled twice.
    assert not await rt.submit(root)
    assert not await rt.submit(answered)
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert len(model.requests) == 1
    assert [p.text for p in model.requests[0].prompts] == ["asked before the crash", "and this"]
    assert [await status(store, p.id) for p in (root, more)] == ["done", "done"]


async def test_an_unacked_reply_waits_in_the_outbox_for_the_next_start(parts):
    """When the hub never acks the reply, the run is done and its reply stays in the
    outbox: the next start publishes it (same client_id) without asking the model again."""
    store, pub, model = parts
    model.hold = False
    pub.fail = True
    rt = runtime_of(parts)
    m = msg("hello")
    await rt.submit(m)
    await model.wait_started(1)
    await rt.shutdown(grace=1)
    assert await status(store, m.id) == "done"
    assert (await run_row(store, model.requests[0].run_id))[0] == "done"
    [waiting] = await store.unacked_replies()
    assert (waiting.text, waiting.prompt_ids) == ("re: hello", (m.id,))

    pub.fail = False
    again = runtime_of(parts)
    assert await again.recover() == 0  # nothing to run
    await again.shutdown(grace=1)
    assert len(model.requests) == 1
    [sent] = pub.sent
    assert (sent.text, sent.reply_to, sent.client_id) == (
        "re: hello",
        m.id,
        reply_client_id("#ops", m.id),
    )
    assert await store.unacked_replies() == []


def test_options_are_checked():
    """Nonsense limits are refused when the runtime is configured."""
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        RuntimeOptions(max_concurrent_runs=0)
    with pytest.raises(ValueError, match="max_queued_prompts"):
        RuntimeOptions(max_queued_prompts=0)


# ---- the interrupted notice and the shield (issue 13) ----------------------------


def test_the_interrupted_notice_lists_each_call_and_asks_again():
    """The notice says the run was interrupted, lists the calls in order with outcomes
    people read (a call cut off: 'did not finish (outcome unknown)'), asks to ask again."""
    text = interrupted_notice(
        [
            StartedCall("get_object", {"name": "web"}, False, "cancelled"),
            StartedCall("delete_object", {"name": "old", "namespace": "default"}, True, "ok"),
            StartedCall("apply", {"manifest": "x" * 100}, True, "cancelled"),
            StartedCall("scale", {"replicas": 3}, True, "unknown"),
            StartedCall("rm", {}, True, "error"),
        ]
    )
    assert text.splitlines() == [
        INTERRUPTED_HEAD,
        "- get_object(name='web'): cancelled",
        "- delete_object(name='old', namespace='default') [mutating]: ok",
        "- apply(manifest='" + "x" * 38 + "…) [mutating]: cancelled before it finished "
        "(it may have taken effect)",
        "- scale(replicas=3) [mutating]: did not finish (outcome unknown)",
        "- rm() [mutating]: failed",
        INTERRUPTED_TAIL,
    ]


def test_the_interrupted_notice_counts_calls_past_thirty():
    """Past 30 calls the notice counts the rest, and how many of them were mutating."""
    calls = [StartedCall("get", {"i": i}, i % 2 == 0, "ok") for i in range(40)]
    lines = interrupted_notice(calls).splitlines()
    assert len(lines) == 1 + 30 + 1 + 1
    assert lines[-2] == "- … and 10 more (5 of them mutating)"


async def test_complete_finishes_its_work_then_passes_the_cancellation_on():
    """complete(): a caller cancelled mid-work waits for the work to end, then is cancelled."""
    release, finished = asyncio.Event(), []

    async def work() -> str:
        await release.wait()
        finished.append("done")
        return "done"

    caller = asyncio.create_task(complete(work()))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    caller.cancel()  # twice: still waits
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert finished == ["done"]
    assert await complete(work()) == "done"


async def test_cancel_until_done_ends_a_task_that_swallows_a_cancellation():
    """A task that catches the first CancelledError and goes on waiting (as nats-py's
    publish does under a cluster daemon's intake) is cancelled again until it ends."""
    caught: list[int] = []

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            caught.append(1)  # swallowed, as the library does
        await asyncio.Event().wait()  # back to reading: only a second cancel ends it

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await cancel_until_done(task, every=0.01)
    assert task.cancelled()
    assert caught == [1]

    async def failing() -> None:
        raise ValueError("the intake's own failure")

    failed = asyncio.create_task(failing())
    await asyncio.sleep(0)
    await cancel_until_done(failed)  # not raised here
    assert isinstance(failed.exception(), ValueError)


async def test_reset_empties_an_idle_threads_repl_and_says_so(parts):
    """`!reset` in an idle thread calls the executor's reset and replies; nothing runs."""
    store, pub, model = parts
    resets: list[ThreadKey] = []

    async def reset(thread: ThreadKey) -> None:
        resets.append(thread)

    rt = Runtime(store=store, publisher=pub, run=model, reset=reset)
    command = msg("!reset")
    assert not await rt.submit(command)
    await pub.wait_for(1)
    assert resets == [ThreadKey(command.channel, command.thread)]
    assert pub.sent[0].text == RESET_DONE
    assert model.requests == []
    assert recorded_prompts(store) == []
    await rt.shutdown(grace=1)


async def test_reset_of_a_busy_thread_asks_to_stop_first(parts):
    """While the thread's run goes on, `!reset` changes nothing and says why."""
    store, pub, model = parts
    resets: list[ThreadKey] = []

    async def reset(thread: ThreadKey) -> None:
        resets.append(thread)

    rt = Runtime(store=store, publisher=pub, run=model, reset=reset)
    m = msg("long job")
    await rt.submit(m)
    await model.wait_started(1)
    await rt.submit(msg("!reset", thread=m.thread))
    await pub.wait_for(1)
    assert pub.sent[0].text == RESET_BUSY
    assert resets == []
    await rt.shutdown(grace=0)


async def test_reset_without_a_repl_says_there_is_none(parts):
    """Direct tool mode has no REPL: `!reset` says so."""
    _, pub, _ = parts
    rt = runtime_of(parts)
    await rt.submit(msg("!reset"))
    await pub.wait_for(1)
    assert pub.sent[0].text == RESET_NONE
    await rt.shutdown(grace=1)


async def test_a_channels_cap_holds_within_the_total_and_reserves_nothing(parts):
    """#ops capped at 1 of 3 slots: its second thread waits in its place while #help's
    threads behind it start; when #ops' run ends, its next thread takes the slot."""
    _, pub, model = parts
    rt = runtime_of(parts, max_concurrent_runs=3, channel_max_concurrent={"#ops": 1})
    ops = [msg("ops one"), msg("ops two")]
    helps = [msg("help one", channel="#help"), msg("help two", channel="#help")]
    for m in [*ops, *helps]:
        await rt.submit(m)
    await model.wait_started(3)
    assert [r.prompts[0].text for r in model.requests] == ["ops one", "help one", "help two"]
    assert rt.counts().waiting_threads == 1  # ops two, at #ops' cap though a slot is free
    model.release(0)
    await model.wait_started(4)
    assert model.requests[3].prompts[0].text == "ops two"
    model.release_all()
    await pub.wait_for(4)
    await rt.shutdown(grace=1)


def test_a_channels_cap_is_at_least_one():
    """A cap of 0 would never run the channel: refused like max_concurrent_runs = 0."""
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        RuntimeOptions(channel_max_concurrent={"#ops": 0})


async def test_tools_answers_with_the_channels_tools_and_asks_no_model(parts):
    """!tools is answered in the thread from the tools function of the message's channel;
    no run starts and the message is not a prompt."""
    store, pub, model = parts
    asked: list[str] = []

    async def tools(channel: str) -> ToolsOffered:
        asked.append(channel)
        echo = ToolDefinition("echo", "Echo the text.\nMore.", {}, server="test")
        return ToolsOffered([echo], "deny", ["kcp"])

    rt = Runtime(store=store, publisher=pub, run=model, tools=tools)
    await rt.submit(msg("!tools", channel="#help"))
    await pub.wait_for(1)
    assert asked == ["#help"]
    assert pub.sent[0].text == (
        "Tools in #help (1); approvals: deny (a call that can change something is refused):\n"
        "- test.echo: Echo the text.\n"
        "Not started (retried in the background; their tools join once up): kcp."
    )
    assert model.requests == []
    await rt.shutdown(grace=1)


def test_a_run_opens_its_thread_when_it_answers_the_root() -> None:
    """A root's id is its thread's id: a run holding it (alone or with follow-ups queued
    behind it) opens the thread; a follow-up run alone does not."""
    from daemon.runtime.runs import Prompt, RunRequest, opens_thread

    root, later = Prompt("m1", "alice", "a"), Prompt("m2", "alice", "b")
    assert opens_thread("m1", [root])
    assert opens_thread("m1", [root, later])
    assert not opens_thread("m1", [later])
    assert not RunRequest("r", "#ops", "m1", [], [later]).opens_thread
