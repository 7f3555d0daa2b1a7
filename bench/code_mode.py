"""Benchmark code mode against Monty doing the same work with nothing of ours around it.

Every row is a ratio measured in one process, in the same minute, on the
same ``AsyncMonty`` pool (the reference rounds interleave with ours, so a
busy machine slows both alike). Issue 17's targets:

- a nested call: run_code with N awaited tool calls, minus N = 0, per call,
  against a feed with N awaits of an async external function that returns
  at once, minus N = 0, per call (target ≤ 1.5×). Such a snippet takes
  Monty's own host-call path (``daemon/code_mode/sandbox/direct.py``). The next row
  is the same loop on the snapshot path, which a snippet takes when a call
  may stay unawaited or need a person (here: a scope that once kept a tool
  function in a variable); two more rows measure the floor of any driver of
  the snapshots from Python: the loop through our wrapper answered by a
  minimal driver with nothing of ours (``future``, then the result), and an
  unwrapped call answered by ``resume_auto()``;
- 1 MB JSON: ``rows = await get_rows()`` and a filtered count, against the
  tool returning the text and ``json.loads`` + the same count in the sandbox
  (≤ 1.5×);
- gather of 10 tools sleeping 0.2 s: the wall time against 0.2 s (≤ 1.05×);
- a new thread's first ``run_code``: against ``checkout()`` + one feed +
  checkin (≤ 1.5×). Each starts 10 ms after the last one ended, as new
  threads do on a daemon that is not flooded with them: the spare checkout
  (``daemon/code_mode/repl/fresh.py``) is made in the background meanwhile.

Then the memory: the daemon's RSS with 8 live scopes after 100 threads ran
once each, each live scope's worker's RSS, and all the pool's workers'.

Run: ``.venv/bin/python bench/code_mode.py`` (about 10 seconds, both cores).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_monty import (
    AsyncFunctionSnapshot,
    AsyncFutureSnapshot,
    AsyncMonty,
    AsyncMontySession,
    MontyComplete,
)

from bench.rows import make_rows
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.lazy import snapshot_wrappers_source, wrappers_source
from daemon.code_mode.sandbox.pool import close_pool, pool_options
from daemon.logging import configure_logging
from daemon.tools import ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

CALLS = 100  # nested calls per timed snippet
ROUNDS = 15  # interleaved rounds per row (medians)
THREADS = 100  # threads that run once each (first-run row, memory)
SETTLE = 0.01  # seconds between one new thread's first run and the next's

COUNT = 'len([r for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]])'


async def snapshot_floor(session: AsyncMontySession, code: str, tool: Any) -> Any:
    """Drive ``code`` as our engine must, from Python, doing nothing else.

    Each host call is answered ``future`` and then, when awaited, with
    ``tool``'s result; a name lookup gets a host function.
    """

    async def host(**_: Any) -> None:  # pragma: no cover - the driver answers instead
        raise AssertionError

    snap = await session.feed_start(code)
    pending: dict[int, dict] = {}
    while not isinstance(snap, MontyComplete):
        if isinstance(snap, AsyncFunctionSnapshot):
            pending[snap.call_id] = snap.kwargs
            snap = await snap.resume({"future": ...})
        elif isinstance(snap, AsyncFutureSnapshot):
            ids = snap.pending_call_ids
            snap = await snap.resume(
                {cid: {"return_value": await tool(**pending.pop(cid))} for cid in ids}
            )
        else:
            snap = await snap.resume(value=host)
    return snap.output


async def auto_floor(session: AsyncMontySession, code: str, lookup: dict[str, Any]) -> Any:
    """``code`` driven by ``resume_auto()`` at every snapshot: one round trip per awaited call."""
    snap = await session.feed_start(code, external_lookup=lookup)
    while not isinstance(snap, MontyComplete):
        snap = await snap.resume_auto()
    return snap.output


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of ``pid`` in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def child_pids() -> list[int]:
    """This process's child processes (Linux): the Monty pool's workers."""
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        children = task / "children"
        if children.exists():
            pids += [int(p) for p in children.read_text().split()]
    return pids


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one await of ``fn()`` takes."""
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


