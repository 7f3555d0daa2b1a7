"""The runtime's scheduling rules, with in-memory fakes for the store, channel and model.

These tests are about scheduling only (which prompt starts which run, when),
so the boundaries are fakes: the end-to-end tests with a real hub, store and
daemon are in tests/test_daemon*.py.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import pytest
from structlog.testing import capture_logs

from daemon.errors import BackendError
from daemon.runtime.runs import HistoryTurn, RunRequest, RunResult
from daemon.runtime.scheduler import (
    InboundMessage,
    PromptStatus,
    RecordOutcome,
    Runtime,
    RuntimeOptions,
    mentions,
    reply_client_id,
)

NICK = "asyncai"


@dataclass
class FakeStore:
    """The store protocol in memory, remembering every call."""

    prompts: dict[str, tuple[InboundMessage, PromptStatus]] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    cursors: dict[str, str] = field(default_factory=dict)

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Idempotent by id; advances the cursor."""
        self.cursors[message.channel] = message.id
        if message.id in self.prompts:
            status = self.prompts[message.id][1]
            return "finished" if status in ("done", "failed") else "pending"
        self.prompts[message.id] = (message, "queued")
        return "new"

    async def advance_cursor(self, channel: str, message_id: str) -> None:
        """Remember the last handled id."""
        self.cursors[channel] = message_id

    async def knows_thread(self, channel: str, thread_id: str) -> bool:
        """Whether any prompt of this thread was recorded."""
        return any(m.channel == channel and m.thread == thread_id for m, _ in self.prompts.values())

    async def pending_prompts(self) -> list[InboundMessage]:
        """Recorded but not done, in id order."""
        return sorted(
            (m for m, s in self.prompts.values() if s in ("queued", "running")),
            key=lambda m: m.id,
        )

    async def start_run(
        self, run_id: str, channel: str, thread_id: str, prompt_ids: list[str]
    ) -> None:
        """Run row plus prompts running."""
        self.runs[run_id] = {"thread": thread_id, "prompts": prompt_ids, "status": "running"}
        for pid in prompt_ids:
            self.prompts[pid] = (self.prompts[pid][0], "running")

    async def history(self, channel: str, thread_id: str) -> list[HistoryTurn]:
        """No history in these tests."""
        return []

    async def finish_run(
        self, run_id: str, result: RunResult, prompt_ids: list[str], prompt_status: PromptStatus
    ) -> None:
        """Status of the run and its prompts together."""
        self.runs[run_id].update(status=result.status, error=result.error)
        for pid in prompt_ids:
            self.prompts[pid] = (self.prompts[pid][0], prompt_status)

    async def set_prompt_status(self, prompt_ids: list[str], status: PromptStatus) -> None:
        """Status of prompts no run finished."""
        for pid in prompt_ids:
            self.prompts[pid] = (self.prompts[pid][0], status)

    def status(self, pid: str) -> PromptStatus:
        """One prompt's status."""
        return self.prompts[pid][1]


@dataclass
class Published:
    """One reply the fake channel acked."""

    channel: str
    text: str
    thread: str
    reply_to: str
    client_id: str


