"""A prompt's write transactions, each run whole on the writer's thread in one job:
a statement that fails anywhere in one leaves none of its rows, and the writer
goes on; each takes one hand-off to aiosqlite's thread."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from sessions import RunMetrics, Store, StoreError
from sessions.outbox import Ack, OutboxReply
from sessions.testing import run_records
from tests.fakes.writer_jobs import count_jobs, trace_statements

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
    calls = count_jobs(store)
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS, advance_cursor=True)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await store.runs.finish_run("R1", "done", run_records("hi"), RunMetrics(), ["M1"], "done")
    await store.cursors.set_cursor("#ops", "M2")
    assert len(calls) == 4
    assert raw(store.path, "SELECT status FROM prompts") == [("done",)]
    assert raw(store.path, "SELECT count(*) FROM records") == [(4,)]


async def test_a_deferred_run_start_goes_with_the_runs_end_in_one_job(store: Store):
    """start_run(defer=True) writes nothing by itself; the finish's transaction writes
    the run row and the claim first, then the end: two jobs a prompt, not three."""
    calls = count_jobs(store)
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
    assert raw(store.path, "SELECT count(*) FROM runs") == [(0,)]
    assert raw(store.path, "SELECT status, run_id FROM prompts") == [("queued", None)]
    await store.runs.finish_run("R1", "done", run_records("hi"), RunMetrics(), ["M1"], "done")
    assert len(calls) == 2
    assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "done")]
    assert raw(store.path, "SELECT status, run_id FROM prompts") == [("done", "R1")]
    assert raw(store.path, "SELECT sender, run_id FROM run_senders") == [("alice", "R1")]


async def test_a_deferred_prompt_and_run_start_go_with_the_runs_end_in_one_job(store: Store):
    """record_prompt(defer=True) writes nothing by itself (not the prompt, not the cursor,
    not the acks it carries); the run's end writes all of it first, in its one
    transaction: one job a prompt answered at once, as many as the relay's."""
    await store.runs.record_prompt("#ops", "T0", "M0", "alice", "hi", TS, advance_cursor=True)
    await store.runs.start_run("R0", "#ops", "T0", ["M0"])
    reply = OutboxReply("R0", "#ops", "T0", "M0", "cid-M0", "the answer")
    await store.runs.finish_run(
        "R0", "done", run_records("hi"), RunMetrics(), ["M0"], "done", reply=reply
    )
    calls = count_jobs(store)
    ack = Ack("R0", "M0R", "2026-11-30T18:00:01Z")
    new = await store.runs.record_prompt(
        "#ops", "T1", "M1", "bob", "next", TS, advance_cursor=True, acked=[ack], defer=True
    )
    assert new is True
    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
    assert raw(store.path, "SELECT id FROM prompts ORDER BY id") == [("M0",)]
    assert raw(store.path, "SELECT message_id FROM cursors") == [("M0",)]
    assert raw(store.path, "SELECT status FROM outbox") == [("pending",)]
    await store.runs.finish_run("R1", "done", run_records("next"), RunMetrics(), ["M1"], "done")
    assert len(calls) == 1
    assert raw(store.path, "SELECT id, status, run_id FROM prompts ORDER BY id") == [
        ("M0", "done", "R0"),
        ("M1", "done", "R1"),
    ]
    assert raw(store.path, "SELECT message_id FROM cursors") == [("M1",)]
    assert raw(store.path, "SELECT status, message_id FROM outbox") == [("acked", "M0R")]
    assert raw(store.path, "SELECT id, status FROM runs ORDER BY id") == [
        ("R0", "done"),
        ("R1", "done"),
    ]


