"""Benchmark code mode: what run_code costs over a direct call, and what it buys.

Prints a Markdown table:

1. one nested call through ``run_code`` vs the same call on the inner
   executor directly (median microseconds, ratio);
2. ``asyncio.gather`` of 10 tools that each sleep 0.2 s (wall time vs 0.2 s);
3. filtering a 1 MB JSON list in the sandbox vs the same filter in CPython
   (``json.loads`` + comprehension; median milliseconds, ratio), and the
   filter alone once the rows sit in a REPL variable.

Run: ``.venv/bin/python bench/code_mode.py`` (a few seconds). The executor owns
its pool here, as in the daemon, and closes it cleanly.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.logging import configure_logging
from daemon.tools import ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

ROUNDS = 200
FILTER_ROUNDS = 15


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


def cpython_filter(payload: str) -> list[int]:
    """The reference: the same filter in the daemon's own interpreter."""
    rows = json.loads(payload)
    return [r["id"] for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]]


SANDBOX_FILTER = (
    '[r["id"] for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]]'
)


async def median_seconds(fn: Callable[[], Awaitable[object]], rounds: int) -> float:
    """Median wall time of ``rounds`` awaits of ``fn()``, after one warm-up."""
    await fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def main() -> None:
    """Measure and print the table."""
    configure_logging(verbose=False)  # info lines per nested call would drown the table
    payload = json.dumps(make_rows())
    expected = cpython_filter(payload)

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

    executor = CodeModeToolExecutor(tools, CodeModeLimits())
    scope = executor.thread_scope("bench")
    try:

        async def run(code: str) -> str:
            out = await scope.call_tool("run_code", {"code": code})
            if out.is_error:
                raise RuntimeError(out.content)
            return out.content

        direct = await median_seconds(lambda: tools.call_tool("echo", {"value": 1}), ROUNDS)
        nested = await median_seconds(lambda: run('(await echo(value=1))["value"]'), ROUNDS)

        gather_code = "len(await asyncio.gather(*[nap(n=i) for i in range(10)]))"
        assert await run(gather_code) == "10"
        walls = []
        for _ in range(5):
            t0 = time.perf_counter()
            await run(gather_code)
            walls.append(time.perf_counter() - t0)
        gather_wall = statistics.median(walls)

        cpython = await median_seconds(
            lambda: asyncio.sleep(0, cpython_filter(payload)), FILTER_ROUNDS
        )
        sandbox_code = f"rows = await get_rows()\n{SANDBOX_FILTER}"
        assert json.loads(await run(sandbox_code)) == expected
        sandbox = await median_seconds(lambda: run(sandbox_code), FILTER_ROUNDS)
        rows_cpython = json.loads(payload)

        def filter_only() -> list[int]:
            return [
                r["id"]
                for r in rows_cpython
                if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]
            ]

        cpython_only = await median_seconds(lambda: asyncio.sleep(0, filter_only()), FILTER_ROUNDS)
        sandbox_only = await median_seconds(lambda: run(SANDBOX_FILTER), FILTER_ROUNDS)
    finally:
        await executor.aclose()

    print(f"code mode benchmark ({len(payload) / 1e6:.2f} MB JSON, {len(expected)} matches)\n")
    print("| measurement | code mode | baseline | ratio |")
    print("|---|---|---|---|")
    print(
        f"| one nested call: run_code vs inner executor (median of {ROUNDS}) "
        f"| {nested * 1e6:,.0f} µs | {direct * 1e6:,.1f} µs | {nested / direct:,.0f}× |"
    )
    print(
        "| gather of 10 tools sleeping 0.2 s (wall, median of 5) "
        f"| {gather_wall * 1e3:,.0f} ms | 200 ms | {gather_wall / 0.2:.2f}× |"
    )
    print(
        f"| 1 MB JSON list: fetch + json + filter, sandbox vs CPython (median of {FILTER_ROUNDS}) "
        f"| {sandbox * 1e3:,.1f} ms | {cpython * 1e3:,.1f} ms | {sandbox / cpython:.1f}× |"
    )
    print(
        "| same filter on rows already in a REPL variable vs CPython "
        f"| {sandbox_only * 1e3:,.1f} ms | {cpython_only * 1e3:,.2f} ms "
        f"| {sandbox_only / cpython_only:.1f}× |"
    )


if __name__ == "__main__":
    asyncio.run(main())