class FakePublisher:
    """The channel's publish side: acks everything unless told to fail."""

    def __init__(self) -> None:
        self.sent: list[Published] = []
        self.fail = False
        self.arrived = asyncio.Event()
        self._ids = itertools.count(1)

    @property
    def nick(self) -> str:
        """The daemon's nick."""
        return NICK

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Ack with a new id, or raise when told to fail."""
        if self.fail:
            raise ConnectionError("hub unreachable")
        self.sent.append(Published(channel, text, thread, reply_to, client_id))
        self.arrived.set()
        return f"r{next(self._ids)}"

    async def wait_for(self, count: int) -> None:
        """Until ``count`` replies were published (bounded)."""
        async with asyncio.timeout(5):
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()


class ScriptedModel:
    """The run function: each run waits until the test releases it (no sleeps)."""

    def __init__(self, *, hold: bool = True) -> None:
        self.hold = hold
        self.requests: list[RunRequest] = []
        self.active = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.cancelled: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        self.fail_with: BaseException | None = None

    async def __call__(self, request: RunRequest) -> RunResult:
        """Record the request, wait for release, answer with the prompt texts."""
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        gate = self._gates.setdefault(request.run_id, asyncio.Event())
        self.started.set()
        try:
            if self.hold:
                await gate.wait()
            if self.fail_with is not None:
                raise self.fail_with
            return RunResult(reply="re: " + " | ".join(p.text for p in request.prompts))
        except asyncio.CancelledError:
            self.cancelled.append(request.run_id)
            raise
        finally:
            self.active -= 1

    async def wait_started(self, count: int) -> None:
        """Until ``count`` runs have started (bounded)."""
        async with asyncio.timeout(5):
            while len(self.requests) < count:
                self.started.clear()
                await self.started.wait()

    def release(self, index: int) -> None:
        """Let the ``index``-th run answer."""
        run_id = self.requests[index].run_id
        self._gates.setdefault(run_id, asyncio.Event()).set()

    def release_all(self) -> None:
        """Let every run answer, now and later."""
        self.hold = False
        for gate in self._gates.values():
            gate.set()


_ids = itertools.count(1)


def msg(text: str, *, thread: str | None = None, sender: str = "alice", channel: str = "#ops"):
    """A channel message with a fresh sortable id (a root when no thread is given)."""
    mid = f"m{next(_ids):06d}"
    return InboundMessage(channel=channel, id=mid, thread=thread or mid, sender=sender, text=text)


@pytest.fixture
def parts():
    """A fresh store, channel and model."""
    return FakeStore(), FakePublisher(), ScriptedModel()


def runtime_of(parts, **options) -> Runtime:
    """A runtime over the fakes."""
    store, pub, model = parts
    return Runtime(store=store, publisher=pub, run=model, options=RuntimeOptions(**options))


async def test_prompt_gets_reply_in_its_thread_and_is_marked_done(parts):
    """One prompt: one run, the reply in its thread replying to it, then the prompt done."""
    store, pub, model = parts
    rt = runtime_of(parts)
    m = msg("hello")
    assert await rt.submit(m)
    await model.wait_started(1)
    assert store.status(m.id) == "running"
    assert pub.sent == []
    model.release(0)
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert pub.sent[0].text == "re: hello"
    assert (pub.sent[0].thread, pub.sent[0].reply_to) == (m.thread, m.id)
    assert pub.sent[0].client_id == reply_client_id("#ops", m.id)
    assert store.status(m.id) == "done"
    assert store.cursors["#ops"] == m.id
    req = model.requests[0]
    assert (req.channel, req.thread_id, [p.id for p in req.prompts]) == ("#ops", m.thread, [m.id])


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
    assert all(store.status(m.id) == "done" for m in [first, *later])


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
    rt = runtime_of(parts, max_concurrent_runs=1, max_queued_prompts=2)
    await rt.submit(msg("running"))
    await model.wait_started(1)
    await rt.submit(msg("waits 1"))
    await rt.submit(msg("waits 2"))
    third = msg("blocked")
    blocked = asyncio.create_task(rt.submit(third))
    for _ in range(20):  # let the loop run: the submit must still be parked
        await asyncio.sleep(0)
    assert not blocked.done()
    assert third.id not in store.prompts  # not even recorded: the cursor did not move past it
    model.release(0)
    async with asyncio.timeout(5):
        assert await blocked
    model.release_all()
    await pub.wait_for(4)
    await rt.shutdown(grace=1)


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
    run = store.runs[model.requests[0].run_id]
    assert (run["status"], run["error"]) == ("interrupted", "stopped by bob")
    assert store.status(m.id) == "failed"
    assert store.status(queued.id) == "failed"
    assert "!stop" not in [p.text for p, _ in store.prompts.values()]
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
    assert store.prompts == {}
    assert store.cursors["#ops"] == stop.id


async def test_own_messages_are_never_answered(parts):
    """The daemon's own messages (its nick) are skipped, the cursor still moves."""
    store, _, model = parts
    rt = runtime_of(parts)
    own = msg("my earlier reply", sender=NICK)
    assert not await rt.submit(own)
    await rt.shutdown(grace=1)
    assert model.requests == []
    assert store.prompts == {}
    assert store.cursors["#ops"] == own.id


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
    assert [p.sender for p, _ in store.prompts.values()] == ["alice"]


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
    assert store.runs[model.requests[0].run_id]["status"] == "failed"
    assert store.status(m.id) == "failed"


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
    assert store.runs[model.requests[0].run_id]["status"] == "failed"
    assert store.status(bad.id) == "failed"
    model.fail_with = None
    await rt.submit(msg("second"))
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert pub.sent[1].text == "re: second"


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
    run = store.runs[model.requests[0].run_id]
    assert (run["status"], run["error"]) == ("interrupted", "daemon shutting down")
    assert store.status(m.id) == "queued"
    late = msg("too late")
    assert not await rt.submit(late)
    assert late.id not in store.prompts
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
    assert store.status(m.id) == "done"
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
    assert store.status(root.id) == store.status(more.id) == "done"


async def test_unacked_reply_leaves_prompts_pending(parts):
    """When the hub never acks the reply, the prompt stays queued for the next start."""
    store, pub, model = parts
    model.hold = False
    pub.fail = True
    rt = runtime_of(parts)
    m = msg("hello")
    await rt.submit(m)
    await model.wait_started(1)
    await rt.shutdown(grace=1)
    assert store.status(m.id) == "queued"
    assert store.runs[model.requests[0].run_id]["status"] == "done"


def test_options_are_checked():
    """Nonsense limits are refused when the runtime is configured."""
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        RuntimeOptions(max_concurrent_runs=0)
    with pytest.raises(ValueError, match="max_queued_prompts"):
        RuntimeOptions(max_queued_prompts=0)
