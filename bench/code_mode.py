"""Benchmark code mode against Monty doing the same work with nothing of ours around it.

Every row is a ratio measured in one process, in the same minute, on the
same ``AsyncMonty`` pool (the reference rounds interleave with ours, so a
busy machine slows both alike). Issue 17's targets:

- a nested call: run_code with N awaited tool calls, minus N = 0, per call,
  against a feed with N awaits of an async external function that returns
  at once, minus N = 0, per call (target ≤ 1.5×);
- 1 MB JSON: ``rows = await get_rows()`` and a filtered count, against the
  tool returning the text and ``json.loads`` + the same count in the sandbox
  (≤ 1.5×);
- gather of 10 tools sleeping 0.2 s: the wall time against 0.2 s (≤ 1.05×);
- a new thread's first ``run_code``: against ``checkout()`` + one feed +
  checkin (≤ 1.5×).

Then the memory: the daemon's RSS with 8 live scopes after 100 threads ran
once each, and each live worker's RSS.

Run: ``.venv/bin/python bench/code_mode.py`` (about 10 seconds, both cores).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_monty import AsyncMonty

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.pool import close_pool, pool_options
from daemon.logging import configure_logging
from daemon.tools import ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

CALLS = 100  # nested calls per timed snippet
ROUNDS = 15  # interleaved rounds per row (medians)
THREADS = 100  # threads that run once each (first-run row, memory)

COUNT = 'len([r for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]])'


def make_rows(n: int = 11_000) -> list[dict]:
    """About 1 MB of Kubernetes-ish rows, deterministic."""
    rng = random.Random(0)
    return [
        {
            "id": i,
            "name": f"object-{i}",
            "kcp": rng.choice("abc"),
            "size": rng.randint(0, 10_000),
            "tags": [rng.choice("xyz") for _ in range(2)],
        }
        for i in range(n)
    ]


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of ``pid`` in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one await of ``fn()`` takes."""
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


async def paired(
    ours: Callable[[], Awaitable[object]], ref: Callable[[], Awaitable[object]], rounds: int
) -> tuple[float, float]:
    """Median seconds of ``ours`` and of ``ref``, alternating, after one warm-up each."""
    await ours()
    await ref()
    a, b = [], []
    for _ in range(rounds):
        a.append(await timed(ours))
        b.append(await timed(ref))
    return statistics.median(a), statistics.median(b)


