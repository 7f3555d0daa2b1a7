"""Code mode end to end: run_code on a real Monty pool over an in-memory executor.

One pool serves the whole session (the ``monty_pool`` fixture); limits are
small so that time-limit tests end in about a second.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog.description import RUN_CODE_SCHEMA
from daemon.code_mode.errors import SandboxUnavailable
from daemon.errors import ToolTransportError
from daemon.logging import configure_logging, reset_logging
from daemon.tools import AuditEntry, ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

# every expectation holds on both paths a snippet can take (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("engine_path")

ROOT = str(Path(__file__).resolve().parents[1])
TEST_LIMITS = {"max_feed_duration": 2.0, "max_wall": 20.0, "tool_timeout": 10.0}

MakeExecutor = Callable[..., CodeModeToolExecutor]


@pytest.fixture
def fake() -> FakeToolExecutor:
    """Two read-only tools with JSON results, one unannotated (so mutating) tool."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_objects(*, kcp: str, resource: str = "pods") -> dict:
        """List objects of one resource type."""
        return {
            "items": [
                {"name": f"{kcp}-{resource}-{i}", "phase": "Running" if i % 3 else "Failed"}
                for i in range(6)
            ]
        }

    @fake.tool(read_only=True)
    async def get_events(*, kcp: str) -> dict:
        """Events of a workspace."""
        return {"items": [{"type": "Warning"}, {"type": "Normal"}, {"type": "Warning"}]}

    @fake.tool()
    async def delete_object(*, name: str) -> str:
        """Delete one object."""
        return f"deleted {name}"

    return fake


@pytest.fixture
async def make_executor(monty_pool) -> AsyncIterator[MakeExecutor]:
    """Build executors on the shared pool with test limits; close them all afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(inner, observer=None, **limits) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**{**TEST_LIMITS, **limits}), pool=monty_pool, observer=observer
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def run(executor, code: str, **extra) -> ToolCallOutput:
    """One run_code call."""
    return await executor.call_tool("run_code", {"code": code, **extra})


async def test_definitions_are_exactly_run_code(make_executor, fake):
    """The model sees one tool, run_code, with the spec's schema and the catalog in its text."""
    (definition,) = make_executor(fake).definitions()
    assert definition.name == "run_code"
    assert definition.input_schema == RUN_CODE_SCHEMA
    text = definition.description
    for part in ("list_objects", "get_events", "delete_object", "Return contract", "await"):
        assert part in text


async def test_gather_of_two_tools_filters_to_one_small_value(make_executor, fake):
    """Two gathered calls, filtered in the sandbox; both reach the inner executor and the audit."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        "pods, events = await asyncio.gather(\n"
        '    list_objects(kcp="root:app"), get_events(kcp="root:app"))\n'
        'bad = [p["name"] for p in pods["items"] if p["phase"] != "Running"]\n'
        'warnings = sum(1 for e in events["items"] if e["type"] == "Warning")\n'
        '{"not_running": bad, "warnings": warnings}',
    )
    assert not out.is_error, out.content
    assert json.loads(out.content) == {
        "not_running": ["root:app-pods-0", "root:app-pods-3"],
        "warnings": 2,
    }
    assert sorted(name for name, _ in fake.calls) == ["get_events", "list_objects"]
    audit = out.audit["nested_calls"]
    assert sorted(e["tool"] for e in audit) == ["get_events", "list_objects"]
    entry = next(e for e in audit if e["tool"] == "list_objects")
    assert entry["arguments"] == {"kcp": "root:app"}
    assert entry["is_error"] is False
    assert entry["mutating"] is False
    assert entry["bytes"] > 100
    assert entry["duration_ms"] >= 0
    assert datetime.fromisoformat(entry["started"]).utcoffset().total_seconds() == 0


async def test_next_of_a_generator_expression_runs_as_in_cpython(make_executor, fake):
    """Monty makes a generator expression a list, so ``next(x for x in ...)`` alone fails
    with "'list' object is not an iterator"; run_code rewrites it (sandbox/compat.py) and
    the first match, or the default, comes back as CPython gives it."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        'pods = await list_objects(kcp="root:app")\n'
        'first = next(p["name"] for p in pods["items"] if p["phase"] != "Running")\n'
        'none = next((p for p in pods["items"] if p["phase"] == "Lost"), "no pod")\n'
        "[first, none]",
    )
    assert not out.is_error, out.content
    assert json.loads(out.content) == ["root:app-pods-0", "no pod"]


