"""The sessions Store on real SQLite files: migrations, prompts, runs, the audit,
history, cursors, atomicity and concurrent writers."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import aiosqlite
import pytest

from sessions import (
    SCHEMA_VERSION,
    MigrationError,
    Record,
    RunMetrics,
    Store,
    StoreClosedError,
    StoreError,
    ThreadLookupError,
    session_id,
)
from sessions.audit import audit_query
from sessions.model import StartedCall
from sessions.schema import MIGRATIONS, Migration, migrate
from sessions.testing import run_records, tool_call_row, user_record

TABLES = {
    "threads",
    "prompts",
    "runs",
    "records",
    "tool_calls",
    "cursors",
    "scopes",
    "schema_migrations",
    "approval_rules",
}


@pytest.fixture
async def store(tmp_path: Path):
    """An open store on a fresh file."""
    async with Store(tmp_path / "state" / "asyncai.db", cwd="/srv/asyncai", version="0.1.0") as s:
        yield s


def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read with a separate, plain sqlite3 connection: sees only what was committed."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql, params).fetchall()


async def answered_run(
    store: Store,
    channel: str,
    thread: str,
    run_id: str,
    prompt_id: str,
    *,
    prompt: str = "how many pods?",
    answer: str = "Three.",
    calls: int = 1,
) -> list[Record]:
    """Record a prompt and take it through a whole run, as the daemon does."""
    await store.runs.record_prompt(
        channel, thread, prompt_id, "alice", prompt, "2026-11-29T18:00:00Z"
    )
    await store.runs.start_run(run_id, channel, thread, [prompt_id])
    records = run_records(prompt, answer=answer)
    for _ in range(calls):
        await store.audit.add_tool_call(tool_call_row(run_id, thread, record_uuid=records[1].uuid))
    await store.runs.finish_run(
        run_id, "done", records, RunMetrics(rounds=2, nested_calls=calls), [prompt_id], "done"
    )
    return records


# ---- migrations -------------------------------------------------------------


async def test_migrations_from_an_empty_file(tmp_path: Path):
    """Opening a new file creates its directory, every table, WAL and the recorded migrations."""
    path = tmp_path / "new" / "dir" / "asyncai.db"
    async with Store(path):
        pass
    names = {row[0] for row in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names >= TABLES
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(path, "SELECT version, name FROM schema_migrations") == [
        (m.version, m.name) for m in MIGRATIONS
    ]
    assert raw(path, "PRAGMA journal_mode") == [("wal",)]


async def test_reopening_applies_nothing_and_keeps_data(tmp_path: Path):
    """A second open finds the schema current and the rows still there."""
    path = tmp_path / "a.db"
    async with Store(path) as store:
        await store.cursors.set_cursor("#ops", "01A")
    async with aiosqlite.connect(path, isolation_level=None) as db:
        assert await migrate(db) == []
    async with Store(path) as store:
        assert await store.cursors.get_cursor("#ops") == "01A"


async def test_connections_enforce_foreign_keys(store: Store):
    """foreign_keys is on: a prompt cannot point at a run that does not exist."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "hi", "2026-11-29T18:00:00Z")
    with pytest.raises(StoreError, match="FOREIGN KEY"):
        await store.runs.claim_prompts(["M1"], "no-such-run")
    with pytest.raises(StoreError, match="no run"):
        await store.audit.add_tool_call(tool_call_row("no-such-run", "T1"))


async def test_newer_database_is_refused(tmp_path: Path):
    """A database migrated by a newer asyncai raises MigrationError instead of being misread."""
    path = tmp_path / "a.db"
    async with Store(path):
        pass
    with closing(sqlite3.connect(path)) as db, db:  # closed, and committed first
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(MigrationError, match="newer"):
        await Store(path).open()


async def test_failed_migration_leaves_the_previous_version(tmp_path: Path):
    """A migration that fails half-way is rolled back whole; the version stays."""

    async def broken(db: aiosqlite.Connection) -> None:
        await db.execute("CREATE TABLE half_done (x)")
        await db.execute("INSERT INTO no_such_table VALUES (1)")

    path = tmp_path / "a.db"
    migrations = [*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "broken", broken)]
    with pytest.raises(MigrationError, match="broken"):
        await Store(path, migrations=migrations).open()
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(path, "SELECT name FROM sqlite_master WHERE name = 'half_done'") == []
    async with Store(path) as store:  # the code's own migrations still open it
        assert await store.queries.integrity_check() == "ok"


async def test_next_migration_is_applied_and_recorded(tmp_path: Path):
    """A later migration runs once, on top of the existing data, and is recorded by name."""

    async def add_note(db: aiosqlite.Connection) -> None:
        await db.execute("ALTER TABLE threads ADD COLUMN note TEXT")

    path = tmp_path / "a.db"
    async with Store(path) as store:
        await store.cursors.set_cursor("#ops", "01A")
    migrations = [*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "thread_note", add_note)]
    async with Store(path, migrations=migrations) as store:
        assert await store.cursors.get_cursor("#ops") == "01A"
    assert raw(path, "SELECT name FROM schema_migrations ORDER BY version")[-1] == ("thread_note",)
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION + 1,)]


