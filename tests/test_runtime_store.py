"""The runtime over the real sessions store (SQLite on disk): what lands, and restarts.

The channel and the model are fakes here (the scheduling fakes of
tests/test_runtime.py); the store is the real one, so these tests check the
translation in daemon/runtime/store.py and the durability rules end to end
inside one process.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest

from daemon.runtime.audit import audit_observer
from daemon.runtime.interrupted import INTERRUPTED_TAIL, interrupted_notice
from daemon.runtime.ports import RuntimeOptions, reply_client_id
from daemon.runtime.runs import RunRequest, RunResult, ToolUseContext, current_tool_use
from daemon.runtime.scheduler import Runtime
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import AuditEntry
from sessions.ids import now_iso
from sessions.model import CallOutcome, Record, StartedCall, ToolCallRow
from sessions.store import Store
from tests.fakes.runtime_helpers import FakePublisher, ScriptedModel, msg
from tests.fakes.writer_jobs import count_jobs


class RecordingModel:
    """A run function that answers at once and returns transcript records."""

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    async def __call__(self, request: RunRequest) -> RunResult:
        """User record with the coalesced prompts, assistant record with the reply."""
        self.requests.append(request)
        text = "\n\n".join(p.text for p in request.prompts)
        reply = f"answer to: {text}"
        records = [
            Record(
                uuid=str(uuid.uuid4()),
                type="user",
                timestamp=now_iso(),
                message={"role": "user", "content": [{"type": "text", "text": text}]},
            ),
            Record(
                uuid=str(uuid.uuid4()),
                type="assistant",
                timestamp=now_iso(),
                message={
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "scripted",
                    "content": [{"type": "text", "text": reply}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            ),
        ]
        return RunResult(reply=reply, records=records)


@pytest.fixture
async def store(tmp_path):
    """A real store in a fresh file."""
    async with Store(tmp_path / "asyncai.db") as s:
        yield s


async def test_run_lands_in_the_store_and_feeds_the_next_runs_history(store):
    """Records, run status, prompt status and cursor land; the next run sees the text."""
    pub, model = FakePublisher(), RecordingModel()
    rt = Runtime(store=SessionsRuntimeStore(store), publisher=pub, run=model)
    first = msg("how many pods?")
    await rt.submit(first)
    await pub.wait_for(1)
    second = msg("and nodes?", thread=first.thread)
    await rt.submit(second)
    await pub.wait_for(2)
    await rt.shutdown(grace=1)

    assert [(t.role, t.text) for t in model.requests[1].history] == [
        ("user", "how many pods?"),
        ("assistant", "answer to: how many pods?"),
    ]
    prompts = await store.queries.get_prompts([first.id, second.id])
    assert [p.status for p in prompts] == ["done", "done"]
    status, _, error = await store.queries.run_metrics(model.requests[0].run_id)
    assert (status, error) == ("done", None)
    assert await store.cursors.get_cursor("#ops") == second.id
    transcript = await store.queries.transcript(first.thread, "#ops")
    assert [r.type for r in transcript] == ["user", "assistant", "user", "assistant"]
    assert transcript[2].parent_uuid == transcript[1].uuid


async def test_restart_answers_unfinished_prompts_exactly_once(tmp_path):
    """A run cut off by a crash is interrupted at the next start and its prompt is
    answered once; a replay of an answered prompt is not answered again."""
    path = tmp_path / "asyncai.db"
    answered = msg("answered before the crash")
    cut = msg("cut off mid-run")
    async with Store(path) as before:
        adapter = SessionsRuntimeStore(before)
        await adapter.record_prompt(answered)
        await before.runs.start_run("run-old", "#ops", answered.thread, [answered.id])
        await before.runs.finish_run(
            "run-old", "done", [], RunResult("x").metrics, [answered.id], "done"
        )
        await adapter.record_prompt(cut)
        await before.runs.start_run("run-cut", "#ops", cut.thread, [cut.id])
        # ... and the process dies here: no finish_run.

    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as after:
        rt = Runtime(store=SessionsRuntimeStore(after), publisher=pub, run=model)
        assert await rt.recover() == 1
        assert not await rt.submit(answered)  # the hub replays from an older cursor
        assert not await rt.submit(cut)
        await pub.wait_for(1)
        await rt.shutdown(grace=1)
        assert [r.prompts[0].id for r in model.requests] == [cut.id]
        assert (await after.queries.run_metrics("run-cut"))[0] == "interrupted"
        assert [p.status for p in await after.queries.get_prompts([cut.id])] == ["done"]
    assert len(pub.sent) == 1


async def test_shutdown_requeues_and_the_next_start_answers(tmp_path):
    """SIGTERM mid-run: the run is recorded interrupted, the prompt answered after restart."""
    path = tmp_path / "asyncai.db"
    held = ScriptedModel()
    m = msg("long job")
    async with Store(path) as first:
        rt = Runtime(store=SessionsRuntimeStore(first), publisher=FakePublisher(), run=held)
        await rt.submit(m)
        await held.wait_started(1)
        await rt.shutdown(grace=0)
        assert (await first.queries.run_metrics(held.requests[0].run_id))[0] == "interrupted"
        assert [p.status for p in await first.queries.get_prompts([m.id])] == ["queued"]

    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as second:
        rt = Runtime(store=SessionsRuntimeStore(second), publisher=pub, run=model)
        assert await rt.recover() == 1
        await pub.wait_for(1)
        await rt.shutdown(grace=1)
        assert [p.status for p in await second.queries.get_prompts([m.id])] == ["done"]


async def test_shared_channel_follows_threads_known_to_the_store(store):
    """In a shared channel, a thread with recorded prompts counts as taken part in."""
    pub, model = FakePublisher(), RecordingModel()
    options = RuntimeOptions(shared_channels=frozenset({"#ops"}))
    rt = Runtime(store=SessionsRuntimeStore(store), publisher=pub, run=model, options=options)
    chatter = msg("people talking")
    assert not await rt.submit(chatter)
    ask = msg("asyncai: status?")
    assert await rt.submit(ask)
    await pub.wait_for(1)
    assert await rt.submit(msg("more detail please", thread=ask.thread))
    await pub.wait_for(2)
    await rt.shutdown(grace=1)
    assert await store.queries.get_prompts([chatter.id]) == []
    assert await store.cursors.get_cursor("#ops") > chatter.id


# ---- no silent re-runs (issue 13) ------------------------------------------------


def _call(
    run_id: str, thread: str, tool: str, *, mutating: bool, outcome: CallOutcome
) -> ToolCallRow:
    """An audit row as the observer writes it."""
    return ToolCallRow(
        run_id=run_id,
        thread_id=thread,
        tool=tool,
        arguments={"name": "web"},
        is_error=False,
        bytes=0,
        mutating=mutating,
        started=now_iso(),
        duration_ms=0.0,
        outcome=outcome,
    )


async def _crashed_run(path, m, *calls: tuple[str, bool, CallOutcome]) -> None:
    """A run that started ``calls`` (tool, mutating, outcome) and then the process died."""
    async with Store(path) as before:
        await SessionsRuntimeStore(before).record_prompt(m)
        await before.runs.start_run("run-cut", "#ops", m.thread, [m.id])
        for tool, mutating, outcome in calls:
            await before.audit.add_tool_call(
                _call("run-cut", m.thread, tool, mutating=mutating, outcome=outcome)
            )
        # ... and the process dies here: no finish_run.


async def test_a_crash_after_a_mutating_call_is_not_run_again_and_the_thread_is_told(tmp_path):
    """A run cut off by a crash after it started a mutating call is not run again: its
    thread gets the interrupted notice listing the calls, and its prompt is failed."""
    path, m = tmp_path / "asyncai.db", msg("scale web to 3")
    await _crashed_run(path, m, ("get_object", False, "ok"), ("scale", True, "started"))
    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as after:
        rt = Runtime(store=SessionsRuntimeStore(after), publisher=pub, run=model)
        assert await rt.recover() == 0
        await rt.shutdown(grace=1)
        assert model.requests == []
        [notice] = pub.sent
        assert (notice.thread, notice.reply_to) == (m.thread, m.id)
        assert notice.client_id == reply_client_id("#ops", m.id)
        assert notice.text == interrupted_notice(
            [
                StartedCall("get_object", {"name": "web"}, False, "ok"),
                StartedCall("scale", {"name": "web"}, True, "unknown"),
            ]
        )
        assert notice.text.splitlines()[1:3] == [
            "- get_object(name='web'): ok",
            "- scale(name='web') [mutating]: did not finish (outcome unknown)",
        ]
        assert [p.status for p in await after.queries.get_prompts([m.id])] == ["failed"]
        assert (await after.queries.run_metrics("run-cut") or ("?",))[0] == "interrupted"
        assert await after.queries.pending_prompts() == []


async def test_a_crash_after_only_read_only_calls_is_run_again(tmp_path):
    """A run cut off after read-only calls only is run again, as before: no notice."""
    path, m = tmp_path / "asyncai.db", msg("how many pods?")
    await _crashed_run(path, m, ("list_pods", False, "ok"), ("get_logs", False, "started"))
    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as after:
        rt = Runtime(store=SessionsRuntimeStore(after), publisher=pub, run=model)
        assert await rt.recover() == 1
        await pub.wait_for(1)
        await rt.shutdown(grace=1)
        assert [r.prompts[0].id for r in model.requests] == [m.id]
        assert [p.text for p in pub.sent] == ["answer to: how many pods?"]
        assert [p.status for p in await after.queries.get_prompts([m.id])] == ["done"]


async def test_a_shutdown_after_a_mutating_call_is_not_run_again(tmp_path):
    """A run whose shutdown grace ran out after it started a mutating call: its prompt
    is queued at shutdown, and the next start posts the notice instead of running it."""
    path, m = tmp_path / "asyncai.db", msg("delete the old config map")

    async def mutating_then_hang(request: RunRequest) -> RunResult:
        await first.audit.add_tool_call(
            _call(request.run_id, request.thread_id, "delete_object", mutating=True, outcome="ok")
        )
        called.set()
        await asyncio.Event().wait()
        raise AssertionError("never answers")

    called = asyncio.Event()
    async with Store(path) as first:
        rt = Runtime(
            store=SessionsRuntimeStore(first), publisher=FakePublisher(), run=mutating_then_hang
        )
        await rt.submit(m)
        async with asyncio.timeout(5):
            await called.wait()
        await rt.shutdown(grace=0)
        assert [p.status for p in await first.queries.get_prompts([m.id])] == ["queued"]

    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as second:
        rt = Runtime(store=SessionsRuntimeStore(second), publisher=pub, run=model)
        assert await rt.recover() == 0
        await rt.shutdown(grace=1)
        assert model.requests == []
        [notice] = pub.sent
        assert "- delete_object(name='web') [mutating]: ok" in notice.text
        assert notice.text.endswith(INTERRUPTED_TAIL)
        assert [p.status for p in await second.queries.get_prompts([m.id])] == ["failed"]


async def test_an_unpublished_notice_keeps_the_prompt_pending_and_not_run(tmp_path):
    """When the notice cannot be published the prompt is neither run nor failed: the
    next start posts the notice."""
    path, m = tmp_path / "asyncai.db", msg("restart the api")
    await _crashed_run(path, m, ("restart", True, "started"))
    down, model = FakePublisher(), RecordingModel()
    down.fail = True
    async with Store(path) as second:
        rt = Runtime(store=SessionsRuntimeStore(second), publisher=down, run=model)
        assert await rt.recover() == 0
        await rt.shutdown(grace=1)
        assert [p.status for p in await second.queries.get_prompts([m.id])] == ["queued"]
    pub = FakePublisher()
    async with Store(path) as third:
        rt = Runtime(store=SessionsRuntimeStore(third), publisher=pub, run=model)
        assert await rt.recover() == 0
        await rt.shutdown(grace=1)
        assert model.requests == []
        assert len(pub.sent) == 1
        assert [p.status for p in await third.queries.get_prompts([m.id])] == ["failed"]


class HeldPublisher(FakePublisher):
    """Publishes only once released, so a test can cancel the run mid-publish."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Wait for the release, then ack."""
        self.entered.set()
        await self.release.wait()
        return await super().publish(
            channel, text, thread=thread, reply_to=reply_to, client_id=client_id
        )