async def test_one_megabyte_json_result_is_filtered_inside_the_sandbox(make_executor):
    """A 1 MB JSON tool result comes back as a handful of bytes."""
    rows = [{"id": i, "kcp": "abc"[i % 3], "size": (i * 7919) % 10_000} for i in range(26_000)]
    payload = json.dumps(rows)
    assert len(payload) > 1_000_000
    big = FakeToolExecutor()

    @big.tool(read_only=True)
    async def list_rows() -> ToolCallOutput:
        """Many rows."""
        return ToolCallOutput(payload, False)

    out = await run(
        make_executor(big),
        'rows = await list_rows()\nlen([r for r in rows if r["kcp"] == "a" and r["size"] > 5000])',
    )
    expected = len([r for r in rows if r["kcp"] == "a" and r["size"] > 5000])
    assert (out.is_error, out.content) == (False, str(expected))
    assert out.audit["nested_calls"][0]["bytes"] == len(payload)


async def test_tool_error_raises_a_catchable_runtime_error(make_executor):
    """An is_error result raises RuntimeError with the tool's text; uncaught, it is an error."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def get_quota(*, kcp: str) -> str:
        """Quota."""
        raise ValueError(f"no quota for {kcp}")

    ex = make_executor(tools)
    out = await run(
        ex,
        'try:\n    await get_quota(kcp="x")\n'
        'except RuntimeError as e:\n    r = "caught: " + str(e)\nr',
    )
    assert (out.is_error, out.content) == (False, "caught: no quota for x")
    assert out.audit["nested_calls"][0]["is_error"] is True
    out = await run(ex, 'await get_quota(kcp="y")')
    assert out.is_error
    assert "RuntimeError: no quota for y" in out.content


async def test_nested_results_arrive_parsed_or_as_text(make_executor):
    """JSON text parses, structured content is used when there is no text, other text is str."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def as_json() -> ToolCallOutput:
        """JSON text."""
        return ToolCallOutput('{"a": [1, 2]}', False)

    @tools.tool(read_only=True)
    async def as_structured() -> ToolCallOutput:
        """Structured only."""
        return ToolCallOutput("", False, structured={"b": True})

    @tools.tool(read_only=True)
    async def as_text() -> ToolCallOutput:
        """Plain text."""
        return ToolCallOutput("line one\nline two", False)

    out = await run(
        make_executor(tools),
        "a, b, c = await asyncio.gather(as_json(), as_structured(), as_text())\n"
        "[type(a).__name__, a, type(b).__name__, b, type(c).__name__, c.splitlines()]",
    )
    assert json.loads(out.content) == [
        "dict",
        {"a": [1, 2]},
        "dict",
        {"b": True},
        "str",
        ["line one", "line two"],
    ]


async def test_a_lone_surrogate_in_a_tool_result_arrives_as_a_replacement_character(
    make_executor,
):
    """A tool's JSON may escape a lone surrogate ("\\udcff": json.dumps of a
    surrogateescape'd file name); json.loads lets it through, but the sandbox takes
    UTF-8 only: run_code used to raise UnicodeEncodeError instead of answering. Such a
    character arrives as U+FFFD, in JSON, keys and plain text alike."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def listing() -> ToolCallOutput:
        """JSON text with escaped lone surrogates."""
        return ToolCallOutput('{"files": ["a\\udcffb"], "k\\ud800": 1}', False)

    @tools.tool(read_only=True)
    async def raw_text() -> ToolCallOutput:
        """Plain text with a lone surrogate (an in-process executor can return one)."""
        return ToolCallOutput("x\ud800y", False)

    out = await run(
        make_executor(tools),
        "a, b = await asyncio.gather(listing(), raw_text())\n[a, b]",
    )
    assert not out.is_error, out.content
    assert json.loads(out.content) == [{"files": ["a\ufffdb"], "k\ufffd": 1}, "x\ufffdy"]


async def test_transport_error_raises_tool_error(make_executor):
    """A ToolTransportError reaches the sandbox as RuntimeError('tool error: ...')."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def flaky() -> str:
        """Fails to be made."""
        raise ToolTransportError("server exited", tool="flaky")

    out = await run(
        make_executor(tools),
        "try:\n    await flaky()\nexcept RuntimeError as e:\n    r = str(e)\nr",
    )
    assert out.content == "tool error: server exited"


