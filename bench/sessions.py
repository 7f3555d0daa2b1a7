"""Benchmark of the sessions store: write throughput and audit query times.

Prints markdown tables:

1. record-insert throughput, written as the daemon writes a run (start_run,
   one committed add_tool_call per nested call, then finish_run with the
   run's records in one transaction);
2. the audit queries (``Store.audit``, limit 100, newest first) at 10 000
   and 1 000 000 tool_calls rows, each with its ``EXPLAIN QUERY PLAN``.

Bulk rows are generated with plain sqlite3 ``executemany`` in one
transaction, so the 1M case takes well under a minute. Run:
``.venv/bin/python bench/sessions.py [--runs N] [--sizes 10000,1000000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

# Run as `python bench/sessions.py`, this file's directory comes first on
# sys.path and this module would shadow the `sessions` package it measures.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from sessions import RunMetrics, Store  # noqa: E402 (after the sys.path fix above)
from sessions.audit import audit_query  # noqa: E402
from sessions.ids import iso_utc, session_id, thread_key  # noqa: E402
from sessions.testing import run_records, tool_call_row  # noqa: E402

TOOLS = [
    "list_objects",
    "get_object",
    "get_events",
    "get_logs",
    "list_workspaces",
    "get_api_resources",
    "apply_object",
    "patch_object",
    "scale_object",
    "delete_object",
]
MUTATING = {"apply_object", "patch_object", "scale_object", "delete_object"}
THREADS = 100
RUNS_PER_THREAD = 20
NOW = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)


async def write_throughput(path: Path, runs: int, calls: int) -> list[str]:
    """Rows per second as runs are written the daemon's way."""
    lines = [
        "| write | count | rows/s | ms each |",
        "|---|---:|---:|---:|",
    ]
    async with Store(path) as store:
        for batch in (4, 16):  # one run_code call; eight rounds (the most a run has)
            records_time = calls_time = start_time = 0.0
            records_written = 0
            for n in range(runs):
                run, thread = f"W{batch}.{n}", f"T{n % 10}"
                t0 = time.perf_counter()
                await store.runs.start_run(run, "#bench", thread)
                t1 = time.perf_counter()
                records = [
                    record
                    for _ in range(batch // 4)
                    for record in run_records(f"question {n}", answer=f"answer {n}", at=NOW)
                ]
                for _ in range(calls):
                    row = tool_call_row(run, thread, record_uuid=records[1].uuid)
                    await store.audit.add_tool_call(row)
                t2 = time.perf_counter()
                await store.runs.finish_run(run, "done", records, RunMetrics(rounds=2), [], "done")
                t3 = time.perf_counter()
                start_time += t1 - t0
                calls_time += t2 - t1
                records_time += t3 - t2
                records_written += len(records)
            if batch == 4:
                lines += [
                    f"| start_run (run row, own transaction) | {runs} |"
                    f" {runs / start_time:,.0f} | {start_time / runs * 1000:.2f} |",
                    f"| add_tool_call (one row, committed at once) | {runs * calls} |"
                    f" {runs * calls / calls_time:,.0f} |"
                    f" {calls_time / (runs * calls) * 1000:.2f} |",
                ]
            lines.append(
                f"| finish_run, {batch} records + run + prompts in one transaction |"
                f" {records_written} records | {records_written / records_time:,.0f} |"
                f" {records_time / runs * 1000:.2f} per run |"
            )
            if batch == 4:
                per_run = (start_time + calls_time + records_time) / runs * 1000
                label = f"a whole run ({calls} nested calls, 4 records)"
                lines.append(f"| {label} | {runs} | — | {per_run:.2f} |")
    return lines


def fill(path: Path, rows: int, seed: int = 7) -> float:
    """Threads, runs and ``rows`` tool calls over 90 days, in one transaction; seconds taken.

    Rows go in in time order, as the daemon writes them. The tool_calls
    indexes are dropped for the load and rebuilt from their own stored
    definitions afterwards (a sort instead of a million random inserts),
    which keeps the 1M case to well under a minute on 2 cores.
    """
    rng = random.Random(seed)
    t0 = time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA cache_size = -262144")  # 256 MiB for the index rebuild
    db.execute("BEGIN")
    indexes = [
        (name, sql)
        for name, sql in db.execute(
            "SELECT name, sql FROM sqlite_master"
            " WHERE type = 'index' AND tbl_name = 'tool_calls' AND sql IS NOT NULL"
        )
    ]
    for name, _ in indexes:
        db.execute(f'DROP INDEX "{name}"')
    created = iso_utc(NOW - timedelta(days=90))
    threads = []
    for t in range(THREADS):
        channel, thread = ("#ops", "#dev", "#k8s", "#web")[t % 4], f"01THREAD{t:04}"
        key = thread_key(channel, thread)
        threads.append(key)
        db.execute(
            "INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?)",
            (key, channel, thread, session_id(channel, thread), created, created),
        )
        for r in range(RUNS_PER_THREAD):
            db.execute(
                "INSERT INTO runs (id, thread, started, status) VALUES (?, ?, ?, 'done')",
                (f"{key}:R{r}", key, created),
            )
    first_ms = int((NOW - timedelta(days=90)).timestamp() * 1000)
    step_ms = 90 * 24 * 3600 * 1000 / rows
    arguments = [json.dumps({"kind": "pods", "namespace": f"ns{n}"}) for n in range(50)]

    def stamp(ms: int) -> str:
        # iso_utc's format, without building a datetime per row (a third of the load time)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"

    assert stamp(first_ms) == iso_utc(NOW - timedelta(days=90))

    def batch(start: int, n: int):
        for i in range(start, start + n):
            key = rng.choice(threads)
            tool = rng.choice(TOOLS)
            started = stamp(first_ms + int(i * step_ms))
            yield (
                f"{key}:R{rng.randrange(RUNS_PER_THREAD)}",
                key,
                None,
                tool,
                rng.choice(arguments),
                int(rng.random() < 0.03),
                rng.randrange(100, 50_000),
                int(tool in MUTATING),
                started,
                rng.random() * 200,
            )

    done = 0
    while done < rows:
        n = min(50_000, rows - done)
        db.executemany(
            "INSERT INTO tool_calls (run_id, thread, record_uuid, tool, arguments, is_error,"
            " bytes, mutating, started, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            batch(done, n),
        )
        done += n
    for _, sql in indexes:
        db.execute(sql)
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - t0


QUERIES: list[tuple[str, dict]] = [
    ("asyncai audit", {}),
    ("--thread T", {"thread": "01THREAD0042"}),
    ("--thread T --channel C", {"thread": "01THREAD0042", "channel": "#k8s"}),
    ("--tool get_logs", {"tool": "get_logs"}),
    ("--mutating", {"mutating": True}),
    ("--since (last 24 h)", {"since": iso_utc(NOW - timedelta(days=1))}),
    (
        "--tool X --since (last 24 h)",
        {"tool": "delete_object", "since": iso_utc(NOW - timedelta(days=1))},
    ),
    ("--thread T --mutating", {"thread": "01THREAD0042", "channel": "#k8s", "mutating": True}),
    ("--channel C", {"channel": "#dev"}),
]


async def query_times(path: Path, repeat: int = 5) -> tuple[list[list[str]], dict[str, str]]:
    """Median ms of each audit query (limit 100) and its plan."""
    rows, plans = [], {}
    async with Store(path) as store:
        for label, kw in QUERIES:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                found = await store.audit.entries(limit=100, **kw)
                times.append((time.perf_counter() - t0) * 1000)
            # the thread-only query resolves the id to its one key first, as Store.audit does
            keys = [thread_key(kw.get("channel", "#k8s"), kw["thread"])] if "thread" in kw else None
            sql, params = audit_query(
                thread_keys=keys,
                channel=None if "thread" in kw else kw.get("channel"),
                tool=kw.get("tool"),
                mutating=kw.get("mutating"),
                since=kw.get("since"),
                limit=100,
            )
            plans[label] = "; ".join(await store.queries.explain(sql, params))
            rows.append([label, f"{statistics.median(times):.2f}", str(len(found))])
        t0 = time.perf_counter()
        await store.queries.threads(50)
        rows.append(["asyncai threads (counts)", f"{(time.perf_counter() - t0) * 1000:.2f}", "50"])
    return rows, plans


async def main(argv: list[str] | None = None) -> int:
    """Run both benchmarks in a temporary directory and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs written for throughput")
    parser.add_argument("--calls", type=int, default=3, help="nested calls per run")
    parser.add_argument("--sizes", default="10000,1000000", help="tool_calls row counts")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"sessions benchmark · {datetime.now(UTC):%Y-%m-%d} · SQLite {sqlite3.sqlite_version}")
    print(f"Python {sys.version.split()[0]} · WAL, synchronous=NORMAL\n")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"### Writes ({args.runs} runs)\n")
        for line in await write_throughput(Path(tmp) / "writes.db", args.runs, args.calls):
            print(line)
        results: dict[int, list[list[str]]] = {}
        plans: dict[str, str] = {}
        for size in sizes:
            path = Path(tmp) / f"audit-{size}.db"
            async with Store(path):
                pass  # the schema, by the real migrations
            took = fill(path, size)
            print(f"\n(generated {size:,} tool_calls rows in {took:.1f} s)", file=sys.stderr)
            results[size], plans = await query_times(path)
            path.unlink()
    header = " | ".join(f"{size:,} rows: ms" for size in sizes)
    print(f"\n### Audit queries (limit 100, median of 5)\n\n| query | {header} | rows returned |")
    print("|---|" + "---:|" * len(sizes) + "---:|")
    for i, (label, _) in enumerate([*QUERIES, ("asyncai threads (counts)", {})]):
        cells = " | ".join(results[size][i][1] for size in sizes)
        print(f"| {label} | {cells} | {results[sizes[-1]][i][2]} |")
    print("\n### Query plans (EXPLAIN QUERY PLAN)\n")
    for label, plan in plans.items():
        print(f"- `{label}`: {plan}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
