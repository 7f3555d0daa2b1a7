"""Code mode beside its peer: asyncai's ``run_code`` and Pydantic AI's ``CodeMode``.

Both run the same snippets against the same tools in one process, interleaved
round-robin (each round runs every scenario on both sides, the side that goes
first alternating), so a busy machine slows both alike. Prints a Markdown
table: the median of each figure for asyncai, for the peer, their ratio, and
the size of what each hands the model.

What is timed is the ``run_code`` tool call alone, never a model:

- asyncai: ``ThreadScope.call_tool("run_code", ...)`` of a
  ``CodeModeToolExecutor`` over an in-memory inner executor, as in
  ``bench/code_mode.py``;
- the peer: the ``run_code`` tool's execution inside a real ``Agent`` run
  with ``CodeMode()``, driven by ``FunctionModel`` (an in-process scripted
  model: no network, no key), timed by a capability's ``wrap_tool_execute``
  hook. The agent's own steps between two ``run_code`` calls are not counted.

Warm scenarios run in a REPL that has already run a snippet (asyncai: one
thread scope; the peer: one agent run per round, whose REPL lives as long as
the run). "Two run_code calls in one run" starts cold on both sides: a new
thread for asyncai, a new agent run for the peer (whose first snippet is also
type-checked), and times both calls.

Run: ``.venv/bin/python bench/code_mode.py --peer pai`` (or this file), after
``.venv/bin/pip install -e '.[bench]'``; about a minute.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rows import make_rows  # the same 1 MB of rows on both sides
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.logging import configure_logging
from daemon.tools import ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

try:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import UsageLimits
    from pydantic_ai_harness import CodeMode
except ImportError as exc:  # the bench extra is optional: say how to get it
    raise SystemExit(
        f"the peer needs the bench extra ({exc.name} is missing): "
        ".venv/bin/pip install -e '.[bench]'"
    ) from exc

ROUNDS = 15
WAIT = 60.0  # bound on one run_code call on either side
NAP = 0.2

FILTER = '[r["id"] for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]]'
SEQUENTIAL = "total = 0\nfor i in range(50):\n    total += (await echo(value=i))['value']\ntotal"
GATHERED = (
    "import asyncio\n"
    "sum(r['value'] for r in await asyncio.gather(*[echo(value=i) for i in range(50)]))"
)
NAPS = "import asyncio\nlen(await asyncio.gather(*[nap(n=i) for i in range(10)]))"


@dataclass
class Scenario:
    """Snippets run in one REPL; ``calls`` repeats per round (cheap ones, for steadier medians)."""

    name: str
    codes: list[str]
    expect: Callable[[str, bool], bool]  # (reply text, is_error) → the answer is right
    calls: int = 1
    cold: bool = False


@dataclass
class Outcome:
    """One timed call (or the cold pair): seconds, the reply text, whether it was an error."""

    seconds: float
    text: str
    is_error: bool


def scenarios(payload: str) -> list[Scenario]:
    """The issue's seven scenarios, the cold one last (it opens REPLs of its own)."""
    rows = json.loads(payload)
    count = len(
        [r["id"] for r in rows if r["kcp"] == "a" and r["size"] > 5000 and "x" in r["tags"]]
    )

    def answer(value: object) -> Callable[[str, bool], bool]:
        return lambda text, error: not error and text.strip() == str(value)

    return [
        Scenario("one nested call", ['(await echo(value=1))["value"]'], answer(1), calls=10),
        Scenario("50 sequential nested calls", [SEQUENTIAL], answer(1225), calls=5),
        Scenario("50 gathered nested calls", [GATHERED], answer(1225), calls=5),
        Scenario(f"gather of 10 tools sleeping {NAP} s (wall)", [NAPS], answer(10)),
        Scenario(
            "1 MB result reduced to a count",
            [f"rows = await get_rows()\nlen({FILTER})"],
            answer(count),
        ),
        # asyncai answers with its guard (an error naming the size, a preview); the
        # peer hands the model the whole value: both are checked for being what they are.
        Scenario(
            "1 MB result returned whole",
            ["await get_rows()"],
            lambda text, error: (error and len(text) < 20_000) or len(text) > 500_000,
        ),
        Scenario(
            "two run_code calls in one run, cold REPL",
            ["rows = await get_rows()\nlen(rows)", f"len({FILTER})"],
            answer(count),
            cold=True,
        ),
    ]


# ---- asyncai ----