async def test_migration_history_of_another_program_is_refused(tmp_path: Path):
    """A database whose recorded migration 1 has another name is not ours to change."""
    path = tmp_path / "a.db"
    async with Store(path):
        pass
    renamed = [Migration(1, "something_else", MIGRATIONS[0].apply), *MIGRATIONS[1:]]
    with pytest.raises(MigrationError, match="something_else"):
        await Store(path, migrations=renamed).open()


async def test_migrations_must_be_numbered_in_order(tmp_path: Path):
    """A gap in the numbering is a programming error caught before touching the file."""
    with pytest.raises(MigrationError, match="expected 1"):
        await Store(tmp_path / "a.db", migrations=[Migration(2, "x", MIGRATIONS[0].apply)]).open()


async def test_a_file_that_is_not_sqlite(tmp_path: Path):
    """Garbage is reported as a StoreError naming the file, with the driver's error as cause."""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"notes\.txt") as caught:
        await Store(path).open()
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


async def test_a_directory_that_cannot_be_made_is_a_store_error(tmp_path: Path):
    """--db under a regular file: a StoreError naming the path, not a bare OSError
    (NotADirectoryError) leaking out of sessions/ to the daemon's start."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = blocker / "state" / "asyncai.db"
    with pytest.raises(StoreError, match="state") as caught:
        await Store(path).open()
    assert isinstance(caught.value.__cause__, OSError)


async def test_create_false_does_not_create(tmp_path: Path):
    """Readers (the CLI) never create an empty database by mistake."""
    path = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="no database"):
        await Store(path, create=False).open()
    assert not path.exists()


async def test_another_programs_database_is_refused_untouched(tmp_path: Path):
    """[sessions] db (or audit-collect --db) naming another program's SQLite file: a
    StoreError before anything is written. The daemon used to add its fifteen tables to
    it and switch it to WAL. An empty file is still made an asyncai database."""
    path = tmp_path / "notes.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.commit()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"notes\.db is not an asyncai database \(it has "):
        await Store(path).open()
    assert path.read_bytes() == before
    empty = tmp_path / "empty.db"
    empty.touch()
    async with Store(empty) as store:
        assert await store.queries.threads() == []


async def test_use_after_close(tmp_path: Path):
    """A closed store says so instead of leaking aiosqlite's ValueError."""
    store = await Store(tmp_path / "a.db").open()
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreClosedError):
        await store.cursors.set_cursor("#ops", "01A")
    with pytest.raises(StoreClosedError):
        await store.queries.threads()


# ---- prompts ----------------------------------------------------------------


async def test_a_prompt_recorded_twice_is_stored_once(store: Store):
    """record_prompt is idempotent by the channel's message id."""
    args = ("#ops", "T1", "M1", "alice", "how many pods?", "2026-11-29T18:00:00Z")
    assert await store.runs.record_prompt(*args) is True
    assert await store.runs.record_prompt(*args) is False
    assert raw(store.path, "SELECT id, status FROM prompts") == [("M1", "queued")]


async def test_record_prompt_can_advance_the_cursor(store: Store):
    """With advance_cursor the prompt and the cursor land in one transaction."""
    await store.runs.record_prompt(
        "#ops", "T1", "M2", "a", "x", "2026-11-29T18:00:00Z", advance_cursor=True
    )
    assert await store.cursors.get_cursor("#ops") == "M2"
    await store.runs.record_prompt(
        "#ops", "T1", "M1", "a", "x", "2026-11-29T17:00:00Z", advance_cursor=True
    )
    assert await store.cursors.get_cursor("#ops") == "M2"


async def test_a_bad_timestamp_is_a_store_error(store: Store):
    """Timestamps are validated before anything is written."""
    with pytest.raises(StoreError, match="ts"):
        await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "yesterday")
    assert raw(store.path, "SELECT count(*) FROM prompts") == [(0,)]


async def test_pending_prompts_oldest_first_across_and_within_threads(store: Store):
    """Restart recovery reads unfinished prompts oldest first; one thread's on request."""
    await store.runs.record_prompt("#ops", "T1", "M3", "a", "third", "2026-11-29T18:00:03Z")
    await store.runs.record_prompt("#ops", "T2", "M1", "b", "first", "2026-11-29T18:00:01Z")
    await store.runs.record_prompt("#dev", "T1", "M2", "c", "second", "2026-11-29T18:00:02+00:00")
    await store.runs.record_prompt("#ops", "T1", "M4", "a", "done", "2026-11-29T18:00:04Z")
    await store.runs.mark_prompts(["M4"], "done")
    assert [p.id for p in await store.queries.pending_prompts()] == ["M1", "M2", "M3"]
    only = await store.queries.pending_prompts("#ops", "T1")
    assert [(p.id, p.channel, p.thread_id, p.text) for p in only] == [("M3", "#ops", "T1", "third")]
    with pytest.raises(StoreError, match="both"):
        await store.queries.pending_prompts("#ops")


