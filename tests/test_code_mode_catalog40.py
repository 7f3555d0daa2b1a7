"""Issue 19 end to end: a 40-tool MCP server, the Monty pool, SQLite and a scripted model.

``tests/fakes/mcp_catalog_server.py`` serves 40 tools whose stubs are over
the default ``catalog_budget``; every tool but ``get_server`` declares no
output schema, so its results teach shapes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.mcp.executor import McpToolExecutor
from daemon.model import OpenAiCompatibleBackend
from daemon.runtime.runs import Prompt, RunRequest
from daemon.tools import ThreadKey
from sessions import Store
from tests.fakes.fake_openai import FakeOpenAI, ToolCalls

SERVER = str(Path(__file__).parent / "fakes" / "mcp_catalog_server.py")
LIMITS = {"max_feed_duration": 5.0, "max_wall": 30.0, "tool_timeout": 20.0}

Make = Callable[..., CodeModeToolExecutor]


@pytest.fixture
async def make(monty_pool: Any) -> AsyncIterator[Make]:
    """Code-mode executors over the catalog server (its flags given), closed afterwards."""
    made: list[CodeModeToolExecutor] = []

    def build(*flags: str, store: Store | None = None, **limits: Any) -> CodeModeToolExecutor:
        mcp = McpToolExecutor({"cat": {"command": sys.executable, "args": [SERVER, *flags]}})
        ex = CodeModeToolExecutor(
            mcp,
            CodeModeLimits(**{**LIMITS, **limits}),
            pool=monty_pool,
            shapes=None if store is None else store.shapes,
        )
        made.append(ex)
        return ex

    yield build
    for ex in made:
        await ex.aclose()


async def run(ex: Any, code: str) -> str:
    """One run_code call; its text (an error result fails the test)."""
    out = await ex.call_tool("run_code", {"code": code})
    assert not out.is_error, out.content
    return out.content


FIND = 'found = search_tools("invoice paid")\nprint(describe(found[0]))\nfound'
CALL = 'inv = await get_invoice(id="invoice-4")\n[inv["id"], inv["status"], inv["owner"]["name"]]'


async def test_over_the_budget_a_scripted_model_finds_describes_and_calls_a_tool(make) -> None:
    """40 tools: the description lists names; the model searches, describes, then calls."""
    ex = make()
    await ex.start()
    assert ex.catalog is not None
    assert ex.catalog.searchable
    description = ex.definitions()[0].description
    assert "async def get_invoice" not in description
    assert "- get_invoice: Get one invoice: the amount billed for an order" in description
    refused = await ex.call_tool("run_code", {"code": "describe = search_tools"})
    assert refused.is_error
    assert refused.content == (
        "run_code rejected this snippet before running it: line 1 assigns to 'describe', which "
        "is a built-in helper (search_tools, describe); rebinding it would break later "
        "snippets. Use another name, e.g. 'describe_'."
    )
    script = [
        ToolCalls(("run_code", {"code": FIND})),
        ToolCalls(("run_code", {"code": CALL})),
        ToolCalls(("run_code", {"code": 'describe("get_invoice")'})),
        "invoice-4 is pending; owner4 owns it.",
    ]
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, api_key="k", model="fake-model")
        backend = OpenAiCompatibleBackend(params, ex)
        try:
            prompt = Prompt("m1", "alice", "is invoice-4 paid?")
            result = await backend.run(RunRequest("R1", "#ops", "T1", [], [prompt]))
        finally:
            await backend.aclose()
    assert result.reply == "invoice-4 is pending; owner4 owns it."
    found = fake.requests[1]["messages"][-1]["content"]
    printed = json.loads(found)
    assert printed["result"][0].startswith("get_invoice: ")
    assert printed["output"].startswith("async def get_invoice(*, id: str) -> Any:")
    called = fake.requests[2]["messages"][-1]["content"]
    assert json.loads(called) == ["invoice-4", "pending", "owner4"]
    # the call taught get_invoice's shape: describe() shows it from then on
    described = fake.requests[3]["messages"][-1]["content"]
    assert "-> dict[str, Any]:" in described
    assert 'Returns (observed): {"id": str, "name": str, "status": str' in described
    assert fake.requests[0]["tools"][0]["function"]["description"] == description


async def test_below_the_budget_every_stub_shows_and_there_are_no_helpers(make) -> None:
    """With a budget the stubs fit, the description is the full one and describe is unknown."""
    ex = make(catalog_budget=100_000)
    await ex.start()
    assert "async def get_invoice(*, id: str) -> Any:" in ex.definitions()[0].description
    out = await ex.call_tool("run_code", {"code": 'describe("get_invoice")'})
    assert out.is_error
    assert "NameError: name 'describe' is not defined" in out.content
    assert await run(ex, "describe = 2\ndescribe") == "2"  # no helper: a name like any other


async def test_a_learned_shape_is_stored_and_back_after_a_restart(make, tmp_path: Path) -> None:
    """The first result teaches the shape: in the stub, describe(), the note, the store; then
    a new executor on the same database starts with it, and another server version does not."""
    async with Store(tmp_path / "a.db") as store:
        ex = make(store=store, catalog_budget=100_000)
        await ex.start()
        first = ex.definitions()[0].description
        scope = ex.thread_scope(ThreadKey("#t", "T1"))
        assert json.loads(await run(scope, CALL)) == ["invoice-4", "pending", "owner4"]
        sketch = (
            '{"id": str, "name": str, "status": str, "region": str, '
            '"owner": {"name": str, "email": str}, "tags": [str]}'
        )
        catalog = ex.channel_catalog("#t")
        stub = catalog.entries["get_invoice"].stub() if catalog else ""
        assert f"Returns (observed): {sketch}" in stub
        learned = scope.definitions()[0].description
        # the shape is #t's: another channel, and a call outside any thread, are not shown it
        assert ex.channel_definitions("#u")[0].description == first
        assert ex.definitions()[0].description == first
        assert learned == first.replace(
            'async def get_invoice(*, id: str) -> Any:\n    """Get one invoice',
            'async def get_invoice(*, id: str) -> dict[str, Any]:\n    """\n    Get one invoice',
        ).replace(
            '(e.g. \'invoice-3\')."""',
            f'(e.g. \'invoice-3\').\n    Returns (observed): {sketch}\n    """',
        )
        assert ex.context_note(ThreadKey("#t", "T1")) == (
            f"[run_code: the result shape of get_invoice (it declares none) was learned: "
            f"Returns (observed): {sketch}]\n[run_code variables still in scope: inv: dict[6]]"
        )
        rows = await store.shapes.load_shapes()
        assert [(r.channel, r.server, r.tool, r.server_version) for r in rows] == [
            ("#t", "cat", "get_invoice", "1.0")
        ]
        await ex.aclose()

        again = make(store=store, catalog_budget=100_000)
        await again.start()
        # byte for byte, after a restart, in #t (another thread of it too) and only there
        assert again.thread_scope(ThreadKey("#t", "T2")).definitions()[0].description == learned
        assert again.channel_definitions("#u")[0].description == first

        upgraded = make("--version", "2.0", store=store, catalog_budget=100_000)
        await upgraded.start()
        upgraded_scope = upgraded.thread_scope(ThreadKey("#t", "T1"))
        assert upgraded_scope.definitions()[0].description == first  # not this version's shape
        await run(upgraded_scope, 'await get_invoice(id="invoice-1")')
        rows = await store.shapes.load_shapes()
        assert [(r.tool, r.server_version) for r in rows] == [("get_invoice", "2.0")]


