"""The outbox (issue 26 §2.2): a reply committed with its run's end, and the REPL dump with it.

Over the real store; the crash at each step is ``tests/test_crash_points.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from daemon.runtime.runs import RunResult
from daemon.runtime.scopes import SignedScopeStore
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import ThreadKey
from sessions.outbox import OutboxReply
from sessions.store import Store
from tests.fakes.runtime_helpers import msg

KEY = b"k" * 32


@pytest.fixture
async def store(tmp_path: Path):
    async with Store(tmp_path / "asyncai.db") as s:
        yield s


def _reply(run_id: str, prompt_id: str, thread: str) -> OutboxReply:
    return OutboxReply(run_id, "#ops", thread, prompt_id, f"cid-{prompt_id}", "the answer")


async def _started(store: Store, scopes: SignedScopeStore | None = None):
    runtime = SessionsRuntimeStore(store, scopes=scopes)
    m = msg("x")
    await runtime.record_prompt(m)
    await runtime.start_run("R1", m.channel, m.thread, [m.id])
    return runtime, m


async def test_the_reply_lands_with_the_runs_end_and_waits_until_acked(store: Store):
    runtime, m = await _started(store)
    await runtime.finish_run(
        "R1", RunResult("the answer"), [m.id], "done", reply=_reply("R1", m.id, m.thread)
    )
    [prompt] = await store.queries.get_prompts([m.id])
    assert prompt.status == "done"
    [waiting] = await runtime.unacked_replies()
    assert (waiting.run_id, waiting.text, waiting.prompt_ids) == ("R1", "the answer", (m.id,))
    await runtime.reply_acked("R1", "hub-id-1")
    assert await runtime.unacked_replies() == []


def _outbox_row(db: Path, run_id: str) -> tuple[str, str | None]:
    """The reply's row as another connection (a restart) reads it from the file."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        [row] = conn.execute(
            "SELECT status, message_id FROM outbox WHERE run_id = ?", (run_id,)
        ).fetchall()
    return row[0], row[1]


async def _answered(runtime: SessionsRuntimeStore, run_id: str) -> None:
    """A new prompt's run ended with its reply in the outbox."""
    m = msg(f"question of {run_id}")
    await runtime.record_prompt(m)
    await runtime.start_run(run_id, m.channel, m.thread, [m.id])
    reply = _reply(run_id, m.id, m.thread)
    await runtime.finish_run(run_id, RunResult("the answer"), [m.id], "done", reply=reply)


async def test_an_ack_is_written_with_the_next_prompts_record_or_at_shutdown(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's ack of a reply is marked in the next prompt's transaction, not a write of
    its own; a daemon that dies before (a new adapter over the same file) publishes the
    reply again; the shutdown's flush, or the delay, writes what is left."""
    from daemon.runtime import store as runtime_store

    db = tmp_path / "asyncai.db"
    runtime, m = await _started(store)
    await runtime.finish_run(
        "R1", RunResult("the answer"), [m.id], "done", reply=_reply("R1", m.id, m.thread)
    )
    await runtime.reply_acked("R1", "hub-id-1")
    assert _outbox_row(db, "R1") == ("pending", None)  # not yet written
    restarted = SessionsRuntimeStore(store)  # a crash now: the next start publishes it again
    assert [r.run_id for r in await restarted.unacked_replies()] == ["R1"]
    await runtime.record_prompt(msg("next question"))  # at the live edge: put off with it
    assert _outbox_row(db, "R1") == ("pending", None)
    await store.connection.flush()  # its run's first write, or a second later
    assert _outbox_row(db, "R1") == ("acked", "hub-id-1")  # with the record
    assert await restarted.unacked_replies() == []

    await _answered(runtime, "R2")
    await runtime.reply_acked("R2", "hub-id-2")
    await runtime.flush_deferred()  # the runtime's shutdown
    assert _outbox_row(db, "R2") == ("acked", "hub-id-2")

    monkeypatch.setattr(runtime_store, "PASS_OVER_DELAY", 0.05)
    await _answered(runtime, "R3")
    await runtime.reply_acked("R3", "hub-id-3")
    async with asyncio.timeout(5):
        while _outbox_row(db, "R3") != ("acked", "hub-id-3"):  # noqa: ASYNC110 -- the delayed write
            await asyncio.sleep(0.02)


async def test_a_refused_reply_fails_the_run_and_its_prompts(store: Store):
    runtime, m = await _started(store)
    await runtime.finish_run(
        "R1", RunResult("x"), [m.id], "done", reply=_reply("R1", m.id, m.thread)
    )
    await runtime.reply_refused("R1", "reply refused: too large")
    [prompt] = await store.queries.get_prompts([m.id])
    assert prompt.status == "failed"
    found = await store.queries.run_metrics("R1")
    assert found is not None
    status, _, error = found
    assert (status, error) == ("failed", "reply refused: too large")
    assert await runtime.unacked_replies() == []


async def test_a_runs_dump_is_held_back_and_committed_with_its_reply(store: Store):
    """While the run has not ended, a save of its thread's REPL does not reach the
    store; the run's end commits it; the next save goes straight through again."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1 << 20)
    runtime, m = await _started(store, scopes)
    thread = ThreadKey(m.channel, m.thread)
    await scopes.save(thread, b"dump of run 1")
    assert await store.scopes.load_scope(m.channel, m.thread) is None  # held back
    held = await scopes.load(thread)  # the thread's own REPL still sees it
    assert held is not None
    assert held.data == b"dump of run 1"
    await runtime.finish_run(
        "R1", RunResult("x"), [m.id], "done", reply=_reply("R1", m.id, m.thread)
    )
    stored = await scopes.load(thread)
    assert stored is not None
    assert stored.data == b"dump of run 1"
    await scopes.save(thread, b"after the run")
    stored = await scopes.load(thread)
    assert stored is not None
    assert stored.data == b"after the run"


async def test_a_run_that_ends_without_a_reply_drops_its_held_dump(store: Store):
    """Interrupted (its prompts queued to run again): the stored REPL stays the one
    from before the run, so the run, run again, is not counted twice."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1 << 20)
    runtime, m = await _started(store, scopes)
    thread = ThreadKey(m.channel, m.thread)
    await scopes.save(thread, b"half a run")
    interrupted = RunResult("", status="interrupted", error="daemon shutting down")
    await runtime.finish_run("R1", interrupted, [m.id], "queued")
    assert await scopes.load(thread) is None
    assert await store.scopes.load_scope(m.channel, m.thread) is None


async def test_after_a_run_without_a_reply_a_shutdowns_save_is_not_stored(store: Store):
    """The shutdown stores every live REPL after the runtime recorded its cut-off runs:
    the REPL of one (its prompt queued to run again) must not be stored, or the run,
    run again on it, would count twice. The thread's next run stores again."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1 << 20)
    runtime, m = await _started(store, scopes)
    thread = ThreadKey(m.channel, m.thread)
    interrupted = RunResult("", status="interrupted", error="daemon shutting down")
    await runtime.finish_run("R1", interrupted, [m.id], "queued")
    await scopes.save(thread, b"half a run, at shutdown")
    assert await store.scopes.load_scope(m.channel, m.thread) is None

    await runtime.start_run("R2", m.channel, m.thread, [m.id])
    await scopes.save(thread, b"run 2, whole")
    reply = _reply("R2", m.id, m.thread)
    await runtime.finish_run("R2", RunResult("x"), [m.id], "done", reply=reply)
    stored = await scopes.load(thread)
    assert stored is not None
    assert stored.data == b"run 2, whole"