class Ours:
    """asyncai's code mode over an in-memory inner executor (the tools of bench/code_mode.py)."""

    def __init__(self, payload: str):
        tools = FakeToolExecutor()

        @tools.tool(read_only=True)
        async def echo(*, value: int) -> dict:
            """Return the value."""
            return {"value": value}

        @tools.tool(read_only=True)
        async def nap(*, n: int) -> int:
            """Sleep a while."""
            await asyncio.sleep(NAP)
            return n

        @tools.tool(read_only=True)
        async def get_rows() -> ToolCallOutput:
            """About 1 MB of JSON rows."""
            return ToolCallOutput(payload, False)

        self.executor = CodeModeToolExecutor(tools, CodeModeLimits())
        self.warm = self.executor.thread_scope(ThreadKey("#t", "peer-warm"))
        self._cold = 0

    async def start(self) -> None:
        """Run the warm REPL's first snippet."""
        await self._call(self.warm, "0")

    async def run(self, scenario: Scenario) -> Outcome:
        """Time the scenario's snippets (a new thread's REPL when it is cold)."""
        scope = self.warm
        if scenario.cold:
            self._cold += 1
            scope = self.executor.thread_scope(ThreadKey("#t", f"peer-cold-{self._cold}"))
        total, out = 0.0, Outcome(0.0, "", False)
        for code in scenario.codes:
            out = await self._call(scope, code)
            total += out.seconds
        return Outcome(total, out.text, out.is_error)

    async def _call(self, scope: Any, code: str) -> Outcome:
        t0 = time.perf_counter()
        async with asyncio.timeout(WAIT):
            out = await scope.call_tool("run_code", {"code": code})
        return Outcome(time.perf_counter() - t0, out.content, out.is_error)

    async def aclose(self) -> None:
        """Close the executor (its pool and workers)."""
        await self.executor.aclose()


# ---- the peer: Pydantic AI CodeMode ----


