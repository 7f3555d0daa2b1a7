"""Which snippets take Monty's own host-call path, and what stays the snapshots' (issue 17).

The rules are pure (:func:`direct_ok`, tested without I/O); the rest runs on
the real pool. That both paths answer alike is checked by the modules that
run under the ``engine_path`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import pytest

from daemon.approvals import Verdict
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.lazy import DIRECT_MARKER, RESULT_SOURCE, TOOL_PREFIX
from daemon.code_mode.sandbox import engine as engine_module
from daemon.code_mode.sandbox import nested as nested_module
from daemon.code_mode.sandbox.direct import MAX_CHECKED_CHARS, direct_ok, public_names
from daemon.code_mode.sandbox.nested import NestedCalls
from daemon.tools import AuditEntry, ThreadKey
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.scope_store import MemoryScopeStore

NAMES = public_names(["echo", "nap", "remove"])
GATED = public_names(["remove"])
TEST_LIMITS = {"max_feed_duration": 2.0, "max_wall": 20.0, "tool_timeout": 10.0}


@pytest.mark.parametrize(
    "code",
    [
        "x = await echo(value=1)",
        "await _asyncai_tool_echo(value=1)",  # a wrapper's host name (no gate: issue 26)
        "[await echo(value=i) for i in range(3)]",
        "import asyncio\nawait asyncio.gather(*[echo(value=i) for i in range(3)])",
        "await asyncio.gather(echo(value=1), nap(n=2), return_exceptions=True)",
        "await gather(*(echo(value=i) for i in range(3)))",
        "await asyncio.gather(*[echo(value=i) for i in await echo(value=[1])])",
        "async def get(v):\n    return await echo(value=v)\nawait get(1)",
        "print(len(await echo(value=1)))",
        "x = 1\nx + 2",
        "await remove(name='a')",  # no gate: nothing is gated
    ],
)
def test_snippets_that_await_every_call_where_they_make_it_are_direct(code):
    gated = GATED if "remove" not in code and "_asyncai_" not in code else frozenset()
    assert direct_ok(code, NAMES, gated)


@pytest.mark.parametrize(
    "code",
    [
        "x = echo(value=1)",  # never awaited: it must not run
        "f = echo",  # a function kept for later
        "f = lambda: echo(value=1)",
        "await x",  # may be a call an earlier snippet made
        "calls = [echo(value=i) for i in range(3)]\nawait asyncio.gather(*calls)",
        "await asyncio.gather(*[echo(value=i) for i in range(3) if nap])",
        "await asyncio.wait([echo(value=1)])",
        "asyncio.gather(echo(value=1))",  # the gather itself is not awaited
        "await remove(name='a')",  # the gate may hold it: only the snapshots can pause
        "await _asyncai_tool_remove(name='a')",
        "await echo(value=1",  # does not parse: the snapshot path reports it
        # with a gate, a name built at run time may reach a gated tool (issue 26)
        "await locals()['rem' + 'ove'](name='a')",
        "await eval('rem' + 'ove')(name='a')",
        "x = _asyncai_wrappers",
    ],
)
def test_snippets_that_may_leave_a_call_unawaited_or_held_are_not(code):
    assert not direct_ok(code, NAMES, GATED)


def test_a_snippet_too_long_to_parse_on_the_loop_takes_the_snapshots():
    short = "x = await echo(value=1)\n"
    assert direct_ok(short, NAMES, GATED)
    long = short + "#" * MAX_CHECKED_CHARS
    assert not direct_ok(long, NAMES, GATED)


@pytest.fixture
def fake() -> FakeToolExecutor:
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def echo(*, value: int) -> dict:
        """Return the value."""
        return {"value": value}

    @fake.tool(read_only=True)
    async def nap(*, n: int) -> int:
        """Sleep a long time unless cancelled."""
        await asyncio.sleep(30)
        return n

    @fake.tool(read_only=True)
    async def boom() -> dict:
        """Fail."""
        raise RuntimeError("boom")

    @fake.tool()
    async def remove(*, name: str) -> str:
        """Delete something."""
        return f"removed {name}"

    return fake


@pytest.fixture
async def make_executor(monty_pool) -> AsyncIterator[Callable[..., CodeModeToolExecutor]]:
    made: list[CodeModeToolExecutor] = []

    def make(inner, limits=None, **kwargs) -> CodeModeToolExecutor:
        limits = CodeModeLimits(**{**TEST_LIMITS, **(limits or {})})
        ex = CodeModeToolExecutor(inner, limits, pool=monty_pool, **kwargs)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


@pytest.fixture
def direct_runs(monkeypatch) -> list[str]:
    """The snippets that ran on the direct path, in order."""
    seen: list[str] = []
    real = engine_module.DirectFeed.run

    async def run(self, session, code):
        seen.append(code)
        return await real(self, session, code)

    monkeypatch.setattr(engine_module.DirectFeed, "run", run)
    return seen


async def run(scope, code: str, **extra):
    return await scope.call_tool("run_code", {"code": code, **extra})


async def test_a_scope_leaves_the_direct_path_for_good_after_an_ineligible_snippet(
    make_executor, fake, direct_runs
):
    """A function an ineligible snippet defined may leave a call unawaited: it still never runs."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    assert (await run(scope, "(await echo(value=1))['value']")).content == "1"
    assert direct_runs == ["(await echo(value=1))['value']"]
    await run(scope, "def make():\n    return echo(value=2)")
    out = await run(scope, "made = make()\n'done'")
    assert "await" in out.content  # the return contract asks for the await
    assert [name for name, _ in fake.calls] == ["echo"]  # the unawaited call never ran
    assert len(direct_runs) == 1
    # a restart empties the REPL, and with it what the ineligible snippets left
    assert (await run(scope, "(await echo(value=3))['value']", restart=True)).content == "3"
    assert len(direct_runs) == 2