async def test_a_deferred_run_start_goes_first_for_a_statement_and_alone_in_time(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    """A one-statement write (a tool call's audit row) finds the run row before it (the
    deferred write goes first, in its own transaction); with no write at all it is
    written within the delay; closing the store writes what is still deferred."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
    await store.runs.add_run_tokens("R1", 10, 2)  # an UPDATE of the run's row
    assert raw(store.path, "SELECT status, prompt_tokens FROM runs") == [("running", 10)]

    store.connection.defer(
        lambda conn: conn.execute("UPDATE runs SET error = 'later' WHERE id = 'R1'"), within=0.05
    )
    await asyncio.sleep(0.3)
    assert raw(store.path, "SELECT error FROM runs") == [("later",)]

    store.connection.defer(lambda conn: conn.execute("UPDATE runs SET error = 'at close'"))
    await store.aclose()
    assert raw(store.path, "SELECT error FROM runs") == [("at close",)]


async def test_the_deadline_is_the_oldest_waiting_writes_not_the_first_ones(store: Store):
    """A deferred write that the next write took leaves no deadline behind: one deferred
    after it waits its own full delay for a write to carry it, and is not written alone
    at the first one's deadline (which cut into a prompt whose end was still to come)."""
    calls = count_jobs(store)
    store.connection.defer(lambda conn: None, within=0.2)  # the first deadline: 0.2 s
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)  # takes it
    await asyncio.sleep(0.1)
    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)  # within 1 s
    await asyncio.sleep(0.2)  # past the first deadline: nothing is written alone
    assert len(calls) == 1
    assert raw(store.path, "SELECT count(*) FROM runs") == [(0,)]
    await store.runs.record_prompt("#ops", "T1", "M2", "alice", "there", TS)  # carries it
    assert len(calls) == 2
    assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "running")]


