"""Faults an attack campaign found in code mode (issue 15), each pinned by a test.

Run on the real shared Monty pool over an in-memory executor, with small limits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.repl.hooks import after_snippet, too_large
from daemon.code_mode.repl.scope import ScopeState
from daemon.code_mode.sandbox.direct import SLEEP_DENIED
from daemon.code_mode.sandbox.outcome import SnippetOutcome
from daemon.tools import ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

# every expectation holds on both paths a snippet can take (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("engine_path")

TEST_LIMITS = {"max_feed_duration": 0.5, "max_wall": 20.0, "tool_timeout": 10.0}

MakeExecutor = Callable[..., CodeModeToolExecutor]


@pytest.fixture
def fake() -> FakeToolExecutor:
    """Tools that return what an attacker's server would: deep, odd or failing results."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def get_events(*, kcp: str) -> dict:
        """Events of a workspace."""
        return {"items": [{"type": "Warning"}]}

    @fake.tool(read_only=True)
    async def deep_text() -> ToolCallOutput:
        """JSON text nested 10 000 levels deep."""
        return ToolCallOutput("[" * 10_000 + "]" * 10_000, False)

    @fake.tool(read_only=True)
    async def deep_structured() -> ToolCallOutput:
        """Structured content nested 10 000 levels deep, without text."""
        value: dict = {}
        for _ in range(10_000):
            value = {"a": value}
        return ToolCallOutput("", False, structured=value)

    @fake.tool(read_only=True)
    async def surrogate_error() -> ToolCallOutput:
        """A tool error whose text holds a lone surrogate."""
        return ToolCallOutput("boom \ud800 here", True)

    return fake


@pytest.fixture
async def make_executor(monty_pool) -> AsyncIterator[MakeExecutor]:
    """Build executors on the shared pool with test limits; close them all afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(inner, **limits) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**{**TEST_LIMITS, **limits}), pool=monty_pool
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def run(executor, code: str) -> ToolCallOutput:
    """One run_code call."""
    return await executor.call_tool("run_code", {"code": code})


# -- 4: a huge snippet ------------------------------------------------------------


def test_too_large_counts_utf8_bytes():
    """The size limit is on UTF-8 bytes: 600 'é' are 1 200 bytes, over a 1 000-byte limit."""
    assert too_large("é" * 500, 1000) is None
    message = too_large("é" * 600, 1000)
    assert message is not None
    assert "1,200 bytes, over the 1,000-byte limit (code_mode.max_snippet_bytes)" in message
    assert too_large("\ud800" * 10, 1000) is None  # a lone surrogate does not break the count


async def test_a_snippet_over_max_snippet_bytes_is_refused_before_it_runs(make_executor, fake):
    """A snippet over the limit gets a clear error, runs nothing, and the REPL is kept."""
    scope = make_executor(fake, max_snippet_bytes=1000).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 'yes'")
    out = await run(scope, 'kept = "no"\nawait get_events(kcp="k")\n' + "#" * 2000)
    assert out.is_error
    assert out.content.startswith("run_code rejected this snippet before running it:")
    assert "over the 1,000-byte limit (code_mode.max_snippet_bytes)" in out.content
    assert fake.calls == []
    assert (await run(scope, "kept")).content == "yes"


async def test_big_pathological_snippets_do_not_stall_the_event_loop(make_executor, fake):
    """Snippets just under the default limit that are slow to check leave the loop free.

    One defeats the quadratic patterns the line scan had (a 250 000-character
    identifier on a line that does not parse); one is dense code that takes
    CPython's parser about a second. A ticker on the loop keeps ticking.
    """
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    snippets = [
        "a" * 250_000 + "\n)",
        "f(g(h(1)))\n" * 23_000,
    ]
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    try:
        for code in snippets:
            assert len(code.encode()) <= CodeModeLimits().max_snippet_bytes
            out = await run(scope, code)
            assert out.is_error  # neither runs: a syntax error, and f is not defined
    finally:
        done.set()
        await tick
    # generous: the checks themselves took seconds on the loop before
    assert max(gaps) < 0.5
    assert (await run(scope, "1 + 1")).content == "2"


# -- 8b, 8c: the variables probe, the print cap --------------------------------------


async def test_a_probe_that_would_sleep_leaves_the_next_snippet_working(make_executor, fake):
    """A snippet's function the variables probe calls cannot stall it by sleeping.

    Shadowing ``len`` with a sleeping function made the probe outlive its
    deadline; the cancelled feed left a finished checkout, and the next
    snippet failed once. The probe now runs without OS access, and a probe
    that ends its checkout anyway discards it.
    """
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "a = 1")
    code = (
        "import time\ndef len(x):\n    for i in range(5):\n        time.sleep(10)\n"
        "    return 1\ns = 'abc'"
    )
    assert not (await run(scope, code)).is_error
    out = await run(scope, "a")
    assert (out.content, out.is_error) == ("1", False)


class _StalledProbe(ScopeState):
    """A scope whose probe is cut off by its deadline, as a stalled feed is."""

    async def probe(self, code: str) -> object:
        """Fails as the hook's ``asyncio.timeout`` does."""
        raise TimeoutError