async def test_claim_mark_and_requeue(store: Store):
    """Claimed prompts run under the run; done ones are never claimed or requeued again."""
    for i in (1, 2, 3):
        await store.runs.record_prompt("#ops", "T1", f"M{i}", "a", "x", f"2026-11-29T18:00:0{i}Z")
    await store.runs.start_run("R1", "#ops", "T1")
    assert await store.runs.claim_prompts(["M1", "M2"], "R1") == 2
    assert {
        p.id: (p.status, p.run_id) for p in await store.queries.get_prompts(["M1", "M2", "M3"])
    } == {
        "M1": ("running", "R1"),
        "M2": ("running", "R1"),
        "M3": ("queued", None),
    }
    assert await store.runs.mark_prompts(["M1"], "done") == 1
    assert await store.runs.requeue_prompts(["M1", "M2"]) == 1
    assert await store.runs.claim_prompts(["M1"], "R1") == 0
    assert [(p.id, p.status, p.run_id) for p in await store.queries.get_prompts(["M1", "M2"])] == [
        ("M1", "done", "R1"),
        ("M2", "queued", None),
    ]
    with pytest.raises(StoreError, match="status"):
        await store.runs.mark_prompts(["M1"], "answered")  # type: ignore[arg-type]


async def test_recover_interrupts_runs_left_running(store: Store):
    """After a crash, runs still 'running' become 'interrupted' and their prompts queue again."""
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:01Z")
    await store.runs.record_prompt("#ops", "T2", "M2", "a", "y", "2026-11-29T18:00:02Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await answered_run(store, "#ops", "T3", "R3", "M3")
    assert await store.runs.recover() == ["R1"]
    status, _, error = await store.queries.run_metrics("R1") or ("?", None, None)
    assert status == "interrupted"
    assert error is not None
    assert "stopped" in error
    assert [(p.id, p.status) for p in await store.queries.pending_prompts()] == [
        ("M1", "queued"),
        ("M2", "queued"),
    ]
    assert (await store.queries.run_metrics("R3") or ("?",))[0] == "done"


# ---- runs, records and the audit ---------------------------------------------


async def test_run_row_is_written_at_start(store: Store):
    """start_run commits the run row at once, visible to any other connection."""
    await store.runs.start_run("R1", "#ops", "T1")
    assert raw(store.path, "SELECT id, status, finished FROM runs") == [("R1", "running", None)]
    with pytest.raises(StoreError, match="R1"):
        await store.runs.start_run("R1", "#ops", "T1")


async def test_tool_call_rows_are_committed_as_they_end(store: Store):
    """Each audit row is visible to another connection as soon as add_tool_call returns."""
    await store.runs.start_run("R1", "#ops", "T1")
    row_id = await store.audit.add_tool_call(
        tool_call_row("R1", "T1", tool="delete_object", mutating=True, arguments={"name": "x"})
    )
    assert raw(store.path, "SELECT id, tool, mutating, thread, arguments FROM tool_calls") == [
        (row_id, "delete_object", 1, "#ops/T1", '{"name":"x"}')
    ]


async def test_records_chain_across_runs_with_the_full_envelope(store: Store):
    """The first record of a run links to the thread's last one; each next to the one before."""
    first = await answered_run(store, "#ops", "T1", "R1", "M1")
    second = await answered_run(store, "#ops", "T1", "R2", "M2")
    await answered_run(store, "#ops", "T2", "R3", "M3")  # another thread: its own chain
    stored = await store.queries.transcript("T1")
    assert [r.uuid for r in stored] == [r.uuid for r in first + second]
    assert [r.parent_uuid for r in stored] == [None] + [r.uuid for r in (first + second)[:-1]]
    assert {r.session_id for r in stored} == {session_id("#ops", "T1")}
    assert uuid.UUID(stored[0].session_id).version == 5
    assert {(r.cwd, r.version, r.is_sidechain, r.user_type) for r in stored} == {
        ("/srv/asyncai", "0.1.0", False, "external")
    }
    assert stored[2].tool_use_result == first[2].tool_use_result
    assert stored[1].message == first[1].message
    other = await store.queries.transcript("T2")
    assert other[0].parent_uuid is None


async def test_finish_run_stores_metrics_status_and_prompt_status(store: Store):
    """Metrics (spec A9 plus tokens), status, error and prompt statuses all land."""
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    metrics = RunMetrics(3, 2, 5, 22_506, 871, True, 1200, 300, retries=2, peeks=1)
    metrics.harness_gave_up = True
    await store.runs.finish_run("R1", "failed", [], metrics, ["M1"], "failed", error="model down")
    assert await store.queries.run_metrics("R1") == ("failed", metrics, "model down")
    # only the counters that are set, by name, in the extra column
    ((extra,),) = raw(store.path, "SELECT extra FROM runs WHERE id = 'R1'")
    assert json.loads(extra) == {"retries": 2, "peeks": 1, "harness_gave_up": True}
    assert await store.queries.run_metrics("nope") is None
    assert [(p.status, p.run_id) for p in await store.queries.get_prompts(["M1"])] == [
        ("failed", "R1")
    ]
    with pytest.raises(StoreError, match="running"):
        await store.runs.finish_run("R1", "running", [], metrics, [], "done")


async def test_a_failed_finish_leaves_nothing_half_written(store: Store):
    """A constraint violation on the third record rolls back the whole finish; audit rows stay."""
    previous = await answered_run(store, "#ops", "T1", "R0", "M0")
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    for _ in range(3):
        await store.audit.add_tool_call(tool_call_row("R1", "T1"))
    records = run_records()
    # the third record reuses an existing uuid: UNIQUE fails mid-way through the inserts
    records[2] = Record(
        uuid=previous[0].uuid,
        type="user",
        timestamp=records[2].timestamp,
        message=records[2].message,
        tool_use_result=records[2].tool_use_result,
    )
    with pytest.raises(StoreError, match="UNIQUE") as caught:
        await store.runs.finish_run(
            "R1", "done", records, RunMetrics(rounds=9, nested_calls=3), ["M1"], "done"
        )
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert raw(store.path, "SELECT count(*) FROM records WHERE run_id = 'R1'") == [(0,)]
    assert raw(store.path, "SELECT status, rounds, finished FROM runs WHERE id = 'R1'") == [
        ("running", 0, None)
    ]
    assert raw(store.path, "SELECT status FROM prompts WHERE id = 'M1'") == [("running",)]
    assert raw(store.path, "SELECT count(*) FROM tool_calls WHERE run_id = 'R1'") == [(3,)]
    # the writer is free again and the thread's chain is intact
    await store.runs.finish_run("R1", "done", run_records(), RunMetrics(), ["M1"], "done")
    chain = await store.queries.transcript("T1")
    assert chain[4].parent_uuid == previous[-1].uuid


async def test_a_record_of_a_forbidden_type_is_refused_whole(store: Store):
    """The CHECK on records.type is a constraint too: a 'system' record rolls back the finish."""
    await store.runs.start_run("R1", "#ops", "T1")
    bad = Record(str(uuid.uuid4()), "system", "2026-11-29T18:00:00Z", {"content": "x"})  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="CHECK"):
        await store.runs.finish_run(
            "R1", "done", [user_record("hi"), bad], RunMetrics(), [], "done"
        )
    assert raw(store.path, "SELECT count(*) FROM records") == [(0,)]