async def test_shutdown_while_publishing_still_delivers_and_records_the_run(store):
    """Only the model run may be cancelled: a shutdown that lands while the reply is being
    published lets it go out and records the run done."""
    pub, model = HeldPublisher(), RecordingModel()
    rt = Runtime(store=SessionsRuntimeStore(store), publisher=pub, run=model)
    m = msg("status?")
    await rt.submit(m)
    async with asyncio.timeout(5):
        await pub.entered.wait()
    closing = asyncio.create_task(rt.shutdown(grace=0))
    await asyncio.sleep(0)  # let the shutdown cancel the run task
    pub.release.set()
    await closing
    assert [p.text for p in pub.sent] == ["answer to: status?"]
    assert [p.status for p in await store.queries.get_prompts([m.id])] == ["done"]
    assert (await store.queries.run_metrics(model.requests[0].run_id) or ("?",))[0] == "done"


async def test_a_stop_while_publishing_lets_the_answer_through(store):
    """A !stop that arrives after the model answered, while the reply is published, does
    not cut the reply or the record: the run is done and no stop note follows."""
    pub, model = HeldPublisher(), RecordingModel()
    rt = Runtime(store=SessionsRuntimeStore(store), publisher=pub, run=model)
    m = msg("status?")
    await rt.submit(m)
    async with asyncio.timeout(5):
        await pub.entered.wait()
    await rt.submit(msg("!stop", thread=m.thread, sender="bob"))
    pub.release.set()
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert [p.text for p in pub.sent] == ["answer to: status?"]
    assert [p.status for p in await store.queries.get_prompts([m.id])] == ["done"]


