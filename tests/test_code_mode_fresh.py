"""New scopes load the preamble's REPL once it was fed (issue 17)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.tools import ThreadKey
from tests.fakes.executor import FakeToolExecutor

TEST_LIMITS = {"max_feed_duration": 5.0, "max_wall": 20.0, "tool_timeout": 10.0}


@pytest.fixture
def fake() -> FakeToolExecutor:
    """One read-only tool."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def get_events(*, kcp: str) -> dict:
        """Events."""
        return {"items": [{"name": kcp}]}

    return fake


@pytest.fixture
async def make(monty_pool) -> AsyncIterator[Callable[..., CodeModeToolExecutor]]:
    """Executors on the shared pool, closed afterwards."""
    made: list[CodeModeToolExecutor] = []

    def build(inner, **limits) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**{**TEST_LIMITS, **limits}), pool=monty_pool
        )
        made.append(ex)
        return ex

    yield build
    for ex in made:
        await ex.aclose()


async def test_every_new_scope_has_the_helpers_and_tools_and_the_same_numbering(make, fake):
    """Scopes after the first (loaded, not fed) behave like the first: helpers, tool
    wrappers, and tracebacks that call their first snippet <python-input-1>."""
    ex = make(fake)
    for thread in ("a", "b", "c"):
        scope = ex.thread_scope(ThreadKey("#t", thread))
        out = await scope.call_tool("run_code", {"code": 'names(await get_events(kcp="k"))'})
        assert (out.is_error, out.content) == (False, '["k"]')
        scope = ex.thread_scope(ThreadKey("#t", f"{thread}-new"))
        out = await scope.call_tool("run_code", {"code": "1 / 0"})
        assert '"<python-input-1>", line 1' in out.content
    assert len(fake.calls) == 3


async def test_an_operators_preamble_runs_in_every_scope(make, fake):
    """A preamble that calls a tool is fed to each new scope, never loaded from a copy."""
    ex = make(fake, preamble='FIRST = (await get_events(kcp="pre"))["items"][0]["name"]')
    for thread in ("a", "b"):
        out = await ex.thread_scope(ThreadKey("#t", thread)).call_tool(
            "run_code", {"code": "FIRST"}
        )
        assert out.content == "pre"
    assert fake.calls_to("get_events") == [{"kcp": "pre"}] * 2