async def test_values_that_are_not_json_fail_before_writing(store: Store):
    """A message that cannot be serialized is refused before the transaction starts."""
    await store.runs.start_run("R1", "#ops", "T1")
    bad = Record(str(uuid.uuid4()), "user", "2026-11-29T18:00:00Z", {"content": object()})
    with pytest.raises(TypeError):
        await store.runs.finish_run("R1", "done", [bad], RunMetrics(), [], "done")
    await store.runs.finish_run("R1", "done", [user_record("hi")], RunMetrics(), [], "done")


async def test_a_lone_surrogate_in_a_record_or_audit_row_is_stored_exactly(store: Store):
    """json.loads lets "\\ud800" through, so a model's text or a tool's output can carry a
    lone surrogate. SQLite cannot take it as UTF-8: finish_run used to raise
    UnicodeEncodeError (not even a StoreError) and the run's records were lost. Such
    values are stored as JSON escapes and read back unchanged."""
    await store.runs.start_run("R1", "#ops", "T1")
    await store.audit.add_tool_call(tool_call_row("R1", "T1", arguments={"q": "half \ud83d"}))
    record = user_record("broken \ud800 text")
    await store.runs.finish_run("R1", "done", [record], RunMetrics(), [], "done")
    [stored] = await store.queries.transcript("T1")
    assert stored.message == record.message
    [call] = await store.audit.entries()
    assert call.arguments == {"q": "half \ud83d"}


async def test_a_cancelled_finish_lands_whole_or_not_at_all(store: Store):
    """Cancelling a finish in flight leaves either all of it or none of it, and a usable writer."""
    await store.runs.start_run("R1", "#ops", "T1")
    records = [user_record(f"line {i}") for i in range(2000)]
    task = asyncio.create_task(
        store.runs.finish_run("R1", "done", records, RunMetrics(rounds=1), [], "done")
    )
    await asyncio.sleep(0)  # one loop turn: the task is now inside its transaction
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.cursors.set_cursor("#ops", "01A")  # the writer is usable (runs after the rollback)
    state = raw(store.path, "SELECT status, (SELECT count(*) FROM records) FROM runs")
    assert state in ([("running", 0)], [("done", 2000)])


