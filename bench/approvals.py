"""Benchmark approvals in code mode (issue 13): what a pause and a resume cost.

Prints a Markdown table, for a small scope (a few variables) and a ~10 MB
scope (a 10 MB string in a variable before the pausing call):

1. the stored snapshot's size (``Pause.snapshot``; the scope holds the
   helpers and their imports too), and the same pause's in a bare session;
2. ``await session.dump()`` of the paused bare session, and ``load_snapshot``
   into a fresh checkout (pydantic-monty directly, median of a few);
3. ``run_code`` up to the paused result, and ``resume()`` up to the
   resumed snippet's result (the executor end to end, median of N).

Run: ``.venv/bin/python bench/approvals.py`` (several seconds). The executor
owns its pool here, as in the daemon, and closes it cleanly.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_monty import AsyncFunctionSnapshot, AsyncFutureSnapshot, AsyncMonty

from daemon.approvals import Decision, Verdict
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.sandbox.pool import close_pool, create_pool
from daemon.logging import configure_logging
from daemon.tools import ThreadKey, ToolDefinition
from tests.fakes.executor import FakeToolExecutor

ROUNDS = {"small": 30, "big": 8}
DUMP_ROUNDS = 5
SETUP = {"small": 'x = 5\nletters = ["a", "b", "c"]', "big": 'big = "x" * 10_000_000\nx = 5'}
PAUSING = 'r = await delete(name="a")\n[x, r]'


def ask(definition: ToolDefinition, arguments: dict[str, Any]) -> Verdict:
    """Every mutating call waits for a person."""
    return Verdict("ask", "not read-only")


async def _host_delete(**kwargs: Any) -> None:  # pragma: no cover - never called
    """Stands for the catalog function; its calls arrive as snapshots."""


async def paused_dump_and_load(pool: AsyncMonty, setup: str) -> tuple[int, float, float]:
    """Size, dump and load seconds of a session paused at an awaited call (median of a few)."""
    dumps, loads, size = [], [], 0
    for _ in range(DUMP_ROUNDS):
        async with pool.checkout() as session:
            await session.feed_run(setup)
            snap: Any = await session.feed_start("r = await delete(name='a')\nr")
            while not isinstance(snap, AsyncFutureSnapshot):
                if isinstance(snap, AsyncFunctionSnapshot):
                    snap = await snap.resume({"future": ...})
                else:  # the name ``delete``: a host function, as the engine answers
                    snap = await snap.resume(value=_host_delete)
            t0 = time.perf_counter()
            blob = await session.dump()
            dumps.append(time.perf_counter() - t0)
            size = len(blob)
        async with pool.checkout() as fresh:
            t0 = time.perf_counter()
            await fresh.load_snapshot(blob)
            loads.append(time.perf_counter() - t0)
    return size, statistics.median(dumps), statistics.median(loads)


async def pause_and_resume(executor: CodeModeToolExecutor, kind: str) -> tuple[int, float, float]:
    """Snapshot size, and median seconds to the paused result and from resume() to the result."""
    thread = ThreadKey("#bench", f"bench-{kind}")
    scope = executor.thread_scope(thread)
    out = await scope.call_tool("run_code", {"code": SETUP[kind]})
    assert not out.is_error, out.content
    pauses, resumes, size = [], [], 0
    for _ in range(ROUNDS[kind] + 1):  # the first round warms up
        t0 = time.perf_counter()
        out = await scope.call_tool("run_code", {"code": PAUSING})
        pauses.append(time.perf_counter() - t0)
        assert out.pause is not None, out.content
        assert out.pause.snapshot is not None
        size = len(out.pause.snapshot)
        decisions = {c.call_id: Decision(True, "bench") for c in out.pause.calls}
        t0 = time.perf_counter()
        done = await executor.resume(thread, out.pause, decisions)
        resumes.append(time.perf_counter() - t0)
        assert done.content == '[5,"deleted a"]', done.content
    return size, statistics.median(pauses[1:]), statistics.median(resumes[1:])


async def main() -> None:
    """Measure and print the table."""
    # a warning per mutating call (A6) would drown the table
    configure_logging(verbose=False, stream=io.StringIO())
    tools = FakeToolExecutor()

    @tools.tool()
    async def delete(*, name: str) -> str:
        """Delete one object (unannotated, so mutating)."""
        return f"deleted {name}"

    results: dict[str, dict[str, float]] = {}
    executor = CodeModeToolExecutor(tools, CodeModeLimits(), gate=ask)
    try:
        for kind in ("small", "big"):
            size, pause, resume = await pause_and_resume(executor, kind)
            results[kind] = {"size": size, "pause": pause, "resume": resume}
    finally:
        await executor.aclose()
    pool = create_pool(CodeModeLimits())
    await pool.__aenter__()
    try:
        for kind in ("small", "big"):
            size, dump, load = await paused_dump_and_load(pool, SETUP[kind])
            results[kind].update(raw_size=size, dump=dump, load=load)
    finally:
        await close_pool(pool)

    small, big = results["small"], results["big"]
    print(f"approvals benchmark, {date.today().isoformat()}\n")
    print("| measurement | small scope | ~10 MB scope |")
    print("|---|---|---|")
    print(
        f"| stored snapshot (Pause.snapshot) | {small['size'] / 1024:,.1f} KiB "
        f"| {big['size'] / 2**20:,.1f} MiB |"
    )
    print(
        "| the same pause in a bare Monty session (no helpers, no preamble) "
        f"| {small['raw_size'] / 1024:,.1f} KiB | {big['raw_size'] / 2**20:,.1f} MiB |"
    )
    print(
        f"| bare session: `await session.dump()` when paused (median of {DUMP_ROUNDS}) "
        f"| {small['dump'] * 1e3:,.1f} ms | {big['dump'] * 1e3:,.1f} ms |"
    )
    print(
        f"| bare session: `load_snapshot` into a fresh checkout (median of {DUMP_ROUNDS}) "
        f"| {small['load'] * 1e3:,.1f} ms | {big['load'] * 1e3:,.1f} ms |"
    )
    print(
        "| run_code → paused result (median of "
        f"{ROUNDS['small']} / {ROUNDS['big']}) "
        f"| {small['pause'] * 1e3:,.1f} ms | {big['pause'] * 1e3:,.1f} ms |"
    )
    print(
        "| resume() → the resumed snippet's result (median of "
        f"{ROUNDS['small']} / {ROUNDS['big']}) "
        f"| {small['resume'] * 1e3:,.1f} ms | {big['resume'] * 1e3:,.1f} ms |"
    )


if __name__ == "__main__":
    asyncio.run(main())
