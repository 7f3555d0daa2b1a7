"""The runtime over the real sessions store (SQLite on disk): what lands, and restarts.

The channel and the model are fakes here (the scheduling fakes of
tests/test_runtime.py); the store is the real one, so these tests check the
translation in daemon/runtime/store.py and the durability rules end to end
inside one process.
"""

from __future__ import annotations

import uuid

import pytest

from daemon.runtime.runs import RunRequest, RunResult
from daemon.runtime.scheduler import Runtime, RuntimeOptions
from daemon.runtime.store import SessionsRuntimeStore
from sessions.ids import now_iso
from sessions.model import Record
from sessions.store import Store
from tests.fakes.runtime_helpers import FakePublisher, ScriptedModel, msg


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
    prompts = await store.get_prompts([first.id, second.id])
    assert [p.status for p in prompts] == ["done", "done"]
    status, _, error = await store.run_metrics(model.requests[0].run_id)
    assert (status, error) == ("done", None)
    assert await store.get_cursor("#ops") == second.id
    transcript = await store.transcript(first.thread, "#ops")
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
        await before.start_run("run-old", "#ops", answered.thread, [answered.id])
        await before.finish_run(
            "run-old", "done", [], RunResult("x").metrics, [answered.id], "done"
        )
        await adapter.record_prompt(cut)
        await before.start_run("run-cut", "#ops", cut.thread, [cut.id])
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
        assert (await after.run_metrics("run-cut"))[0] == "interrupted"
        assert [p.status for p in await after.get_prompts([cut.id])] == ["done"]
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
        assert (await first.run_metrics(held.requests[0].run_id))[0] == "interrupted"
        assert [p.status for p in await first.get_prompts([m.id])] == ["queued"]

    pub, model = FakePublisher(), RecordingModel()
    async with Store(path) as second:
        rt = Runtime(store=SessionsRuntimeStore(second), publisher=pub, run=model)
        assert await rt.recover() == 1
        await pub.wait_for(1)
        await rt.shutdown(grace=1)
        assert [p.status for p in await second.get_prompts([m.id])] == ["done"]


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
    assert await store.get_prompts([chatter.id]) == []
    assert await store.get_cursor("#ops") > chatter.id