async def test_unknown_function_is_a_name_error(make_executor, fake):
    """Calling a name outside the catalog raises NameError; nothing reaches the inner executor."""
    out = await run(make_executor(fake), 'await list_everything(kcp="x")')
    assert out.is_error
    assert "NameError: name 'list_everything' is not defined" in out.content
    assert fake.calls == []


@pytest.mark.parametrize(
    "code", ['open("/etc/passwd").read()', 'import os\nos.getenv("HOME")'], ids=["open", "getenv"]
)
async def test_os_access_is_a_permission_error(make_executor, fake, code):
    """Files and the environment are out of reach."""
    out = await run(make_executor(fake), code)
    assert out.is_error
    assert "PermissionError: os access disabled in asyncai code mode" in out.content


async def test_stdlib_imports_work_and_asyncio_json_re_are_preimported(make_executor, fake):
    """import goes through Monty's own resolver; the preamble already imported json and re."""
    ex = make_executor(fake)
    out = await run(
        ex, 'import math\n[math.floor(2.5), json.dumps([1]), re.sub("a+", "b", "caat")]'
    )
    assert json.loads(out.content) == [2, "[1]", "cbt"]
    out = await run(ex, "import requests")
    assert out.is_error
    assert "ModuleNotFoundError" in out.content


async def test_operator_preamble_runs_in_every_new_scope(make_executor, fake):
    """limits.preamble runs after the built-in imports, again after a restart."""
    ex = make_executor(fake, preamble="GREETING = 'hello'\n")
    assert (await run(ex, "GREETING")).content == "hello"
    assert (await run(ex, "GREETING", restart=True)).content == "hello"


async def test_infinite_loop_hits_the_time_limit_and_the_scope_serves_the_next_snippet(
    make_executor, fake
):
    """while True: pass ends with a time-limit error; the scope is reset and works."""
    scope = make_executor(fake, max_feed_duration=1.0).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 1")
    out = await run(scope, "while True:\n    pass")
    assert out.is_error
    assert "TimeoutError" in out.content
    assert "REPL state was reset" in out.content
    assert (await run(scope, "1 + 1")).content == "2"
    assert "NameError" in (await run(scope, "kept")).content


async def test_repl_state_persists_restart_clears_it_and_new_scopes_start_empty(
    make_executor, fake
):
    """State lives across calls in one scope; restart clears it; other threads never see it."""
    ex = make_executor(fake)
    a, b = ex.thread_scope(ThreadKey("#t", "a")), ex.thread_scope(ThreadKey("#t", "b"))
    assert (await run(a, "x = 41\ndef inc(v):\n    return v + 1")).content.startswith("(no output")
    assert (await run(a, "inc(x)")).content == "42"
    assert "NameError" in (await run(b, "x")).content
    out = await run(a, "x", restart=True)
    assert out.is_error
    assert "NameError" in out.content
    assert (await run(ex.thread_scope(ThreadKey("#t", "a")), "y = 1\ny")).content == "1"


async def test_unscoped_calls_share_a_private_scope(make_executor, fake):
    """call_tool on the executor itself uses one private REPL, apart from thread scopes."""
    ex = make_executor(fake)
    await run(ex, "private = 'p'")
    assert (await run(ex, "private")).content == "p"
    assert "NameError" in (await run(ex.thread_scope(ThreadKey("#t", "t")), "private")).content


async def test_positional_arguments_are_a_type_error(make_executor, fake):
    """Tools take keyword arguments only; the call never reaches the inner executor."""
    out = await run(make_executor(fake), 'await list_objects("root:app")')
    assert out.is_error
    assert "TypeError" in out.content
    assert "keyword" in out.content
    assert fake.calls == []


