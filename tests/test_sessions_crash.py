"""A process killed with SIGKILL in the middle of writing leaves a sound database."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from sessions import Store

ROOT = Path(__file__).resolve().parents[1]

# Writes runs in a loop, as the daemon would, and reports each finished one.
WRITER = """
import asyncio, sys
from sessions import RunMetrics, Store
from sessions.testing import run_records, tool_call_row

async def main(path):
    async with Store(path) as store:
        for n in range(100_000):  # bounded: the parent kills it long before
            run = f"R{n}"
            await store.runs.record_prompt("#ops", "T1", f"M{n}", "a", "x", "2026-11-29T18:00:00Z",
                                      advance_cursor=True)
            await store.runs.start_run(run, "#ops", "T1", [f"M{n}"])
            for _ in range(3):
                await store.audit.add_tool_call(tool_call_row(run, "T1"))
            await store.runs.finish_run(run, "done", run_records(), RunMetrics(rounds=2),
                                   [f"M{n}"], "done")
            print(n, flush=True)

asyncio.run(main(sys.argv[1]))
"""


async def test_sigkill_while_writing_leaves_a_sound_database(tmp_path: Path):
    """SIGKILL mid-loop: the file opens, passes integrity_check, and every finished run is whole."""
    path = tmp_path / "asyncai.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(path),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            for _ in range(20):  # let it get well into the loop, mid-write at any moment
                line = await proc.stdout.readline()
                assert line, "the writer exited early"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    async with Store(path) as store:
        assert await store.queries.integrity_check() == "ok"
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        done = db.execute("SELECT count(*) FROM runs WHERE status = 'done'").fetchone()[0]
        assert done >= 20
        # a finished run has all four records; an unfinished one has none
        per_run = db.execute(
            "SELECT r.status, count(rec.seq) FROM runs r"
            " LEFT JOIN records rec ON rec.run_id = r.id GROUP BY r.id"
        ).fetchall()
        assert {(status, count) for status, count in per_run} <= {("done", 4), ("running", 0)}
        assert db.execute("SELECT count(*) FROM records").fetchone()[0] == done * 4