async def test_a_failing_deferred_write_fails_alone_and_a_failing_host_keeps_it(store: Store):
    """A deferred write that fails is rolled back alone (its savepoint) and the write it
    went with commits; a write that fails does not take the deferred ones with it."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
    store.connection.defer(lambda conn: conn.execute("INSERT INTO no_such_table VALUES (1)"))
    await store.runs.record_prompt("#ops", "T1", "M2", "alice", "there", TS)
    assert raw(store.path, "SELECT id FROM prompts ORDER BY id") == [("M1",), ("M2",)]

    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
    fail_when(store.path, "no_boom", "INSERT ON prompts", "NEW.text = 'boom'")
    with pytest.raises(StoreError, match="recording prompt M3: refused by the test"):
        await store.runs.record_prompt("#ops", "T1", "M3", "alice", "boom", TS)
    assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "running")]
    assert raw(store.path, "SELECT id, status FROM prompts ORDER BY id") == [
        ("M1", "running"),
        ("M2", "queued"),
    ]


async def test_a_deferred_write_waits_when_its_transaction_cannot_begin(tmp_path: Path):
    """Another process holds the write lock: the write fails (busy), and the deferred
    one waits for the next write instead of being lost."""
    async with Store(tmp_path / "a.db", busy_timeout=0.05) as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS)
        await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
        with closing(sqlite3.connect(store.path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError):
                await store.runs.record_prompt("#ops", "T1", "M2", "alice", "there", TS)
            other.execute("ROLLBACK")
        await asyncio.sleep(0)  # the thread hands the deferred write back to the loop
        await store.runs.record_prompt("#ops", "T1", "M2", "alice", "there", TS)
        assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "running")]


def rows_of(path: Path) -> dict[str, list[tuple]]:
    """What a run left, without the clock's columns and the run's own ids."""
    return {
        "threads": raw(path, "SELECT id, channel, thread_id, session_id FROM threads ORDER BY id"),
        "prompts": raw(
            path, "SELECT id, thread, sender, text, ts, status FROM prompts ORDER BY id"
        ),
        "runs": raw(
            path,
            "SELECT thread, status, rounds, run_code_calls, nested_calls, bytes_in, bytes_out,"
            " final_round_forced, prompt_tokens, completion_tokens, extra, error,"
            " finished IS NOT NULL FROM runs",
        ),
        "senders": raw(path, "SELECT sender FROM run_senders"),
        "records": raw(
            path,
            "SELECT parent_uuid IS NULL, thread, session_id, type,"
            " json_extract(message, '$.role'), cwd, version"
            " FROM records ORDER BY seq",
        ),
        "cursors": raw(path, "SELECT channel, message_id FROM cursors"),
        "outbox": raw(path, "SELECT channel, thread_id, reply_to, text, status FROM outbox"),
    }


async def answered(store: Store, *, defer: bool, ids: tuple[str, ...] = ("M1", "M2")) -> None:
    """Two prompts of one thread answered by one run, their record and start deferred or
    not; the run spent tokens and calls."""
    for n, mid in enumerate(ids):
        await store.runs.record_prompt(
            "#ops", "T1", mid, f"user{n}", f"text {n}", TS, advance_cursor=True, defer=defer
        )
    await store.runs.start_run("R1", "#ops", "T1", list(ids), defer=defer)
    metrics = RunMetrics(rounds=2, run_code_calls=1, nested_calls=3, prompt_tokens=40)
    metrics.completion_tokens, metrics.bytes_in = 7, 120
    reply = OutboxReply("R1", "#ops", "T1", ids[-1], "cid", "the answer")
    await store.runs.finish_run(
        "R1", "done", run_records("text"), metrics, list(ids), "done", reply=reply
    )


async def test_a_run_written_whole_at_its_end_leaves_the_rows_the_steps_leave(tmp_path: Path):
    """The run's end absorbs its deferred start and its prompts' deferred records and
    writes their rows in their final form (no prompt inserted queued and updated twice):
    the same rows as recording, starting and finishing one write at a time."""
    async with Store(tmp_path / "steps.db", cwd="/srv", version="0.1.0") as steps:
        await answered(steps, defer=False)
    async with Store(tmp_path / "whole.db", cwd="/srv", version="0.1.0") as whole:
        statements = await trace_statements(whole)
        await answered(whole, defer=True)
    assert rows_of(whole.path) == rows_of(steps.path)
    assert rows_of(whole.path)["prompts"][0][-1] == "done"
    assert not [s for s in statements if s.startswith("UPDATE prompts")]
    assert not [s for s in statements if s.startswith("UPDATE runs")]


async def test_a_prompt_stored_after_all_is_claimed_and_marked_as_before(tmp_path: Path):
    """A deferred record whose prompt is stored already (not new after all): the end
    claims and marks it as the start and the end would, and the rest as new."""
    async with Store(tmp_path / "steps.db", cwd="/srv", version="0.1.0") as steps:
        await steps.runs.record_prompt("#ops", "T1", "M1", "user0", "text 0", TS)
        await answered(steps, defer=False)
    async with Store(tmp_path / "whole.db", cwd="/srv", version="0.1.0") as whole:
        await whole.runs.record_prompt("#ops", "T1", "M1", "user0", "text 0", TS)
        await answered(whole, defer=True)
    assert rows_of(whole.path) == rows_of(steps.path)


async def test_an_end_that_fails_writes_what_it_absorbed_as_it_was_deferred(store: Store):
    """The end fails (its reply refused): its transaction is rolled back and the start
    and records it had absorbed are written alone, as deferred (queued, then claimed),
    so the next start runs the prompts again."""
    fail_when(store.path, "no_reply", "INSERT ON outbox", "1")
    with pytest.raises(StoreError, match="finishing run R1"):
        await answered(store, defer=True)
    assert raw(store.path, "SELECT id, status, run_id FROM prompts ORDER BY id") == [
        ("M1", "running", "R1"),
        ("M2", "running", "R1"),
    ]
    assert raw(store.path, "SELECT id, status FROM runs") == [("R1", "running")]
    assert raw(store.path, "SELECT message_id FROM cursors") == [("M2",)]
    assert raw(store.path, "SELECT count(*) FROM records") == [(0,)]
    assert raw(store.path, "SELECT sender FROM run_senders ORDER BY sender") == [
        ("user0",),
        ("user1",),
    ]


async def test_an_end_absorbs_nothing_when_a_record_of_its_run_was_written(store: Store):
    """A write between a prompt's record and its run's start took the record: the end
    writes the start it finds deferred as before, step by step."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", TS, defer=True)
    await store.runs.add_run_tokens("R0", 1, 1)  # any write: it carries the record
    await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
    statements = await trace_statements(store)
    await store.runs.finish_run("R1", "done", run_records("hi"), RunMetrics(), ["M1"], "done")
    assert raw(store.path, "SELECT id, status, run_id FROM prompts") == [("M1", "done", "R1")]
    assert [s.split(" SET")[0] for s in statements if s.startswith("UPDATE prompts")] == [
        "UPDATE prompts",
        "UPDATE prompts",
    ]
