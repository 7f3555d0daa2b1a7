"""Benchmark of the console (issue 30): a thread of 1,000 runs, its page beside a plain query.

Builds a store with one thread of ``--runs`` runs (1,000 by default), each
written the daemon's way (start_run, two committed nested calls, finish_run
with the run's four records), serves the console over it on loopback, logs
in, and times over HTTP, ``--repeat`` times each:

- the thread page as it opens (its newest 50 runs unfolded, every call);
- the same page with ``?runs=all`` (every run unfolded);
- the threads page;

beside a plain ``sqlite3`` read of the same rows the page shows (the runs,
their prompts, records and calls, no rendering). Prints a markdown table of
median and p95 milliseconds; the issue's bar is the thread page under 300 ms.
No assertion: a number to read, not a test. Run:
``.venv/bin/python bench/web.py [--runs 1000] [--repeat 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path

# Run as `python bench/web.py`, this file's directory comes first on sys.path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import httpx2  # noqa: E402 (after the sys.path fix above)

from daemon.config import Config  # noqa: E402
from daemon.web import Console, Sources, WebServer, console_app  # noqa: E402
from sessions import RunMetrics, Store  # noqa: E402
from sessions.ids import thread_key  # noqa: E402
from sessions.testing import run_records, tool_call_row  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
CHANNEL = "#ops"
THREAD = "bench-thread"


async def fill(store: Store, runs: int) -> None:
    """One thread of ``runs`` runs, each with two nested calls, as the daemon writes them."""
    for i in range(runs):
        prompt_id, run_id = f"p{i:05d}", f"r{i:05d}"
        await store.runs.record_prompt(
            CHANNEL, THREAD, prompt_id, "alice", f"question {i}", "2026-11-29T18:00:00Z"
        )
        await store.runs.start_run(run_id, CHANNEL, THREAD, [prompt_id])
        records = run_records(f"question {i}", answer=f"answer {i}")
        for tool in ("list_objects", "get_object"):
            await store.audit.add_tool_call(
                tool_call_row(run_id, THREAD, tool=tool, record_uuid=records[1].uuid)
            )
        await store.runs.finish_run(
            run_id, "done", records, RunMetrics(rounds=2, nested_calls=2), [prompt_id], "done"
        )


def plain_query(path: Path, limit: int | None) -> int:
    """The rows the thread page shows, read with sqlite3 and nothing else; how many."""
    key = thread_key(CHANNEL, THREAD)
    with closing(sqlite3.connect(path)) as db:
        runs = db.execute(
            "SELECT id, started, finished, status, prompt_tokens, completion_tokens,"
            " nested_calls, error FROM runs WHERE thread = ? ORDER BY started DESC, id DESC"
            " LIMIT ?",
            (key, -1 if limit is None else limit),
        ).fetchall()
        ids = [r[0] for r in runs]
        marks = ",".join("?" * len(ids))
        prompts = db.execute(f"SELECT * FROM prompts WHERE run_id IN ({marks})", ids).fetchall()
        records = db.execute(
            f"SELECT run_id, uuid, type, message FROM records WHERE run_id IN ({marks})", ids
        ).fetchall()
        calls = db.execute(f"SELECT * FROM tool_calls WHERE run_id IN ({marks})", ids).fetchall()
    return len(runs) + len(prompts) + len(records) + len(calls)


async def timed(work: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    """Milliseconds of each of ``repeat`` calls of ``work`` (after one warm-up)."""
    await work()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        await work()
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(name: str, times: list[float], note: str) -> str:
    """A table row: median and p95 of ``times``."""
    p95 = sorted(times)[max(0, round(len(times) * 0.95) - 1)]
    return f"| {name} | {statistics.median(times):.1f} | {p95:.1f} | {note} |"


async def main(runs: int, repeat: int) -> None:
    """Fill, serve, log in, time; print the table."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "asyncai.db"
        tokens = Path(tmp) / "web.tokens"
        tokens.write_text(f"{TOKEN} operator\n")
        tokens.chmod(0o600)
        config = Config()
        config.web.tokens = tokens
        async with Store(db) as store:
            started = time.perf_counter()
            await fill(store, runs)
            filled = time.perf_counter() - started
            console = Console(Sources(config=config, store=store))
            server = WebServer(console_app(console), "127.0.0.1:0")
            await server.start()
            try:
                async with httpx2.AsyncClient(base_url=server.url) as client:
                    page = await client.get("/login")
                    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
                    assert csrf is not None
                    await client.post("/login", data={"csrf": csrf.group(1), "token": TOKEN})
                    path = f"/threads/%23ops/{THREAD}"
                    sizes: dict[str, int] = {}

                    def get(url: str) -> Callable[[], Awaitable[object]]:
                        async def fetch() -> object:
                            answer = await client.get(url)
                            answer.raise_for_status()
                            sizes[url] = len(answer.content)
                            return answer

                        return fetch

                    async def plain(limit: int | None) -> int:
                        return await asyncio.to_thread(plain_query, db, limit)

                    page_ms = await timed(get(path), repeat)
                    all_ms = await timed(get(f"{path}?runs=all"), max(3, repeat // 4))
                    threads_ms = await timed(get("/"), repeat)
                    plain_ms = await timed(lambda: plain(50), repeat)
                    plain_all_ms = await timed(lambda: plain(None), repeat)
            finally:
                console.closing.set()
                await server.aclose()
    kib = {url: size // 1024 for url, size in sizes.items()}
    print(f"## The console: one thread of {runs} runs (2 nested calls each)\n")
    print(f"Filled in {filled:.1f} s, the daemon's way. Times in ms over loopback HTTP.\n")
    print("| what | median ms | p95 ms | note |")
    print("|---|---|---|---|")
    print(row("thread page (newest 50 runs)", page_ms, f"{kib[path]} KiB of HTML; bar: 300 ms"))
    print(row("thread page, ?runs=all", all_ms, f"{kib[path + '?runs=all']} KiB of HTML"))
    print(row("threads page", threads_ms, f"{kib['/']} KiB"))
    print(row("plain sqlite3, the same 50 runs' rows", plain_ms, "no rendering, no HTTP"))
    print(row("plain sqlite3, every run's rows", plain_all_ms, "no rendering, no HTTP"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.repeat))