@dataclass
class _RunCodeClock(AbstractCapability[Any]):
    """Times each ``run_code`` execution; nested tool calls pass through untimed."""

    record: Callable[[float], None]

    async def wrap_tool_execute(
        self, ctx: Any, *, call: ToolCallPart, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        """Time the call when it is ``run_code``."""
        if call.tool_name != "run_code":
            return await handler(args)
        t0 = time.perf_counter()
        try:
            return await handler(args)
        finally:
            self.record(time.perf_counter() - t0)


class PeerRun:
    """One agent run held open: each ``run_code`` the bench sends is one step of the model.

    The scripted model waits for the next snippet and returns it as a ``run_code``
    tool call; the next step reads what the tool returned, as text the model would
    see. Sending ``None`` makes the model answer, which ends the run.
    """

    def __init__(self, toolset: FunctionToolset[None]):
        self._codes: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1)
        self._replies: asyncio.Queue[tuple[str, bool]] = asyncio.Queue(maxsize=1)
        self._times: list[float] = []
        self._agent = Agent(
            FunctionModel(self._step),
            toolsets=[toolset],
            capabilities=[CodeMode(), _RunCodeClock(self._times.append)],
        )
        self._task: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        """Start the run; its first step waits for a snippet."""
        # no cap on model requests: a run here takes one per snippet (the default is 50)
        limits = UsageLimits(request_limit=None)
        self._task = asyncio.create_task(self._agent.run("bench", usage_limits=limits))

    async def _step(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                await self._replies.put((part.model_response_str(), False))
            elif isinstance(part, RetryPromptPart):
                await self._replies.put((part.model_response(), True))
        code = await self._codes.get()
        if code is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("run_code", {"code": code})])

    async def call(self, code: str) -> Outcome:
        """Run one snippet; its execution time and what the model gets back."""
        assert self._task is not None, "start() first"
        await self._codes.put(code)
        reply = asyncio.ensure_future(self._replies.get())
        try:
            async with asyncio.timeout(WAIT):
                await asyncio.wait([reply, self._task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not reply.done():
                reply.cancel()
        if not reply.done() or reply.cancelled():
            await self._task  # the run ended: raise why
            raise RuntimeError("the peer's run ended before run_code returned")
        text, is_error = reply.result()
        return Outcome(self._times.pop(), text, is_error)

    async def aclose(self) -> None:
        """Let the model answer, which ends the run and closes its REPL and workers."""
        if self._task is None:
            return
        if not self._task.done():
            await self._codes.put(None)
        async with asyncio.timeout(WAIT):
            await self._task


class Theirs:
    """Pydantic AI's CodeMode over function tools doing what ours do."""

    def __init__(self, payload: str):
        async def echo(value: int) -> dict[str, int]:
            """Return the value."""
            return {"value": value}

        async def nap(n: int) -> int:
            """Sleep a while."""
            await asyncio.sleep(NAP)
            return n

        async def get_rows() -> list[dict[str, Any]]:
            """About 1 MB of rows (parsed from JSON text on each call, as ours are)."""
            return json.loads(payload)

        self.toolset = FunctionToolset([echo, nap, get_rows])
        self.warm: PeerRun | None = None

    async def start(self) -> None:
        """Open the round's warm run and run its first snippet (the type-checked one)."""
        self.warm = PeerRun(self.toolset)
        await self.warm.start()
        await self.warm.call("0")

    async def run(self, scenario: Scenario) -> Outcome:
        """Time the scenario's snippets (in a new agent run when it is cold)."""
        if not scenario.cold:
            assert self.warm is not None
            return await self._codes(self.warm, scenario.codes)
        run = PeerRun(self.toolset)
        await run.start()
        try:
            return await self._codes(run, scenario.codes)
        finally:
            await run.aclose()

    @staticmethod
    async def _codes(run: PeerRun, codes: list[str]) -> Outcome:
        total, out = 0.0, Outcome(0.0, "", False)
        for code in codes:
            out = await run.call(code)
            total += out.seconds
        return Outcome(total, out.text, out.is_error)

    async def end_round(self) -> None:
        """End the round's warm run (its history holds every reply, the 1 MB one too)."""
        if self.warm is not None:
            await self.warm.aclose()
            self.warm = None

    async def aclose(self) -> None:
        """End any open run."""
        await self.end_round()


# ---- the comparison ----


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds >= 0.01 else f"{seconds * 1e3:,.2f} ms"


def _chars(n: int) -> str:
    return f"{n:,}"


async def compare(rounds: int = ROUNDS) -> str:
    """Run every scenario ``rounds`` times on both sides, interleaved; the Markdown table."""
    configure_logging(verbose=False)  # info lines per nested call would drown the table
    payload = json.dumps(make_rows())
    table = scenarios(payload)
    ours, theirs = Ours(payload), Theirs(payload)
    times: dict[tuple[str, str], list[float]] = {}
    chars: dict[tuple[str, str], int] = {}
    started = time.perf_counter()
    try:
        await ours.start()
        for r in range(rounds):
            await theirs.start()
            for i, scenario in enumerate(table):
                sides: list[tuple[str, Ours | Theirs]] = [("ours", ours), ("theirs", theirs)]
                if (r + i) % 2:
                    sides.reverse()
                for side, runner in sides:
                    for _ in range(scenario.calls):
                        out = await runner.run(scenario)
                        if not scenario.expect(out.text, out.is_error):
                            raise RuntimeError(
                                f"{side}: {scenario.name}: unexpected reply {out.text[:300]!r}"
                            )
                        times.setdefault((side, scenario.name), []).append(out.seconds)
                        chars[side, scenario.name] = len(out.text)
            await theirs.end_round()
    finally:
        await theirs.aclose()
        await ours.aclose()
    elapsed = time.perf_counter() - started

    lines = [
        f"code mode beside Pydantic AI CodeMode ({datetime.date.today().isoformat()}, "
        f"{os.cpu_count()} CPUs, pydantic-ai-harness {metadata.version('pydantic-ai-harness')}, "
        f"pydantic-monty {metadata.version('pydantic-monty')}, {len(payload) / 1e6:.2f} MB JSON, "
        f"{rounds} interleaved rounds in {elapsed:.0f} s)",
        "",
        "| scenario (median) | asyncai | Pydantic AI CodeMode | asyncai / peer "
        "| chars to the model: asyncai / peer |",
        "|---|---|---|---|---|",
    ]
    for scenario in table:
        mine = statistics.median(times["ours", scenario.name])
        peer = statistics.median(times["theirs", scenario.name])
        n = len(times["ours", scenario.name])
        lines.append(
            f"| {scenario.name} (of {n}) | {_ms(mine)} | {_ms(peer)} | {mine / peer:.2f}× "
            f"| {_chars(chars['ours', scenario.name])} / {_chars(chars['theirs', scenario.name])} |"
        )
    return "\n".join(lines)


async def main(rounds: int = ROUNDS) -> None:
    """Measure and print the table."""
    print(await compare(rounds))


def run(argv: list[str] | None = None) -> None:
    """Entry point for ``bench/code_mode.py --peer pai`` and this file: ``[--rounds N]``."""
    args = sys.argv[1:] if argv is None else argv
    if "--peer" in args and args[args.index("--peer") + 1 :][:1] != ["pai"]:
        raise SystemExit("--peer: the one peer is pai (Pydantic AI's CodeMode)")
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else ROUNDS
    asyncio.run(main(rounds))


if __name__ == "__main__":
    run()