async def test_nested_call_budget_holds(make_executor, fake):
    """Past max_nested_calls a call raises RuntimeError at its call site and is not made."""
    out = await run(
        make_executor(fake, max_nested_calls=3),
        "seen = []\nfor i in range(5):\n    try:\n"
        '        await get_events(kcp=str(i))\n        seen.append("ok")\n'
        "    except RuntimeError as e:\n        seen.append(str(e))\nseen",
    )
    seen = json.loads(out.content)
    assert seen[:3] == ["ok", "ok", "ok"]
    assert all("nested tool call budget exceeded" in s for s in seen[3:])
    assert len(fake.calls) == 3


async def test_gathered_calls_run_at_the_same_time(make_executor):
    """Four gathered calls pass a four-party barrier, which only opens when all run at once."""
    barrier = asyncio.Barrier(4)
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def meet(*, n: int) -> int:
        """Wait for the other three."""
        async with asyncio.timeout(5):
            await barrier.wait()
        return n

    out = await run(make_executor(tools), "await asyncio.gather(*[meet(n=i) for i in range(4)])")
    assert (out.is_error, json.loads(out.content)) == (False, [0, 1, 2, 3])


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ('pending = list_objects(kcp="a")\n"done"', "list_objects() was called without `await`"),
        ('list_objects(kcp="a")', "<coroutine list_objects()>"),
        ('asyncio.gather(list_objects(kcp="a"), get_events(kcp="b"))', "<gather(2)>"),
    ],
    ids=["assigned", "last-expression", "gather"],
)
async def test_never_awaited_calls_do_not_run_and_ask_for_await(make_executor, fake, code, shown):
    """A call that is never awaited never reaches the inner executor; the error says add await."""
    out = await run(make_executor(fake), code)
    assert out.is_error
    assert shown in out.content
    assert "Add `await`" in out.content
    assert fake.calls == []


async def test_a_result_indexed_before_its_await_is_explained(make_executor, fake):
    """``await f()['k']`` indexes the coroutine in real Monty, as in Python: the note says
    the call was read before it was awaited (not that ``await`` is missing, which the
    snippet has), and the form it shows runs the call and reads its result."""
    out = await run(make_executor(fake), 'n = len(await get_events(kcp="k")["items"])\nn')
    assert out.is_error
    assert "'coroutine' object is not subscriptable" in out.content
    assert "Note: get_events() was read before it was awaited" in out.content
    assert "called without `await`" not in out.content
    assert "(await f(...))['key']" in out.content
    assert fake.calls == []
    out = await run(make_executor(fake), 'n = len((await get_events(kcp="k"))["items"])\nn')
    assert (out.is_error, out.content) == (False, "3")


async def test_catalog_function_can_be_held_in_a_variable(make_executor, fake):
    """Reading a catalog name without calling it gives a function that still dispatches."""
    out = await run(make_executor(fake), 'f = get_events\nlen((await f(kcp="k"))["items"])')
    assert out.content == "3"


async def test_ninth_thread_evicts_the_least_recently_used_scope(make_executor, fake):
    """With 8 scopes, a 9th thread closes the least recently used one; the others keep state."""
    ex = make_executor(fake)
    for i in range(8):
        await run(ex.thread_scope(ThreadKey("#t", f"t{i}")), f"v = {i}")
    await run(ex.thread_scope(ThreadKey("#t", "t0")), "v")  # t0 becomes the most recently used
    await run(ex.thread_scope(ThreadKey("#t", "t8")), "v = 8")
    assert "NameError" in (await run(ex.thread_scope(ThreadKey("#t", "t1")), "v")).content
    assert (await run(ex.thread_scope(ThreadKey("#t", "t0")), "v")).content == "0"
    assert (await run(ex.thread_scope(ThreadKey("#t", "t8")), "v")).content == "8"


