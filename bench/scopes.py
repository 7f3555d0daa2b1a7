"""Benchmark stored REPL scopes (issue 14): what dumping and loading a thread's REPL costs.

Prints two Markdown tables:

1. pydantic-monty directly, for a small scope (a few variables), 10 000
   rows of dicts and a 50 MB string: the dump's size, ``await
   session.dump()`` of an idle session, and ``await
   fresh.load_session(blob)`` into a fresh checkout (median of N);
2. the added cost per run, as the daemon runs it: ``restore_scope``, one run
   through ``OpenAiCompatibleBackend`` against the scripted model (a
   ``run_code`` that changes the REPL, then the answer) and ``checkpoint``,
   over a ``CodeModeToolExecutor`` with the real ``SignedScopeStore`` (a
   sessions ``Store`` in a temporary directory: HMAC and SQLite write
   included) and without a store; the two alternate, on one pool, for the
   small scope and the 10 000-row scope (median of N, ratio).

Run: ``.venv/bin/python bench/scopes.py`` from the repository root (about
half a minute). The pools are closed cleanly.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_monty import AsyncMonty

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.sandbox.pool import close_pool, create_pool
from daemon.config import ModelConfig
from daemon.logging import configure_logging
from daemon.model import OpenAiCompatibleBackend
from daemon.runtime.runs import Prompt, RunRequest
from daemon.runtime.scopes import SignedScopeStore
from sessions import Store
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls

ROWS = "rows = [{'id': i, 'name': f'object-{i}', 'size': i * 7 % 10000} for i in range(10_000)]"
SCOPES = {
    "small": "x = 5\nletters = ['a', 'b', 'c']\nconfig = {'ns': 'prod', 'replicas': 3}",
    "rows": ROWS,
    "big": "big = 'x' * 50_000_000",
}
LABELS = {"small": "small (3 variables)", "rows": "10 000 rows of dicts", "big": "50 MB string"}
DUMP_ROUNDS = {"small": 50, "rows": 20, "big": 7}
# each run changes the REPL, so each checkpoint dumps it
CHANGE = {"small": "x += 1", "rows": "rows[0]['size'] += 1"}
RUN_ROUNDS = {"small": 50, "rows": 20}


async def dump_and_load(pool: AsyncMonty, setup: str, rounds: int) -> tuple[int, float, float]:
    """Dump size, and median seconds of ``dump()`` and of ``load_session()`` (fresh checkouts)."""
    dumps, loads = [], []
    async with pool.checkout() as session:
        await session.feed_run(setup)
        blob = await session.dump()  # warm-up
        for _ in range(rounds):
            t0 = time.perf_counter()
            blob = await session.dump()
            dumps.append(time.perf_counter() - t0)
    for _ in range(rounds):
        async with pool.checkout() as fresh:
            t0 = time.perf_counter()
            await fresh.load_session(blob)
            loads.append(time.perf_counter() - t0)
    return len(blob), statistics.median(dumps), statistics.median(loads)


async def one_run(
    executor: CodeModeToolExecutor, backend: OpenAiCompatibleBackend, request: RunRequest
) -> float:
    """Seconds of one run as ``Daemon._run`` makes it: restore, run, checkpoint."""
    t0 = time.perf_counter()
    await executor.restore_scope(request.thread)
    result = await backend.run(request)
    await executor.checkpoint(request.thread)
    elapsed = time.perf_counter() - t0
    assert result.reply == "done", result.reply
    return elapsed


async def per_run_cost(pool: AsyncMonty, tmp: Path) -> dict[str, tuple[int, int, float, float]]:
    """Per scope kind: the stored dump's size after the first run and after the last,
    and the median seconds per run with and without a store."""
    limits = CodeModeLimits()
    results: dict[str, tuple[int, int, float, float]] = {}
    async with Store(tmp / "asyncai.db") as store, FakeOpenAI() as fake:
        signed = SignedScopeStore(store.scopes, b"k" * 32, max_bytes=limits.max_scope_dump)
        stored = CodeModeToolExecutor(FakeToolExecutor(), limits, pool=pool, scopes=signed)
        bare = CodeModeToolExecutor(FakeToolExecutor(), limits, pool=pool)
        params = ModelConfig(base_url=fake.base_url, api_key="k", model="fake-model")
        backends = {
            "with": (stored, OpenAiCompatibleBackend(params, stored)),
            "without": (bare, OpenAiCompatibleBackend(params, bare)),
        }
        serial = 0
        try:
            for kind in ("small", "rows"):
                thread = f"T-{kind}"
                # the daemon records a prompt's thread before its run: save() needs it
                await store.runs.record_prompt(
                    "#ops", thread, thread, "alice", "x", "2026-11-30T08:00:00Z"
                )
                times: dict[str, list[float]] = {"with": [], "without": []}
                first_size = 0
                for n in range(RUN_ROUNDS[kind] + 1):  # the first run sets up and warms up
                    for way, (executor, backend) in backends.items():
                        serial += 1
                        code = SCOPES[kind] if n == 0 else CHANGE[kind]
                        fake.add(ToolCalls(("run_code", {"code": code})), Reply("done"))
                        prompt = Prompt(f"m{serial}", "alice", "go")
                        request = RunRequest(f"R{serial}", "#ops", thread, [], [prompt])
                        elapsed = await one_run(executor, backend, request)
                        if n > 0:
                            times[way].append(elapsed)
                    if n == 0:
                        first_size = await _stored_size(store, thread)
                results[kind] = (
                    first_size,
                    await _stored_size(store, thread),
                    statistics.median(times["with"]),
                    statistics.median(times["without"]),
                )
        finally:
            for executor, backend in backends.values():
                await backend.aclose()
                await executor.aclose()
    return results


async def _stored_size(store: Store, thread: str) -> int:
    saved = await store.scopes.load_scope("#ops", thread)
    assert saved is not None
    return saved.size


async def main() -> None:
    """Measure and print the tables."""
    # an info line per saved scope would drown the tables
    configure_logging(verbose=False, stream=io.StringIO())
    pool = create_pool(CodeModeLimits())
    await pool.__aenter__()
    try:
        sizes = {k: await dump_and_load(pool, SCOPES[k], DUMP_ROUNDS[k]) for k in SCOPES}
        with tempfile.TemporaryDirectory() as tmp:
            runs = await per_run_cost(pool, Path(tmp))
    finally:
        await close_pool(pool)

    print(f"stored REPL scopes benchmark, {date.today().isoformat()}\n")
    print(
        "| pydantic-monty directly | dump size | `await session.dump()` | `load_session` (fresh) |"
    )
    print("|---|---|---|---|")
    for kind, (size, dump, load) in sizes.items():
        print(
            f"| {LABELS[kind]} (median of {DUMP_ROUNDS[kind]}) | {_size(size)} "
            f"| {dump * 1e3:,.1f} ms | {load * 1e3:,.1f} ms |"
        )
    print()
    print(
        "| per run (restore_scope + run + checkpoint) | stored dump, after run 1 / last "
        "| with a store | without | ratio |"
    )
    print("|---|---|---|---|---|")
    for kind, (first, last, with_store, without) in runs.items():
        print(
            f"| {LABELS[kind]}, a run_code that changes it (median of {RUN_ROUNDS[kind]}) "
            f"| {_size(first)} / {_size(last)} "
            f"| {with_store * 1e3:,.1f} ms | {without * 1e3:,.1f} ms "
            f"| {with_store / without:.2f}× |"
        )


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


if __name__ == "__main__":
    asyncio.run(main())