async def interleaved(
    fns: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, float]:
    """Median seconds of each of ``fns``, round-robin over ``rounds``, after one warm-up each."""
    for fn in fns.values():
        await fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(await timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


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
    async def echo(*, value: int) -> ToolCallOutput:
        """Return the value."""
        # the result as an MCP client hands it over: text, not yet parsed (parsing it is
        # ours); the in-memory executor's own json.dumps of a dict is the tool's cost
        return ToolCallOutput(f'{{"value": {value}}}', False)

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
    scope = executor.thread_scope(ThreadKey("#t", "bench"))
    # a scope that kept a tool function in a variable stays on the snapshot path
    snapshots = executor.thread_scope(ThreadKey("#t", "bench-snapshots"))
    await snapshots.call_tool("run_code", {"code": "kept = echo"})
    raw = pool.checkout(limits={"max_suspensions": 2**62})
    session = await raw.__aenter__()

    async def run(code: str, scope: Any = scope) -> str:
        # the in-memory executor logs every call, for tests; an MCP server's client keeps
        # nothing, and a log growing by thousands of objects would tax our rows with GC
        tools.calls.clear()
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
        # `wecho` is the snapshot path's wrapper (daemon/code_mode/lazy.py) around the host function
        await session.feed_run(
            f"import json\nimport json as _asyncai_json\n{wrappers_source(['wecho'])}\n"
            f"{snapshot_wrappers_source(('wecho',))}"
        )
        loop_calls = f"for i in range({CALLS}):\n    await echo(value=i)\n{CALLS}"
        loop_none = f"for i in range({CALLS}):\n    i\n{CALLS}"
        wrapped = loop_calls.replace("await echo(", "await wecho(")
        # all in the same rounds, so a busy minute slows every row alike
        t = await interleaved(
            {
                "ours_n": lambda: run(loop_calls),
                "ours_0": lambda: run(loop_none),
                "snap_n": lambda: run(loop_calls, snapshots),
                "snap_0": lambda: run(loop_none, snapshots),
                "raw_n": lambda: session.feed_run(loop_calls, external_lookup={"echo": raw_echo}),
                "raw_0": lambda: session.feed_run(loop_none),
                "floor_n": lambda: snapshot_floor(session, wrapped, raw_echo),
                "floor_0": lambda: snapshot_floor(session, loop_none, raw_echo),
                "auto_n": lambda: auto_floor(session, loop_calls, {"echo": raw_echo}),
                "auto_0": lambda: auto_floor(session, loop_none, {"echo": raw_echo}),
            },
            ROUNDS,
        )

        def per_call(name: str) -> float:
            return (t[f"{name}_n"] - t[f"{name}_0"]) / CALLS

        ours_0, raw_0 = t["ours_0"], t["raw_0"]
        ours_call, raw_call, snap_call = per_call("ours"), per_call("raw"), per_call("snap")
        floor_call, auto_call = per_call("floor"), per_call("auto")

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
            thread = executor.thread_scope(ThreadKey("#t", f"thread-{i}"))
            await asyncio.sleep(SETTLE)
            firsts.append(await timed(lambda: thread.call_tool("run_code", {"code": "1"})))  # noqa: B023 - awaited at once
            await asyncio.sleep(SETTLE)
            raw_firsts.append(await timed(raw_first))
        first, raw_first_s = statistics.median(firsts), statistics.median(raw_firsts)
        await raw.__aexit__(None, None, None)
        host_rss = rss_kib()
        pids = [executor.worker_pid(ThreadKey("#t", f"thread-{i}")) for i in range(THREADS)]
        workers = [rss_kib(p) for p in pids if p is not None]
        # every worker of the pool: the scopes', the warm spare, and idle ones
        pool_workers = [rss_kib(p) for p in child_pids()]
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
    row("  on the snapshot path (a call may stay unawaited)", snap_call, raw_call, "µs", 1.5)
    row("  floor: our wrapper, a bare Python snapshot driver", floor_call, raw_call, "µs", 1.5)
    row("  floor: no wrapper, resume_auto() (one round trip)", auto_call, raw_call, "µs", 1.5)
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
        f"(total {sum(workers) / 1024:.1f} MiB); all {len(pool_workers)} workers of the pool "
        f"(the scopes', the spare, idle ones) {sum(pool_workers) / 1024:.1f} MiB"
    )


if __name__ == "__main__":
    if "--peer" in sys.argv[1:]:  # `--peer pai`: beside Pydantic AI's CodeMode (bench extra)
        from bench.peer_pai import run as run_peer

        run_peer(sys.argv[1:])
    else:
        asyncio.run(main())