async def test_a_running_scope_is_never_evicted(make_executor):
    """A scope mid-snippet is skipped by the LRU: the least recently used idle scope goes."""
    entered, release = asyncio.Event(), asyncio.Event()
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def wait_here() -> int:
        """Block until released."""
        entered.set()
        await release.wait()
        return 2

    ex = make_executor(tools, max_scopes=2)
    a = ex.thread_scope(ThreadKey("#t", "a"))
    running = asyncio.create_task(run(a, "before = 40\nbefore + await wait_here()"))
    async with asyncio.timeout(10):
        await entered.wait()
    assert (await run(ex.thread_scope(ThreadKey("#t", "b")), "w = 'b'\nw")).content == "b"
    # a third scope: "a" is the least recently used but running, so "b" goes
    assert (await run(ex.thread_scope(ThreadKey("#t", "c")), "w = 'c'\nw")).content == "c"
    release.set()
    assert (await running).content == "42"
    assert (await run(ex.thread_scope(ThreadKey("#t", "a")), "before")).content == "40"
    assert (await run(ex.thread_scope(ThreadKey("#t", "c")), "w")).content == "c"
    assert "NameError" in (await run(ex.thread_scope(ThreadKey("#t", "b")), "w")).content


async def test_allocation_past_max_memory_is_a_memory_error_then_the_scope_works(
    make_executor, fake
):
    """The heap cap stops a runaway allocation; the scope is reset and serves the next call."""
    scope = make_executor(fake, max_memory=64 * 1024 * 1024).thread_scope(ThreadKey("#t", "t"))
    out = await run(scope, 'x = []\nwhile True:\n    x.append("a" * 10000)')
    assert out.is_error
    assert "MemoryError" in out.content
    assert "REPL state was reset" in out.content
    assert (await run(scope, "len([1, 2, 3])")).content == "3"


async def test_killed_worker_gives_an_error_result_then_recovers(make_executor):
    """SIGKILL of the scope's worker mid-snippet: an error result, then a fresh REPL."""
    entered, release = asyncio.Event(), asyncio.Event()
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def wait_here() -> int:
        """Block until released."""
        entered.set()
        await release.wait()
        return 1

    scope = make_executor(tools).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 1")
    pid = scope.worker_pid
    assert pid is not None
    running = asyncio.create_task(run(scope, "await wait_here()"))
    async with asyncio.timeout(10):
        await entered.wait()
    os.kill(pid, signal.SIGKILL)
    release.set()
    out = await running
    assert out.is_error
    assert "REPL state was reset" in out.content
    assert (await run(scope, "2 * 21")).content == "42"
    assert "NameError" in (await run(scope, "kept")).content
    assert scope.worker_pid != pid


async def test_max_wall_drops_in_flight_calls_and_resets(make_executor):
    """A run_code past max_wall ends with an error; the hung call is cancelled and audited."""
    cancelled = asyncio.Event()
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def hang() -> int:
        """Never answers."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    observed: list[AuditEntry] = []
    scope = make_executor(
        tools, max_wall=1.0, observer=lambda _thread, entry: observed.append(entry)
    ).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 1")
    out = await run(scope, "await hang()")
    assert out.is_error
    assert "wall-clock" in out.content
    assert "REPL state was reset" in out.content
    assert cancelled.is_set()
    assert [e["is_error"] for e in out.audit["nested_calls"]] == [True]
    assert [e.outcome for e in observed] == ["started", "cancelled"]
    assert [e.as_json() for e in observed[1:]] == out.audit["nested_calls"]
    assert "NameError" in (await run(scope, "kept")).content


async def test_cancelled_run_drops_its_calls_and_the_scope_recovers(make_executor):
    """Cancelling run_code (a !stop) cancels the in-flight call; the next call gets a fresh REPL."""
    entered, cancelled = asyncio.Event(), asyncio.Event()
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def hang() -> int:
        """Never answers."""
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    scope = make_executor(tools).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 1")
    task = asyncio.create_task(run(scope, "await hang()"))
    async with asyncio.timeout(10):
        await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
    assert (await run(scope, "'fresh'")).content == "fresh"
    assert "NameError" in (await run(scope, "kept")).content


async def test_tool_timeout_raises_in_the_snippet(make_executor):
    """A call past tool_timeout raises a catchable RuntimeError naming the tool and the limit."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def hang() -> int:
        """Never answers."""
        await asyncio.Event().wait()
        return 0

    out = await run(
        make_executor(tools, tool_timeout=0.2),
        "try:\n    await hang()\nexcept RuntimeError as e:\n    r = str(e)\nr",
    )
    assert out.content == "tool hang timed out after 0.2s"