async def test_leaving_the_direct_path_changes_only_the_wrappers_still_bound(
    make_executor, fake, direct_runs
):
    """The snapshot path's wrappers replace the direct ones, not a function the snippets
    defined under a tool's name; a call never awaited is then named."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "def echo(value):\n    return value * 2")
    assert len(direct_runs) == 1
    assert (await run(scope, "f = nap\necho(value=4)")).content == "8"
    out = await run(scope, "pending = nap(n=1)\n'done'")
    assert "nap() was called without `await`" in out.content
    assert fake.calls == []
    assert len(direct_runs) == 1


async def test_a_gathered_call_still_in_flight_when_the_snippet_fails_is_cancelled(
    make_executor, fake, direct_runs
):
    """Monty lets a host coroutine run on after its feed; the direct path cancels and audits it."""
    seen: list[AuditEntry] = []
    scope = make_executor(fake, observer=lambda _t, e: seen.append(e)).thread_scope(
        ThreadKey("#t", "t")
    )
    out = await run(scope, "await asyncio.gather(nap(n=1), boom())")
    assert direct_runs
    assert out.is_error
    assert "RuntimeError: boom" in out.content
    ended = {e.tool: e.outcome for e in seen if e.outcome != "started"}
    assert ended == {"nap": "cancelled", "boom": "error"}
    assert (await run(scope, "'alive'")).content == "alive"


async def test_a_loop_that_swallows_the_budget_error_is_still_stopped(
    make_executor, fake, direct_runs
):
    """Past max_suspensions the direct feed is cancelled, whatever the snippet catches."""
    scope = make_executor(fake, limits={"max_suspensions": 5}).thread_scope(ThreadKey("#t", "t"))
    code = (
        "n = 0\nwhile True:\n    try:\n        await echo(value=1)\n"
        "    except Exception:\n        n += 1"
    )
    out = await run(scope, code)
    assert direct_runs == [code]
    assert out.is_error
    assert "suspension budget exceeded" in out.content
    assert "REPL state was reset" in out.content
    assert (await run(scope, "'alive'")).content == "alive"


async def test_with_a_gate_only_snippets_naming_a_gated_tool_take_the_snapshots(
    make_executor, fake, direct_runs
):
    """Reads stay direct under an approval gate; a mutating call pauses as before."""
    scope = make_executor(
        fake, gate=lambda _d, _a: Verdict("ask", "a person decides")
    ).thread_scope(ThreadKey("#t", "t"))
    assert (await run(scope, "(await echo(value=5))['value']")).content == "5"
    assert len(direct_runs) == 1
    out = await run(scope, "await remove(name='x')")
    assert out.pause is not None  # held for a person, not made
    assert [name for name, _ in fake.calls] == ["echo"]
    assert len(direct_runs) == 1


# -- a stored REPL says which path it may take -----------------------------------------


async def test_a_stored_repl_keeps_its_path_across_a_restart(make_executor, fake, direct_runs):
    """Eligible only: the restored REPL stays direct; after an ineligible snippet: snapshots."""
    store = MemoryScopeStore()
    first = make_executor(fake, scopes=store)
    await run(first.thread_scope(ThreadKey("#t", "fast")), "a = (await echo(value=1))['value']")
    await run(first.thread_scope(ThreadKey("#t", "slow")), "keep = echo")
    await first.checkpoint_all()
    seen = len(direct_runs)

    second = make_executor(fake, scopes=store)  # a restart: same store, new executor
    assert (await run(second.thread_scope(ThreadKey("#t", "fast")), "a + 1")).content == "2"
    assert len(direct_runs) == seen + 1
    assert (
        await run(second.thread_scope(ThreadKey("#t", "slow")), "(await keep(value=3))['value']")
    ).content == "3"
    assert len(direct_runs) == seen + 1  # the kept function may make any call: snapshots


async def test_a_repl_stored_without_the_marker_takes_the_snapshots(
    make_executor, fake, monty_pool, direct_runs
):
    """A dump from before the direct path (no marker) cannot vouch for its functions."""
    store = MemoryScopeStore()
    async with monty_pool.checkout() as session:
        await session.feed_run("old = 41")
        await store.save(ThreadKey("#t", "old"), await session.dump())
    scope = make_executor(fake, scopes=store).thread_scope(ThreadKey("#t", "old"))
    assert (await run(scope, "old + 1")).content == "42"
    assert direct_runs == []


async def test_a_repl_stored_with_the_first_wrappers_runs_and_leaves_the_direct_path(
    make_executor, fake, monty_pool, direct_runs
):
    """A dump whose wrappers make the call where the snippet calls it (before they were
    async) stays direct while it may, then leaves it as any scope does."""
    store = MemoryScopeStore()
    old_wrappers = "".join(
        f"def {name}(*args, **kwargs):\n"
        f"    return _asyncai_result({TOOL_PREFIX}{name}(*args, **kwargs))\n"
        for name in ("echo", "nap")
    )
    async with monty_pool.checkout() as session:
        await session.feed_run(
            f"import json as _asyncai_json\n{RESULT_SOURCE}\n{old_wrappers}\n{DIRECT_MARKER} = True"
        )
        await store.save(ThreadKey("#t", "old"), await session.dump())
    scope = make_executor(fake, scopes=store).thread_scope(ThreadKey("#t", "old"))
    assert (await run(scope, "(await echo(value=2))['value']")).content == "2"
    assert len(direct_runs) == 1
    out = await run(scope, "pending = nap(n=1)\n'done'")
    assert "nap() was called without `await`" in out.content
    assert [name for name, _ in fake.calls] == ["echo"]
    assert len(direct_runs) == 1


async def test_a_call_with_its_log_lines_off_is_audited_alike(fake, monkeypatch):
    """With info off and no observer a call takes the short way; its entry is the same."""
    entry = Catalog(fake.definitions()).lookup("echo")
    assert entry is not None
    logged = NestedCalls(fake, CodeModeLimits(), thread_id=None)
    assert await logged.value(entry, {"value": 1}) == {"value": 1}
    monkeypatch.setattr(nested_module, "_logger", lambda _mutating: None)
    quiet = NestedCalls(fake, CodeModeLimits(), thread_id=None)
    assert await quiet.value(entry, {"value": 1}) == {"value": 1}
    assert [call.outcome for call in quiet.started] == ["ok"]
    (a,), (b,) = logged.entries, quiet.entries
    for made in (a, b):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", made.started)
        assert made.duration_ms >= 0
        assert re.fullmatch(r"[0-9a-f]{32}", made.key)
    fields = ("tool", "arguments", "is_error", "bytes", "mutating", "outcome", "queue_ms")
    assert [getattr(b, f) for f in fields] == [getattr(a, f) for f in fields]
    assert a.key != b.key