async def test_cancelled_while_waiting_for_the_lock_of_another_process(store: Store):
    """A write cancelled while its BEGIN waits on another connection leaves no open transaction."""
    await store.runs.start_run("R1", "#ops", "T1")
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        task = asyncio.create_task(
            store.runs.finish_run("R1", "done", [user_record("hi")], RunMetrics(), [], "done")
        )
        await asyncio.sleep(0)  # the task's BEGIN IMMEDIATE is now waiting in SQLite
        task.cancel()
        # the rollback is queued behind that BEGIN: free the lock so both can run
        other.execute("COMMIT")
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        other.close()
    # the BEGIN that went through after the cancel ended (rolled back, or committed
    # whole when the batch passed its last check before the cancel reached it: the
    # batch runs on aiosqlite's thread while this test holds the loop), so this can begin
    await store.cursors.set_cursor("#ops", "01A")
    state = raw(store.path, "SELECT status, (SELECT count(*) FROM records) FROM runs")
    assert state in ([("running", 0)], [("done", 1)])


# ---- history and cursors -----------------------------------------------------


async def test_history_is_text_only_oldest_first(store: Store):
    """History has the user and assistant texts, never tool_use or tool_result content."""
    await answered_run(store, "#ops", "T1", "R1", "M1", prompt="q1", answer="a1")
    await answered_run(store, "#ops", "T1", "R2", "M2", prompt="q2", answer="a2")
    turns = await store.queries.history("#ops", "T1")
    assert [(t.role, t.text) for t in turns] == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert await store.queries.history("#ops", "unknown") == []


async def test_history_bounds_by_turns_and_chars(store: Store):
    """The newest turns within both bounds; many records are read in pages."""
    for i in range(40):
        await answered_run(
            store, "#ops", "T1", f"R{i}", f"M{i}", prompt=f"q{i:02}", answer=f"a{i:02}"
        )
    turns = await store.queries.history("#ops", "T1", turns=5)
    assert [t.text for t in turns] == ["a37", "q38", "a38", "q39", "a39"]
    turns = await store.queries.history("#ops", "T1", turns=20, chars=9)
    assert [t.text for t in turns] == ["q38", "a38", "q39", "a39"][-3:]
    assert len(await store.queries.history("#ops", "T1", turns=100)) == 80


async def test_history_keeps_the_tail_of_a_huge_last_answer(store: Store):
    """When even the newest turn is over the budget, its end is kept behind an ellipsis."""
    await answered_run(store, "#ops", "T1", "R1", "M1", answer="x" * 50 + "END")
    turns = await store.queries.history("#ops", "T1", chars=10)
    assert turns == [("assistant", "…" + "x" * 6 + "END")]


async def test_cursor_never_moves_back(store: Store):
    """set_cursor is monotonic in message-id order."""
    assert await store.cursors.get_cursor("#ops") is None
    assert await store.cursors.set_cursor("#ops", "01B") is True
    assert await store.cursors.set_cursor("#ops", "01A") is False
    assert await store.cursors.set_cursor("#ops", "01B") is False
    assert await store.cursors.set_cursor("#ops", "01C") is True
    assert await store.cursors.set_cursor("#dev", "01A") is True
    assert await store.cursors.get_cursor("#ops") == "01C"


# ---- reads for people ----------------------------------------------------------


async def test_threads_lists_counts_newest_first(store: Store):
    """threads() has one line per thread with its counts, most recently active first."""
    await answered_run(store, "#ops", "T1", "R1", "M1", calls=2)
    await store.runs.start_run("R2", "#dev", "T9")
    await store.audit.add_tool_call(tool_call_row("R2", "T9", tool="apply_object", mutating=True))
    found = await store.queries.threads()
    assert [
        (t.channel, t.thread_id, t.prompts, t.runs, t.records, t.tool_calls, t.mutating_calls)
        for t in found
    ] == [
        ("#dev", "T9", 0, 1, 0, 1, 1),
        ("#ops", "T1", 1, 1, 4, 2, 0),
    ]
    assert len(await store.queries.threads(1)) == 1


async def test_transcript_lookup_by_id_and_channel(store: Store):
    """A thread id in two channels needs its channel; an unknown id is a ThreadLookupError."""
    await answered_run(store, "#ops", "T1", "R1", "M1")
    await answered_run(store, "#dev", "T1", "R2", "M2")
    with pytest.raises(ThreadLookupError, match="#dev, #ops"):
        await store.queries.transcript("T1")
    assert len(await store.queries.transcript("T1", "#dev")) == 4
    with pytest.raises(ThreadLookupError, match="no thread"):
        await store.queries.transcript("T7")


async def test_thread_ids_with_slashes_do_not_collide(store: Store):
    """('a/b', 'c') and ('a', 'b/c') are different threads."""
    await store.cursors.set_cursor("#x", "1")
    await answered_run(store, "a/b", "c", "R1", "M1", answer="first")
    await answered_run(store, "a", "b/c", "R2", "M2", answer="second")
    assert (await store.queries.history("a/b", "c"))[-1].text == "first"
    assert (await store.queries.history("a", "b/c"))[-1].text == "second"


