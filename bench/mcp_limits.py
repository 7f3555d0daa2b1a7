"""Benchmark per-server ``max_concurrent`` (issue 19): what the bound costs and what it does.

Prints two Markdown tables:

1. 20 gathered ``run_code`` calls of the test server's ``nap`` (50 ms each)
   behind ``max_concurrent`` = none, 8, 4 and 1: the snippet's wall time, the
   ideal one (``ceil(20 / N)`` rounds of 50 ms), their ratio, and the largest
   ``queue_ms`` in the audit;
2. taking and giving back one slot (``ServerSlots.hold``), for a server
   without a limit and for one with a free slot, next to a bare ``await``;
   a stdio round trip to a server is about 1.5 ms (docs/mcp.md, "Tests").

Run: ``.venv/bin/python bench/mcp_limits.py`` (about 10 s; it starts four
test servers and a Monty pool).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.logging import configure_logging
from daemon.mcp.executor import McpToolExecutor
from daemon.mcp.slots import ServerSlots

TEST_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_test_server.py")
CALLS, NAP, ROUNDS = 20, 0.05, 3
SNIPPET = f"await asyncio.gather(*[nap(seconds={NAP}) for _ in range({CALLS})])"
SLOT_ROUNDS = 200_000


async def gathered(limit: int | None) -> tuple[float, float]:
    """Median wall seconds of the snippet, and the largest wait for a slot (ms)."""
    entry = {"command": sys.executable, "args": [TEST_SERVER], "max_concurrent": limit}
    executor = CodeModeToolExecutor(McpToolExecutor({"t": entry}), CodeModeLimits())
    try:
        await executor.start()
        walls, queued = [], 0.0
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            out = await executor.call_tool("run_code", {"code": SNIPPET})
            walls.append(time.perf_counter() - t0)
            assert not out.is_error, out.content
            assert out.audit is not None
            queued = max([queued, *(c["queue_ms"] or 0.0 for c in out.audit["nested_calls"])])
        return statistics.median(walls), queued
    finally:
        await executor.aclose()


async def slot_cost() -> dict[str, float]:
    """Microseconds per ``async with`` of a slot, and of a bare await."""
    slots = ServerSlots({"free": None, "four": 4})

    async def nothing() -> None:
        pass

    costs = {}
    for name in ("free", "four"):
        t0 = time.perf_counter()
        for _ in range(SLOT_ROUNDS):
            async with slots.hold(name):
                pass
        costs[name] = (time.perf_counter() - t0) / SLOT_ROUNDS * 1e6
    t0 = time.perf_counter()
    for _ in range(SLOT_ROUNDS):
        await nothing()
    costs["await"] = (time.perf_counter() - t0) / SLOT_ROUNDS * 1e6
    return costs


async def main() -> None:
    configure_logging(verbose=False)
    print(f"### max_concurrent ({date.today()}, {CALLS} gathered calls of {NAP * 1000:.0f} ms)\n")
    print("| max_concurrent | wall (s) | ideal (s) | wall / ideal | largest queue_ms |")
    print("|---|---|---|---|---|")
    for limit in (None, 8, 4, 1):
        wall, queued = await gathered(limit)
        ideal = math.ceil(CALLS / (limit or CALLS)) * NAP
        shown = "none" if limit is None else str(limit)
        print(f"| {shown} | {wall:.3f} | {ideal:.3f} | {wall / ideal:.2f} | {queued:.0f} |")
    measured = await slot_cost()
    print("\n| one slot, taken and given back | µs |")
    print("|---|---|")
    print(f"| server without a limit | {measured['free']:.2f} |")
    print(f"| server with a free slot | {measured['four']:.2f} |")
    print(f"| a bare `await` of a coroutine, for scale | {measured['await']:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