async def test_the_observer_adds_the_row_as_a_call_starts_and_completes_it(store):
    """audit_observer writes a 'started' row before the call and completes that same row
    as it ends; an end with no start seen becomes a whole row of its own."""
    m = msg("x")
    await SessionsRuntimeStore(store).record_prompt(m)
    await store.runs.start_run("R1", "#ops", m.thread, [m.id])
    observe = audit_observer(store.audit)
    token = current_tool_use.set(ToolUseContext("R1", m.thread, "tu1", "rec-1"))
    try:
        entry = AuditEntry("rm", {"p": "/x"}, False, 0, True, now_iso(), 0.0, "started", "k1")
        await observe(m.thread, entry)
        assert [(e.outcome, e.record_uuid) for e in await store.audit.entries()] == [
            ("started", "rec-1")
        ]
        await observe(m.thread, replace(entry, outcome="ok", bytes=9, duration_ms=3.0))
        assert [(e.outcome, e.bytes) for e in await store.audit.entries()] == [("ok", 9)]
        await observe(m.thread, replace(entry, outcome="error", is_error=True, key="k2"))
    finally:
        current_tool_use.reset(token)
    assert sorted(e.outcome for e in await store.audit.entries()) == ["error", "ok"]


async def test_the_observer_completes_a_start_cancelled_while_it_was_written(store):
    """A cancellation that lands while the started row is written does not lose it: the
    end completes that row instead of adding a second one."""
    m = msg("x")
    await SessionsRuntimeStore(store).record_prompt(m)
    await store.runs.start_run("R1", "#ops", m.thread, [m.id])
    observe = audit_observer(store.audit)
    token = current_tool_use.set(ToolUseContext("R1", m.thread, "tu1", "rec-1"))
    try:
        entry = AuditEntry("rm", {}, False, 0, True, now_iso(), 0.0, "started", "k1")
        writing = asyncio.create_task(observe(m.thread, entry))
        await asyncio.sleep(0)
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
        await observe(m.thread, replace(entry, outcome="cancelled", is_error=True))
    finally:
        current_tool_use.reset(token)
    assert [e.outcome for e in await store.audit.entries()] == ["cancelled"]