async def test_a_result_that_no_longer_fits_refreshes_the_shape(make, tmp_path: Path) -> None:
    """The server changes what it returns (same version): the shape is merged, said once."""
    async with Store(tmp_path / "a.db") as store:
        ex = make(store=store)
        await run(ex.thread_scope(ThreadKey("#t", "T1")), 'await get_ticket(id="ticket-1")')
        await ex.aclose()
        wide = make("--shape", "wide", store=store)
        scope = wide.thread_scope(ThreadKey("#t", "T1"))
        await run(scope, 'await get_ticket(id="ticket-2")')
        note = wide.context_note(ThreadKey("#t", "T1")) or ""
        assert note.startswith(
            "[run_code: the result shape of get_ticket (it declares none) changed; its stub now "
            'says Returns (observed): {"id": str, "name": str, "status": str, "region": str, '
            '"owner": {"name": str, "email": str}, "tags": [str], "revision": int}]'
        )
        await run(scope, 'await get_ticket(id="ticket-3")')  # fits the merged shape now
        assert wide.context_note(ThreadKey("#t", "T1")) is None
        (row,) = await store.shapes.load_shapes()
        assert json.loads(row.shape)["required"] == ["id", "name", "status", "region", "tags"]


async def test_a_declared_output_schema_always_wins(make, tmp_path: Path) -> None:
    """get_server declares its result: nothing is learned, its stub keeps ``Returns:``."""
    async with Store(tmp_path / "a.db") as store:
        ex = make(store=store)
        await run(ex, 'await get_server(id="s1")')
        assert await store.shapes.load_shapes() == []
        assert ex.catalog is not None
        stub = ex.catalog.entries["get_server"].stub()
        assert 'Returns: {"id": str, "hostname": str, "region": str, "up": bool}' in stub
        definition = ex.catalog.entries["get_server"].definition
        assert (definition.server, definition.server_version) == ("cat", "1.0")