async def test_audit_filters(store: Store):
    """Every audit filter alone and together; newest first."""
    await store.runs.start_run("R1", "#ops", "T1")
    await store.runs.start_run("R2", "#dev", "T2")
    rows = [
        ("R1", "T1", "list_objects", False, "2026-11-28T10:00:00Z"),
        ("R1", "T1", "delete_object", True, "2026-11-29T10:00:00Z"),
        ("R2", "T2", "list_objects", False, "2026-11-29T11:00:00Z"),
        ("R2", "T2", "apply_object", True, "2026-11-30T09:00:00+01:00"),
    ]
    for run, thread, tool, mutating, started in rows:
        await store.audit.add_tool_call(
            tool_call_row(run, thread, tool=tool, mutating=mutating, started=started)
        )

    async def tools(**kw) -> list[str]:
        return [e.tool for e in await store.audit.entries(**kw)]

    assert await tools() == ["apply_object", "list_objects", "delete_object", "list_objects"]
    assert await tools(thread="T1") == ["delete_object", "list_objects"]
    assert await tools(thread="T1", channel="#dev") == []
    assert await tools(channel="#dev") == ["apply_object", "list_objects"]
    assert await tools(tool="list_objects") == ["list_objects", "list_objects"]
    assert await tools(mutating=True) == ["apply_object", "delete_object"]
    assert await tools(mutating=False) == ["list_objects", "list_objects"]
    assert await tools(since="2026-11-29") == ["apply_object", "list_objects", "delete_object"]
    assert await tools(since="2026-11-30T08:00:00Z") == ["apply_object"]
    assert await tools(thread="T2", tool="list_objects", since="2026-11-29") == ["list_objects"]
    assert await tools(limit=1) == ["apply_object"]
    entry = (await store.audit.entries(mutating=True, limit=1))[0]
    assert (entry.channel, entry.thread_id, entry.started) == (
        "#dev",
        "T2",
        "2026-11-30T08:00:00.000Z",
    )


async def test_audit_values_are_bound_not_spliced(store: Store):
    """Inputs that look like SQL match nothing and change nothing."""
    await answered_run(store, "#ops", "T1", "R1", "M1")
    for evil in ["x' OR '1'='1", "T1'; DROP TABLE tool_calls; --", '" OR 1=1 --']:
        assert await store.audit.entries(tool=evil) == []
        assert await store.audit.entries(thread=evil) == []
        assert await store.audit.entries(channel=evil) == []
        sql, params = audit_query(thread_keys=[evil], channel=evil, tool=evil)
        assert evil not in sql
        assert params.count(evil) == 3
    assert len(await store.audit.entries()) == 1


async def test_audit_queries_walk_indexes(store: Store):
    """Each filter uses its index and none sorts: newest-first is an index walk."""
    for kw, index in [
        ({}, "tool_calls_started"),
        ({"thread_keys": ["#ops/T1"]}, "tool_calls_thread"),
        ({"tool": "x"}, "tool_calls_tool"),
        ({"mutating": True}, "tool_calls_mutating"),
        ({"since": "2026-11-29"}, "tool_calls_started"),
        ({"tool": "x", "since": "2026-11-29"}, "tool_calls_tool"),
        ({"thread_keys": ["#ops/T1"], "mutating": True}, "tool_calls_thread_mutating"),
    ]:
        plan = " | ".join(await store.queries.explain(*audit_query(**kw)))
        assert f"USING INDEX {index}" in plan, (kw, plan)
        assert "TEMP B-TREE" not in plan, (kw, plan)


# ---- concurrency ----------------------------------------------------------------


async def test_concurrent_writers_from_many_tasks(store: Store):
    """Twenty threads' runs written at once by concurrent tasks all land, each chain intact."""

    async def conversation(n: int) -> None:
        for turn in range(3):
            await answered_run(store, "#ops", f"T{n}", f"R{n}.{turn}", f"M{n}.{turn}", calls=2)
            await store.cursors.set_cursor("#ops", f"M{n:02}.{turn}")

    async with asyncio.TaskGroup() as group:
        for n in range(20):
            group.create_task(conversation(n))
    assert raw(store.path, "SELECT count(*) FROM records") == [(20 * 3 * 4,)]
    assert raw(store.path, "SELECT count(*) FROM tool_calls") == [(20 * 3 * 2,)]
    assert raw(store.path, "SELECT count(*) FROM prompts WHERE status = 'done'") == [(60,)]
    assert await store.cursors.get_cursor("#ops") == "M19.2"
    for n in range(20):
        chain = await store.queries.transcript(f"T{n}")
        assert [r.parent_uuid for r in chain[1:]] == [r.uuid for r in chain[:-1]]
    assert await store.queries.integrity_check() == "ok"


async def test_two_stores_on_one_file_wait_for_each_other(tmp_path: Path):
    """Two processes' stores (here: two Store objects) share the file through busy_timeout."""
    path = tmp_path / "a.db"
    async with Store(path) as one, Store(path) as two:

        async def write(store: Store, prefix: str) -> None:
            for i in range(30):
                await store.runs.record_prompt(
                    "#ops", prefix, f"{prefix}{i}", "a", "x", "2026-11-29T18:00:00Z"
                )

        await asyncio.gather(write(one, "A"), write(two, "B"))
        assert len(await one.queries.pending_prompts()) == 60
        assert len(await two.queries.pending_prompts()) == 60