async def test_a_probe_cut_off_mid_feed_discards_its_checkout(monty_pool):
    """A probe that did not end cleanly leaves no half-fed checkout for the next snippet."""
    state = _StalledProbe("t")
    await state.checkout(monty_pool, CodeModeLimits(max_feed_duration=0.5))
    with pytest.raises(TimeoutError):
        await after_snippet(state, "x = 1", SnippetOutcome())
    assert state.session is None
    assert state.reset_reason == "reset"


async def test_print_overflow_just_before_a_tool_call_keeps_the_scope(make_executor, fake):
    """Output over the cap flushed just before a tool call fails the snippet; the REPL is kept.

    The call is not made: the snippet gets the MemoryError where it calls.
    """
    scope = make_executor(fake, max_print_bytes=1000).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 'yes'")
    out = await run(scope, "print('x' * 2000)\nawait get_events(kcp='k')")
    assert out.is_error
    assert "MemoryError: print output exceeded the 1,000-byte cap" in out.content
    assert "REPL state was reset" not in out.content
    assert fake.calls == []
    assert (await run(scope, "kept")).content == "yes"


# -- 9: deep values, surrogates ----------------------------------------------------


async def test_a_deeply_nested_snippet_value_is_an_error_result(make_executor, fake):
    """A 10 000-deep value is an error result the model reads; the REPL keeps it."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(scope, "x = []\nfor i in range(10000):\n    x = [x]\nx")
    assert out.is_error
    assert "nested more than 200 levels deep" in out.content
    assert "REPL state was reset" not in out.content
    assert (await run(scope, "len(x)")).content == "1"


@pytest.mark.parametrize("tool", ["deep_text", "deep_structured"])
async def test_a_deeply_nested_tool_result_is_a_catchable_error(make_executor, fake, tool):
    """A tool result too deep for the sandbox raises a catchable RuntimeError there."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "kept = 'yes'")
    out = await run(
        scope, f"try:\n    await {tool}()\nexcept RuntimeError as e:\n    r = str(e)\nr"
    )
    assert not out.is_error, out.content
    assert out.content.startswith(f"tool {tool} returned a value the sandbox cannot take")
    assert "nested more than 200 levels deep" in out.content
    assert (await run(scope, "kept")).content == "yes"


async def test_a_tool_error_with_a_lone_surrogate_is_a_catchable_runtime_error(make_executor, fake):
    """The error text arrives with U+FFFD in place of the surrogate, as a RuntimeError."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope, "try:\n    await surrogate_error()\nexcept RuntimeError as e:\n    r = str(e)\nr"
    )
    assert (out.content, out.is_error) == ("boom \ufffd here", False)


# -- 10: sleeping -------------------------------------------------------------------


@pytest.mark.parametrize("code", ["await asyncio.sleep(1)", "import time\ntime.sleep(1)"])
async def test_a_timed_sleep_says_it_is_not_available_and_what_to_do(make_executor, fake, code):
    """A timed sleep raises NotImplementedError saying sleeps are unavailable, not 'os access'."""
    out = await run(make_executor(fake), code)
    assert out.is_error
    assert f"NotImplementedError: {SLEEP_DENIED}" in out.content
    assert SLEEP_DENIED == (
        "timed sleeps are not available in the asyncai sandbox (asyncio.sleep and time.sleep "
        "cannot wait here). To run tool calls at the same time, await asyncio.gather(...); "
        "to wait for something to change, end this snippet and check again in a later "
        "run_code call"
    )
    assert "os access disabled" not in out.content
