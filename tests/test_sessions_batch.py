"""A prompt's write transactions, each run whole on the writer's thread in one job:
a statement that fails anywhere in one leaves none of its rows, and the writer
goes on; each takes one hand-off to aiosqlite's thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sessions import RunMetrics, Store, StoreError
from sessions.testing import run_records

TS = "2026-11-30T18:00:00Z"


@pytest.fixture
async def store(tmp_path: Path):
    """An open store on a fresh file."""
    async with Store(tmp_path / "asyncai.db", cwd="/srv/asyncai", version="0.1.0") as s:
        yield s


def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read with a separate, plain sqlite3 connection: sees only what was committed."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql, params).fetchall()


def fail_when(path: Path, name: str, event: str, condition: str) -> None:
    """A trigger that makes the statement ``event`` fail when ``condition`` holds."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(
            f"CREATE TRIGGER {name} BEFORE {event} FOR EACH ROW WHEN {condition}"
            " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )


async def test_a_prompt_whose_insert_fails_leaves_no_thread_and_no_cursor(store: Store):
    """The thread row and the cursor come before the prompt row in one batch: the
    prompt's failure takes them back with it."""
    fail_when(store.path, "no_boom", "INSERT ON prompts", "NEW.text = 'boom'")
    with pytest.raises(StoreError, match="recording prompt M1: refused by the test"):
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "boom", TS, advance_cursor=True)
    assert raw(store.path, "SELECT count(*) FROM threads") == [(0,)]
    assert raw(store.path, "SELECT count(*) FROM cursors") == [(0,)]
    # the writer goes on: no transaction was left open
    assert await store.runs.record_prompt(
        "#ops", "T1", "M2", "alice", "fine", TS, advance_cursor=True
    )
    assert raw(store.path, "SELECT id FROM prompts") == [("M2",)]
    assert raw(store.path, "SELECT message_id FROM cursors") == [("M2",)]


async def test_a_run_whose_claim_fails_leaves_no_run(store: Store):
    """Starting a run writes the thread, the run and the claim: a failed claim leaves none."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
    fail_when(store.path, "no_claim", "UPDATE OF status ON prompts", "NEW.status = 'running'")
    with pytest.raises(StoreError, match="starting run R1"):
        await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    assert raw(store.path, "SELECT count(*) FROM runs") == [(0,)]
    assert raw(store.path, "SELECT status, run_id FROM prompts") == [("queued", None)]


async def test_a_finish_whose_last_statement_fails_leaves_no_record(store: Store):
    """The records, the run's status and the prompts' status go back when the last
    statement of the finish (the thread's last_active) fails."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    fail_when(store.path, "no_touch", "UPDATE OF last_active ON threads", "1")
    with pytest.raises(StoreError, match="finishing run R1"):
        await store.runs.finish_run("R1", "done", run_records("hi"), RunMetrics(), ["M1"], "done")
    assert raw(store.path, "SELECT count(*) FROM records") == [(0,)]
    assert raw(store.path, "SELECT status, finished FROM runs") == [("running", None)]
    assert raw(store.path, "SELECT status FROM prompts") == [("running",)]


async def test_an_error_of_our_own_inside_a_batch_rolls_it_back(store: Store):
    """A StoreError raised between the statements of a batch (a run that is not there)
    leaves the transaction rolled back, and the next write begins."""
    with pytest.raises(StoreError, match="no such run"):
        await store.runs.finish_run("R9", "done", run_records("hi"), RunMetrics(), [], "done")
    await store.runs.start_run("R1", "#ops", "T1")
    assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "running")]


async def test_a_prompt_takes_one_hand_off_per_write(store: Store):
    """Recording a prompt, starting and finishing its run and moving the cursor take one
    job on the writer's thread each (they took 20 when each statement was one)."""
    db = store.connection._writer
    assert db is not None
    calls: list[Any] = []
    queue = db._execute

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await queue(fn, *args, **kwargs)

    db._execute = counted  # type: ignore[method-assign]  # count what goes to the thread
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS, advance_cursor=True)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await store.runs.finish_run("R1", "done", run_records("hi"), RunMetrics(), ["M1"], "done")
    await store.cursors.set_cursor("#ops", "M2")
    assert len(calls) == 4
    assert raw(store.path, "SELECT status FROM prompts") == [("done",)]
    assert raw(store.path, "SELECT count(*) FROM records") == [(4,)]