async def test_readers_do_not_wait_for_a_long_write(store: Store):
    """While another connection holds the write lock, reads see the last committed state."""
    await store.cursors.set_cursor("#ops", "01A")
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE cursors SET message_id = '01Z'")
        assert await store.cursors.get_cursor("#ops") == "01A"
        other.execute("COMMIT")
    finally:
        other.close()
    assert await store.cursors.get_cursor("#ops") == "01Z"


async def test_migration_2_keeps_old_audit_rows_with_their_outcome(tmp_path: Path):
    """A version-1 database with audit rows gains the outcome columns: an error row
    becomes 'error', the rest 'ok'; and the approvals table exists."""
    path = tmp_path / "a.db"
    async with Store(path, migrations=MIGRATIONS[:1]) as old:
        await old.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
        await old.runs.start_run("R1", "#ops", "T1")  # claiming M1 writes a later table
    # rows as version 1 wrote them (today's add_tool_call writes the new columns too)
    with closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "INSERT INTO tool_calls (run_id, thread, tool, arguments, is_error, bytes,"
            " mutating, started, duration_ms) SELECT 'R1', thread, 't', '{}', ?, 1, 1,"
            " '2026-11-29T18:00:01.000Z', 1.0 FROM runs WHERE id = 'R1'",
            [(0,), (1,)],
        )
    async with Store(path):
        pass
    assert raw(path, "SELECT is_error, outcome FROM tool_calls ORDER BY id") == [
        (0, "ok"),
        (1, "error"),
    ]
    assert raw(path, "SELECT count(*) FROM approvals") == [(0,)]
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


# ---- started calls and recovery (issue 13) ---------------------------------------


async def test_a_call_row_is_added_as_started_and_completed_as_it_ends(store: Store):
    """add_tool_call commits the started row at once; complete_tool_call sets how it
    ended on that same row; the audit shows the outcome."""
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    row = tool_call_row("R1", "T1", tool="delete_object", mutating=True, size=0, duration_ms=0)
    call_id = await store.audit.add_tool_call(replace(row, outcome="started"))
    assert raw(store.path, "SELECT outcome, is_error FROM tool_calls") == [("started", 0)]
    await store.audit.complete_tool_call(
        call_id, replace(row, outcome="cancelled", is_error=True, bytes=0, duration_ms=5.0)
    )
    [entry] = await store.audit.entries()
    assert (entry.id, entry.outcome, entry.is_error, entry.duration_ms) == (
        call_id,
        "cancelled",
        True,
        5.0,
    )
    with pytest.raises(StoreError, match="no row"):
        await store.audit.complete_tool_call(call_id + 1, row)


async def test_recover_marks_calls_cut_off_unknown_and_keeps_the_prompts_run(store: Store):
    """After a crash a call still 'started' becomes 'unknown'; the requeued prompt
    still names the run it was in, so recovery can tell what that run began."""
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    row = tool_call_row("R1", "T1", tool="scale", arguments={"replicas": 3}, mutating=True)
    await store.audit.add_tool_call(replace(row, outcome="started"))
    assert await store.runs.recover() == ["R1"]
    assert [(p.status, p.run_id) for p in await store.queries.get_prompts(["M1"])] == [
        ("queued", "R1")
    ]
    assert await store.audit.started_calls("R1") == [
        StartedCall("scale", {"replicas": 3}, True, "unknown")
    ]


async def test_interrupted_runs_are_those_with_a_pending_prompt_and_a_mutating_call(store: Store):
    """A pending prompt whose run started a mutating call is listed with the run's calls
    in start order; a run with only read-only calls, or whose prompt is done, is not."""
    for n, thread in ((1, "T1"), (2, "T2"), (3, "T3")):
        await store.runs.record_prompt("#ops", thread, f"M{n}", "a", "x", f"2026-11-29T18:00:0{n}Z")
        await store.runs.start_run(f"R{n}", "#ops", thread, [f"M{n}"])
    await store.audit.add_tool_call(tool_call_row("R1", "T1", tool="get", arguments={"n": "a"}))
    await store.audit.add_tool_call(
        replace(tool_call_row("R1", "T1", tool="rm", mutating=True), outcome="started")
    )
    await store.audit.add_tool_call(tool_call_row("R2", "T2", tool="get"))  # read-only only
    await store.audit.add_tool_call(tool_call_row("R3", "T3", tool="rm", mutating=True))
    await store.runs.mark_prompts(["M3"], "done")
    await store.runs.recover()
    [run] = await store.queries.interrupted_runs()
    assert (run.run_id, run.channel, run.thread_id, run.prompt_ids) == ("R1", "#ops", "T1", ("M1",))
    assert [(c.tool, c.mutating, c.outcome) for c in run.calls] == [
        ("get", False, "ok"),
        ("rm", True, "unknown"),
    ]
    assert [p.id for p in await store.queries.pending_prompts()] == ["M1", "M2"]


