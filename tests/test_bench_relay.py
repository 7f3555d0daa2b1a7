"""bench/relay.py's durable floor: its one transaction is the store's for a prompt answered
at once (the same statements on the same schema), so that bench/daemon.py can say how
much of the daemon's excess over the relay is the durable record alone (issue 31)."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from bench.relay import Relay, open_db
from sessions import RunMetrics, Store
from sessions.outbox import Ack, OutboxReply
from sessions.testing import assistant_record, run_records, user_record
from tests.fakes.writer_jobs import trace_statements

TS = "2026-11-30T18:00:00Z"
SHAPE = re.compile(r"^\s*(INSERT OR IGNORE INTO|INSERT INTO|UPDATE|SELECT .*? FROM)\s+(\w+)")


def shapes(statements: list[str]) -> list[tuple[str, str]]:
    """Each statement as (what it does, to which table), BEGIN and COMMIT left out."""
    found = []
    for sql in statements:
        if match := SHAPE.match(sql):
            verb = match[1].split()[0] if match[1].startswith("SELECT") else match[1]
            found.append((verb, match[2]))
    return found


async def store_transaction(path: Path) -> list[str]:
    """The statements of the store's one job for a prompt at the live edge answered at
    once, acking the reply before it (as the daemon writes it)."""
    async with Store(path, cwd="/srv/asyncai", version="0.1.0") as store:
        await store.runs.record_prompt("#ops", "T0", "M0", "alice", "hi", TS, advance_cursor=True)
        await store.runs.start_run("R0", "#ops", "T0", ["M0"])
        reply = OutboxReply("R0", "#ops", "T0", "M0", "cid-M0", "the answer")
        await store.runs.finish_run(
            "R0", "done", run_records("hi"), RunMetrics(), ["M0"], "done", reply=reply
        )
        ack = Ack("R0", "M0R", "2026-11-30T18:00:01Z")
        await store.runs.record_prompt(
            "#ops", "T1", "M1", "bob", "next", TS, advance_cursor=True, acked=[ack], defer=True
        )
        await store.runs.start_run("R1", "#ops", "T1", ["M1"], defer=True)
        statements = await trace_statements(store)
        reply = OutboxReply("R1", "#ops", "T1", "M1", "cid-M1", "the next answer")
        records = [user_record("next"), assistant_record([{"type": "text", "text": "ok"}])]
        await store.runs.finish_run(
            "R1", "done", records, RunMetrics(), ["M1"], "done", reply=reply
        )
    return statements


async def test_the_durable_relay_writes_the_stores_statements_on_its_schema(tmp_path: Path):
    """Statement for statement (what and where) the store's transaction; its rows pass the
    schema's checks and foreign keys, and each prompt acks the reply before it."""
    daemon = await store_transaction(tmp_path / "daemon.db")
    db = await open_db(str(tmp_path / "relay.db"), durable=True)
    try:
        no_hub: Any = None  # only the transaction runs here: nothing is received or published
        relay = Relay(no_hub, "#ops", "http://127.0.0.1:9/v1", db, "durable")
        statements: list[str] = []
        await db.set_trace_callback(statements.append)
        frame = {"id": "M0", "thread": "T0", "from": "alice", "text": "hi"}
        await db._execute(relay.write_durable, frame, "the answer")
        first_run = relay.last_run
        statements.clear()
        frame = {"id": "M1", "thread": "T1", "from": "bob", "text": "next"}
        await db._execute(relay.write_durable, frame, "the next answer")
        await relay.client.close()
    finally:
        await db.close()
    assert shapes(statements) == shapes(daemon)
    assert len(shapes(statements)) == 10
    with closing(sqlite3.connect(tmp_path / "relay.db")) as conn:
        assert conn.execute("SELECT id, status FROM prompts ORDER BY id").fetchall() == [
            ("M0", "done"),
            ("M1", "done"),
        ]
        assert conn.execute("SELECT message_id FROM cursors").fetchall() == [("M1",)]
        assert conn.execute("SELECT run_id, status FROM outbox ORDER BY committed").fetchall()[
            0
        ] == (first_run, "acked")
        assert conn.execute("SELECT count(*) FROM records").fetchone() == (4,)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