async def test_print_cap_is_a_memory_error_that_keeps_the_scope(make_executor, fake):
    """Too much print() output fails the snippet but keeps its REPL."""
    scope = make_executor(fake, max_print_bytes=1000).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 'yes'")
    out = await run(scope, 'for i in range(1000):\n    print("x" * 50)')
    assert out.is_error
    assert "MemoryError" in out.content
    assert "print output exceeded" in out.content
    assert "REPL state was reset" not in out.content
    assert (await run(scope, "kept")).content == "yes"


async def test_suspension_budget_resets_the_scope(make_executor, fake):
    """More host round trips than max_suspensions stops the snippet and resets the REPL."""
    scope = make_executor(fake, max_suspensions=5).thread_scope(ThreadKey("#t", "t"))
    out = await run(scope, 'for i in range(10):\n    await get_events(kcp="k")')
    assert out.is_error
    assert "suspension budget exceeded" in out.content
    assert "REPL state was reset" in out.content
    assert (await run(scope, "'alive'")).content == "alive"


async def test_return_contract_through_the_sandbox(make_executor, fake):
    """Prints and values combine per the return contract; empty and None results are explicit."""
    ex = make_executor(fake)
    assert json.loads((await run(ex, 'print("hi")\n{"a": (1, 2)}')).content) == {
        "output": "hi\n",
        "result": {"a": [1, 2]},
    }
    assert json.loads((await run(ex, 'print("only")')).content) == {"output": "only\n"}
    assert (await run(ex, "x = 1")).content == "(no output; the last expression was None)"
    assert (await run(ex, "{}")).content == "(empty result: the last expression was an empty dict)"
    assert (await run(ex, "'plain text'")).content == "plain text"
    out = await run(ex, "'x' * 30000")
    assert out.is_error
    assert "30,000 characters" in out.content
    out = await run(ex, "1/0")
    assert out.is_error
    assert "Traceback" in out.content
    assert "ZeroDivisionError" in out.content


async def test_observer_sees_every_nested_call_sync_async_or_failing(make_executor, fake):
    """The observer gets (thread_id, entry) per call; one that raises is logged, not fatal."""
    seen: list[tuple[str | None, dict]] = []

    async def async_observer(thread_id, entry):
        seen.append((thread_id, entry))

    out = await run(
        make_executor(fake, observer=async_observer).thread_scope(ThreadKey("#t", "th")),
        'await get_events(kcp="k")\nawait delete_object(name="n")\n"ok"',
    )
    assert out.content == "ok"
    # each call twice: as it starts (before the inner call) and as it ends, paired by key
    assert [(t, e.tool, e.mutating, e.outcome) for t, e in seen] == [
        ("th", "get_events", False, "started"),
        ("th", "get_events", False, "ok"),
        ("th", "delete_object", True, "started"),
        ("th", "delete_object", True, "ok"),
    ]
    assert seen[0][1].key == seen[1][1].key != seen[2][1].key == seen[3][1].key
    ended = [e.as_json() for _, e in seen if e.outcome != "started"]
    assert ended == out.audit["nested_calls"]

    def failing_observer(thread_id, entry):
        raise OSError("disk full")

    with capture_logs() as logs:
        out = await run(
            make_executor(fake, observer=failing_observer), 'len((await get_events(kcp="k")))'
        )
    assert (out.is_error, out.content) == (False, "1")
    assert any(e["event"] == "code_mode.observer_failed" for e in logs)