async def test_after_a_restart_a_replayed_prompt_is_read_not_taken_as_new(store):
    """A new adapter (the next start) knows no prompt in memory: the newest stored id
    bounds what may be new without a read, so the hub's replay of an answered prompt
    is read and found finished, and of a recorded one found pending; only an id above
    every stored one is put off as new."""
    first = SessionsRuntimeStore(store)
    done, waiting = msg("answered"), msg("still queued")
    assert await first.record_prompt(done) == "new"
    assert await first.record_prompt(waiting) == "new"
    await store.connection.flush()
    await store.runs.mark_prompts([done.id], "done")

    restarted = SessionsRuntimeStore(store)
    assert await restarted.record_prompt(done) == "finished"
    assert await restarted.record_prompt(waiting) == "pending"
    later = msg("new after the restart")
    assert await restarted.record_prompt(later) == "new"
    assert await store.queries.get_prompts([later.id]) == []  # put off: nothing read it
    await store.connection.flush()
    assert [p.id for p in await store.queries.get_prompts([later.id])] == [later.id]


async def test_a_steady_stream_writes_no_cursor_or_ack_of_its_own(store, monkeypatch):
    """Each reply read back and each ack waits for the next prompt's record, which takes
    them: their deadline goes with them, so a stream of prompts closer than
    PASS_OVER_DELAY writes one transaction a prompt and nothing else; the last ones,
    with no prompt after them, are written alone once the delay passed."""
    from daemon.runtime import store as runtime_store
    from tests.fakes.runtime_helpers import NICK

    monkeypatch.setattr(runtime_store, "PASS_OVER_DELAY", 0.2)
    pub = FakePublisher()
    rt = Runtime(
        store=SessionsRuntimeStore(store),
        publisher=pub,
        run=RecordingModel(),
        options=RuntimeOptions(),
    )
    jobs = count_jobs(store)
    for n in range(4):
        prompt = msg(f"question {n}")  # ids in the order the hub assigns them
        await rt.submit(prompt)
        await pub.wait_for(n + 1)  # answered and acked: the ack waits
        await rt.submit(msg(f"answer {n}", sender=NICK, thread=prompt.thread))  # passed over
        await asyncio.sleep(0.12)  # past the delay over two prompts, not over one
    assert len(jobs) == 4  # each prompt's one transaction: its record, run and end
    async with asyncio.timeout(5):
        while len(jobs) < 5:  # noqa: ASYNC110 -- bounded: the last ack and cursor, alone
            await asyncio.sleep(0.02)
    await rt.shutdown(grace=1)
    rows = await store.queries.pending_prompts()
    assert rows == []