async def main() -> None:
    """Measure and print the table."""
    configure_logging(verbose=False)  # info lines per nested call would drown the table
    payload = json.dumps(make_rows())
    rows = json.loads(payload)
    expected = len([r for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]])

    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def echo(*, value: int) -> dict:
        """Return the value."""
        return {"value": value}

    @tools.tool(read_only=True)
    async def nap(*, n: int) -> int:
        """Sleep 0.2 s."""
        await asyncio.sleep(0.2)
        return n

    @tools.tool(read_only=True)
    async def get_rows() -> ToolCallOutput:
        """About 1 MB of JSON rows."""
        return ToolCallOutput(payload, False)

    limits = CodeModeLimits()
    pool = AsyncMonty(**pool_options(limits))
    await pool.__aenter__()
    executor = CodeModeToolExecutor(tools, limits, pool=pool)
    scope = executor.thread_scope("bench")
    raw = pool.checkout(limits={"max_suspensions": 2**62})
    session = await raw.__aenter__()

    async def run(code: str) -> str:
        out = await scope.call_tool("run_code", {"code": code})
        if out.is_error:
            raise RuntimeError(out.content)
        return out.content

    async def raw_echo(value: int) -> dict:
        return {"value": value}

    async def raw_rows() -> str:
        return payload

    async def raw_parsed() -> Any:
        return json.loads(payload)

    try:
        await session.feed_run("import json")
        loop_calls = f"for i in range({CALLS}):\n    await echo(value=i)\n{CALLS}"
        loop_none = f"for i in range({CALLS}):\n    i\n{CALLS}"
        ours_n, raw_n = await paired(
            lambda: run(loop_calls),
            lambda: session.feed_run(loop_calls, external_lookup={"echo": raw_echo}),
            ROUNDS,
        )
        ours_0, raw_0 = await paired(
            lambda: run(loop_none), lambda: session.feed_run(loop_none), ROUNDS
        )
        ours_call, raw_call = (ours_n - ours_0) / CALLS, (raw_n - raw_0) / CALLS

        ours_code = f"rows = await get_rows()\n{COUNT}"
        raw_code = f"rows = json.loads(await get_rows())\n{COUNT}"
        assert await run(ours_code) == str(expected)
        assert await session.feed_run(raw_code, external_lookup={"get_rows": raw_rows}) == expected
        ours_json, raw_json = await paired(
            lambda: run(ours_code),
            lambda: session.feed_run(raw_code, external_lookup={"get_rows": raw_rows}),
            ROUNDS,
        )
        parsed_code = f"rows = await get_rows()\n{COUNT}"
        _, raw_objects = await paired(
            lambda: asyncio.sleep(0),
            lambda: session.feed_run(parsed_code, external_lookup={"get_rows": raw_parsed}),
            5,
        )

        gather_code = "len(await asyncio.gather(*[nap(n=i) for i in range(10)]))"
        gather_wall, _ = await paired(lambda: run(gather_code), lambda: asyncio.sleep(0), 5)

        async def raw_first() -> None:
            async with pool.checkout() as fresh:
                await fresh.feed_run("1")

        firsts, raw_firsts = [], []
        for i in range(THREADS):
            thread = executor.thread_scope(f"thread-{i}")
            firsts.append(await timed(lambda: thread.call_tool("run_code", {"code": "1"})))  # noqa: B023 - awaited at once
            raw_firsts.append(await timed(raw_first))
        first, raw_first_s = statistics.median(firsts), statistics.median(raw_firsts)
        await raw.__aexit__(None, None, None)
        host_rss = rss_kib()
        pids = [executor.worker_pid(f"thread-{i}") for i in range(THREADS)]
        workers = [rss_kib(p) for p in pids if p is not None]
        live = executor.live_scopes
    finally:
        await executor.aclose()
        await close_pool(pool)

    def row(label: str, ours: float, ref: float, unit: str, target: float) -> None:
        scale = 1e6 if unit == "µs" else 1e3
        ratio = ours / ref
        verdict = "met" if ratio <= target else "not met"
        print(
            f"| {label} | {ours * scale:,.1f} {unit} | {ref * scale:,.1f} {unit} "
            f"| {ratio:.2f}× | ≤ {target}× {verdict} |"
        )

    print(
        f"code mode vs raw Monty, {datetime.date.today()}, {len(payload) / 1e6:.2f} MB JSON, "
        f"medians of {ROUNDS} interleaved rounds\n"
    )
    print("| measurement | code mode | raw Monty | ratio | target |")
    print("|---|---|---|---|---|")
    row(f"one nested call (per call, {CALLS} per snippet)", ours_call, raw_call, "µs", 1.5)
    row("1 MB JSON tool result → filtered count", ours_json, raw_json, "ms", 1.5)
    row("gather of 10 tools sleeping 0.2 s (wall vs ideal)", gather_wall, 0.2, "ms", 1.05)
    row("first run_code of a new thread", first, raw_first_s, "ms", 1.5)
    print(
        f"\nfor scale: a snippet with no tool call {ours_0 * 1e3:.2f} ms (raw feed "
        f"{raw_0 * 1e3:.2f} ms); raw Monty given the 1 MB as parsed objects "
        f"{raw_objects * 1e3:.1f} ms"
    )
    print(
        f"memory: daemon RSS {host_rss / 1024:.1f} MiB with {live} live scopes after "
        f"{THREADS} threads ran once each; idle workers RSS "
        f"{', '.join(f'{w / 1024:.1f}' for w in workers)} MiB "
        f"(total {sum(workers) / 1024:.1f} MiB)"
    )


if __name__ == "__main__":
    if "--peer" in sys.argv[1:]:  # `--peer pai`: beside Pydantic AI's CodeMode (bench extra)
        from bench.peer_pai import run as run_peer

        run_peer(sys.argv[1:])
    else:
        asyncio.run(main())