async def test_a_run_paused_for_approval_is_left_alone_by_recovery(store: Store):
    """A run waiting for an approval (or decided, not yet resumed) stays 'running' with
    its prompts and 'started' calls; it is neither pending nor interrupted."""
    await store.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await store.audit.add_tool_call(
        replace(tool_call_row("R1", "T1", tool="rm", mutating=True), outcome="started")
    )
    with closing(sqlite3.connect(store.path)) as db, db:
        db.execute(
            "INSERT INTO approvals (id, run_id, thread, requested, expires, requested_by,"
            " calls, conversation) SELECT 'A1', 'R1', thread, '2026-11-29T18:00:01.000Z',"
            " '2026-11-29T19:00:01.000Z', 'a', '[]', '[]' FROM runs WHERE id = 'R1'"
        )
    for decided in (False, True):
        if decided:
            with closing(sqlite3.connect(store.path)) as db, db:
                db.execute(
                    "UPDATE approvals SET status = 'approved', decided_by = 'bob',"
                    " decided = '2026-11-29T18:00:02.000Z'"
                )
        assert await store.runs.recover() == []
        assert (await store.queries.run_metrics("R1") or ("?",))[0] == "running"
        assert [(p.status, p.run_id) for p in await store.queries.get_prompts(["M1"])] == [
            ("running", "R1")
        ]
        assert await store.queries.pending_prompts() == []
        assert await store.queries.interrupted_runs() == []
        assert [c.outcome for c in await store.audit.started_calls("R1")] == ["started"]


# ---- tokens as they are spent, and whose they are (issue 26) -----------------------


async def test_tokens_added_as_spent_are_never_lowered_by_the_runs_end(store: Store):
    """add_run_tokens lands each response's tokens on the run row at once; a finish
    with metrics that know fewer (a stopped run's) keeps them, one that knows more wins."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-29T18:00:00Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await store.runs.add_run_tokens("R1", 90_000, 10_000)
    await store.runs.add_run_tokens("R1", 5, 1)
    tokens = "SELECT prompt_tokens, completion_tokens FROM runs WHERE id = 'R1'"
    assert raw(store.path, tokens) == [(90_005, 10_001)]
    await store.runs.finish_run("R1", "interrupted", [], RunMetrics(), ["M1"], "failed")
    assert raw(store.path, tokens) == [(90_005, 10_001)]
    await store.runs.record_prompt("#ops", "T2", "M2", "alice", "y", "2026-11-29T18:00:01Z")
    await store.runs.start_run("R2", "#ops", "T2", ["M2"])
    await store.runs.add_run_tokens("R2", 10, 1)
    metrics = RunMetrics(prompt_tokens=30, completion_tokens=3)
    await store.runs.finish_run("R2", "done", [], metrics, ["M2"], "done")
    assert raw(store.path, tokens.replace("R1", "R2")) == [(30, 3)]


async def test_a_cut_off_runs_tokens_stay_its_senders_when_the_prompt_runs_again(store: Store):
    """A run cut off by a restart keeps its tokens for its sender after its prompt went
    on to the next run; only that next run counts as the sender's run."""
    await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-29T18:00:00Z")
    await store.runs.record_prompt("#ops", "T1", "M2", "bob", "y", "2026-11-29T18:00:01Z")
    await store.runs.start_run("R1", "#ops", "T1", ["M1", "M2"])
    await store.runs.add_run_tokens("R1", 100_000, 0)
    assert await store.runs.recover() == ["R1"]  # the daemon died; the prompts queue again
    await store.runs.start_run("R2", "#ops", "T1", ["M1"])
    await store.runs.finish_run("R2", "done", [], RunMetrics(prompt_tokens=7), ["M1"], "done")
    alice = await store.queries.sender_runs("alice", "2000-01-01T00:00:00Z")
    assert [(r.tokens, r.answered) for r in alice] == [(100_000, False), (7, True)]
    bob = await store.queries.sender_runs("bob", "2000-01-01T00:00:00Z")
    assert [(r.tokens, r.answered) for r in bob] == [(100_000, False)]
    assert await store.queries.sender_runs("carol", "2000-01-01T00:00:00Z") == []


async def test_migration_5_finds_the_senders_of_the_runs_so_far(tmp_path: Path):
    """A version-4 database's runs get their senders from their prompts, so the limits
    read the same runs as before the upgrade."""
    path = tmp_path / "a.db"
    async with Store(path, migrations=MIGRATIONS[:4]) as old:
        await old.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-29T18:00:00Z")
        await old.runs.record_prompt("#ops", "T1", "M2", "bob", "y", "2026-11-29T18:00:01Z")
        await old.runs.start_run("R1", "#ops", "T1")
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE prompts SET run_id = 'R1', status = 'done'")
        db.execute("UPDATE runs SET prompt_tokens = 40, status = 'done' WHERE id = 'R1'")
    async with Store(path) as store:
        runs = await store.queries.sender_runs("bob", "2000-01-01T00:00:00Z")
    assert [(r.tokens, r.answered) for r in runs] == [(40, True)]
    assert raw(path, "SELECT name FROM schema_migrations WHERE version = 5") == [("run_senders",)]