async def test_nested_calls_are_logged_and_mutating_ones_warn(make_executor, fake):
    """mcp.tool_call/mcp.tool_result at info, or at warning with mutating=True."""
    with capture_logs() as logs:
        await run(make_executor(fake), 'await get_events(kcp="k")\nawait delete_object(name="cm")')
    calls = [e for e in logs if e["event"] in ("mcp.tool_call", "mcp.tool_result")]
    by_tool = {(e["event"], e["tool"]): e for e in calls}
    read = by_tool[("mcp.tool_call", "get_events")]
    assert (read["log_level"], read["via"], read["arguments"]) == (
        "info",
        "code_mode",
        {"kcp": "k"},
    )
    assert "mutating" not in read
    result = by_tool[("mcp.tool_result", "get_events")]
    assert result["content"] == {
        "items": [{"type": "Warning"}, {"type": "Normal"}, {"type": "Warning"}]
    }
    assert result["is_error"] is False
    assert result["bytes"] > 0
    for event in ("mcp.tool_call", "mcp.tool_result"):
        write = by_tool[(event, "delete_object")]
        assert (write["log_level"], write["mutating"]) == ("warning", True)
    assert by_tool[("mcp.tool_result", "delete_object")]["content"] == "deleted cm"


async def test_bad_run_code_calls_are_error_results(make_executor, fake):
    """An unknown tool name or a missing code argument is an error result, with an empty audit."""
    ex = make_executor(fake)
    out = await ex.call_tool("list_objects", {"kcp": "x"})
    assert out.is_error
    assert out.audit == {"nested_calls": []}
    assert (await ex.call_tool("run_code", {"restart": True})).is_error


async def test_executor_without_a_pool_starts_lazily_and_closes_cleanly(fake):
    """Without pool=, the executor starts its inner executor and its own pool, then closes both."""
    ex = CodeModeToolExecutor(fake, CodeModeLimits(max_scopes=1))
    assert fake.started == 0
    assert (await run(ex.thread_scope(ThreadKey("#t", "t")), "6 * 7")).content == "42"
    assert fake.started == 1
    await ex.aclose()
    assert fake.closed == 1
    with pytest.raises(SandboxUnavailable):
        await run(ex, "1")


async def test_two_calls_on_one_scope_take_turns(make_executor):
    """A second run_code on a busy scope waits for the first instead of breaking the REPL."""
    entered, release = asyncio.Event(), asyncio.Event()
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def wait_here() -> int:
        """Block until released."""
        entered.set()
        await release.wait()
        return 2

    scope = make_executor(tools).thread_scope(ThreadKey("#t", "t"))
    first = asyncio.create_task(run(scope, "a = 1\na = await wait_here()\na"))
    async with asyncio.timeout(10):
        await entered.wait()
    second = asyncio.create_task(run(scope, "a * 10"))
    await asyncio.sleep(0)  # let the second call reach the scope's lock
    assert not second.done()
    release.set()
    assert (await first).content == "2"
    assert (await second).content == "20"


_EXIT_SCRIPT = """
import asyncio
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.tools import ThreadKey
from tests.fakes.executor import FakeToolExecutor

async def main():
    ex = CodeModeToolExecutor(FakeToolExecutor(), CodeModeLimits(max_scopes=1))
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    out = await scope.call_tool("run_code", {"code": "sum(range(10))"})
    await ex.aclose()
    print(out.content)

asyncio.run(main())
"""


async def test_a_process_using_code_mode_exits_cleanly():
    """aclose() leaves nothing that aborts the interpreter at exit (notes/monty.md §10)."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _EXIT_SCRIPT,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    async with asyncio.timeout(30):
        results = [await p.communicate() for p in procs]
    for proc, (stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr.decode()
        assert stdout.decode().splitlines()[-1] == "45"


async def test_issue_three_seams_are_called(make_executor, fake, monkeypatch):
    """The hooks module's seams: pre-run check, preamble, hints, post-snippet probe, note."""
    from daemon.code_mode.repl import hooks

    seen: list[tuple[str, bool, bool]] = []

    async def after_snippet(scope, code, outcome):
        seen.append((code, outcome.fresh, outcome.reset))
        if scope.session is not None:
            scope.note = f"probe says {await scope.probe('sorted(k for k in [HELPER])')}"

    monkeypatch.setattr(hooks, "scope_preamble", lambda limits: "HELPER = 'h'\n")
    monkeypatch.setattr(
        hooks,
        "check_snippet",
        lambda code: "rejected: rebinds HELPER" if "HELPER =" in code else None,
    )
    monkeypatch.setattr(
        hooks, "error_hints", lambda text: ["try .get()"] if "KeyError" in text else []
    )
    monkeypatch.setattr(hooks, "after_snippet", after_snippet)
    monkeypatch.setattr(
        hooks, "context_note", lambda scope, evicted: scope.note if scope is not None else None
    )
    ex = make_executor(fake)
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    assert (await run(scope, "HELPER")).content == "h"
    assert ex.context_note(ThreadKey("#t", "t")) == "probe says ['h']"
    out = await run(scope, "HELPER = 1")
    assert (out.is_error, out.content) == (True, "rejected: rebinds HELPER")
    out = await run(scope, "{}['k']")
    assert out.content.splitlines()[-1] == "Hint: try .get()"
    await run(scope, "HELPER", restart=True)
    assert seen == [("HELPER", True, False), ("{}['k']", False, False), ("HELPER", True, False)]