async def test_the_cursor_past_a_passed_over_message_is_written_later(store, monkeypatch):
    """The daemon's own reply read back (and any message it does not act on) moves the
    cursor without a write of its own: the next prompt's record carries it, or one write
    within PASS_OVER_DELAY, or the runtime's shutdown. Until then the store still holds the
    cursor before it, so a crash only reads those messages again (and ignores them)."""
    from daemon.runtime import store as runtime_store
    from tests.fakes.runtime_helpers import NICK

    adapter = SessionsRuntimeStore(store)
    rt = Runtime(
        store=adapter, publisher=FakePublisher(), run=RecordingModel(), options=RuntimeOptions()
    )
    cursor = lambda: store.cursors.get_cursor("#ops")  # noqa: E731
    first = msg("hello")
    await rt.submit(first)
    await store.connection.flush()  # the record goes with its run's write (issue 31)
    assert await cursor() == first.id
    own = msg("answer", sender=NICK, thread=first.thread)
    await rt.submit(own)
    assert await cursor() == first.id  # not written yet
    second = msg("again")
    await rt.submit(second)
    await store.connection.flush()
    assert await cursor() == second.id  # with the prompt's record, in its transaction
    mine = [msg(f"answer {n}", sender=NICK) for n in range(3)]
    for m in mine:
        await rt.submit(m)
    assert await cursor() == second.id
    await rt.shutdown(grace=1)
    assert await cursor() == mine[-1].id  # the shutdown wrote it

    monkeypatch.setattr(runtime_store, "PASS_OVER_DELAY", 0.05)
    later = SessionsRuntimeStore(store)
    last = msg("answer 4", sender=NICK)
    await later.pass_over("#ops", last.id)
    await later.pass_over("#ops", mine[0].id)  # an older one never moves it back
    async with asyncio.timeout(5):
        while await cursor() != last.id:  # noqa: ASYNC110 -- bounded: the delayed write
            await asyncio.sleep(0.02)
    await later.flush_deferred()  # nothing left: no write, no error
    assert await cursor() == last.id