# ---- started calls (issue 13) ------------------------------------------------------


async def test_the_started_entry_is_observed_before_the_tool_runs(make_executor):
    """The observer sees a call as it starts (outcome 'started', no result yet) before
    the inner tool runs, so a crash mid-call leaves the evidence; then its end."""
    observed: list[AuditEntry] = []
    seen_by_tool: list[list[str]] = []
    tools = FakeToolExecutor()

    @tools.tool()
    async def delete_object(*, name: str) -> str:
        """Delete one object."""
        seen_by_tool.append([e.outcome for e in observed])
        return f"deleted {name}"

    out = await run(
        make_executor(tools, observer=lambda _t, e: observed.append(e)),
        'await delete_object(name="x")',
    )
    assert out.content == "deleted x"
    assert seen_by_tool == [["started"]]
    started, ended = observed
    assert (started.is_error, started.bytes, started.duration_ms) == (False, 0, 0.0)
    assert (ended.outcome, ended.key, ended.started) == ("ok", started.key, started.started)


async def test_each_call_ends_ok_or_error_in_the_audit(make_executor):
    """An answered call is 'ok'; a transport error or an is_error answer is 'error';
    the snippet's audit keeps only the ended entries, in the order calls ended."""
    observed: list[AuditEntry] = []
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def fine() -> str:
        """Works."""
        return "fine"

    @tools.tool()
    async def flaky() -> str:
        """Fails to be made."""
        raise ToolTransportError("server exited", tool="flaky")

    out = await run(
        make_executor(tools, observer=lambda _t, e: observed.append(e)),
        "await fine()\ntry:\n    await flaky()\nexcept RuntimeError:\n    pass\n'done'",
    )
    assert out.content == "done"
    assert [(e.tool, e.outcome) for e in observed] == [
        ("fine", "started"),
        ("fine", "ok"),
        ("flaky", "started"),
        ("flaky", "error"),
    ]
    assert [(c["tool"], c["outcome"]) for c in out.audit["nested_calls"]] == [
        ("fine", "ok"),
        ("flaky", "error"),
    ]


async def test_a_failed_snippet_reports_the_calls_it_started(make_executor, fake):
    """A snippet that fails after a mutating call ends its error with the calls it
    started, so the model does not call delete_object a second time."""
    out = await run(
        make_executor(fake),
        'await get_events(kcp="k")\nawait delete_object(name="x")\nraise ValueError("after")',
    )
    assert out.is_error
    assert "ValueError: after" in out.content
    assert out.content.endswith(
        "Calls this snippet started, in order:\n"
        "- get_events(kcp='k'): ok\n"
        "- delete_object(name='x') [mutating]: ok"
    )


async def test_nested_calls_skip_info_lines_when_info_is_off(make_executor, fake):
    """With the level at warning, a read-only call logs nothing; a mutating call still warns."""
    configure_logging(verbose=False, stream=io.StringIO())
    try:
        with capture_logs() as logs:
            out = await run(
                make_executor(fake), 'await get_events(kcp="k")\nawait delete_object(name="cm")'
            )
    finally:
        reset_logging()
    assert out.is_error is False
    events = [(e["event"], e["tool"]) for e in logs if e["event"].startswith("mcp.")]
    assert events == [("mcp.tool_call", "delete_object"), ("mcp.tool_result", "delete_object")]
    assert [e["tool"] for e in out.audit["nested_calls"]] == ["get_events", "delete_object"]
