"""What a 40-tool catalog costs the model, with and without ``code_mode.catalog_budget`` (issue 19).

Run: ``.venv/bin/python bench/catalog.py``

The 40 tools are the real stdio MCP server ``tests/fakes/mcp_catalog_server.py``
behind the real code-mode executor (Monty pool); the model is the scripted
OpenAI-compatible server ``tests/fakes/fake_openai.py``. One question ("is
invoice-4 paid?") is answered two ways:

- **stubs** (``catalog_budget`` high enough for every stub): the description
  holds all 40 stubs; the model calls ``get_invoice`` at once (1 ``run_code``);
- **budget** (the default, 6 000 characters): the description lists names;
  the model runs ``search_tools`` + ``describe``, then calls (2 ``run_code``).

It prints, per mode: the system prompt and the ``run_code`` tool as the plain
loop sends them (bytes of the system message and of the ``tools`` JSON), the
small-model harness's system message (it carries the catalog itself), and per
run the bytes of every request body the model received (the prefix is sent
again each round) and of the tool results it read. Ratios are budget / stubs.
Sizes are exact; the run also shows that the budgeted model finds, describes
and calls the tool.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.mcp.executor import McpToolExecutor
from daemon.model import OpenAiCompatibleBackend
from daemon.model.harness import HARNESS_SYSTEM_PROMPT, compact_description
from daemon.model.harness.prompts import system_prompt
from daemon.model.prompts import CODE_MODE_SYSTEM_PROMPT
from daemon.runtime.runs import Prompt, RunRequest
from tests.fakes.fake_openai import FakeOpenAI, ToolCalls

SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_catalog_server.py")
FIND = 'found = search_tools("invoice paid")\nprint(describe(found[0]))\nfound'
CALL = 'inv = await get_invoice(id="invoice-4")\n[inv["id"], inv["status"]]'
ANSWER = "invoice-4 is pending, not paid."


async def measure(budget: int) -> dict[str, Any]:
    """Sizes of one mode (``budget``: the catalog_budget)."""
    mcp = McpToolExecutor({"cat": {"command": sys.executable, "args": [SERVER]}})
    ex = CodeModeToolExecutor(mcp, CodeModeLimits(catalog_budget=budget))
    try:
        await ex.start()
        assert ex.catalog is not None
        searchable = ex.catalog.searchable
        steps: list[Any] = [ToolCalls(("run_code", {"code": FIND}))] if searchable else []
        steps += [ToolCalls(("run_code", {"code": CALL})), ANSWER]
        async with FakeOpenAI(steps) as fake:
            params = ModelConfig(base_url=fake.base_url, api_key="k", model="fake-model")
            backend = OpenAiCompatibleBackend(params, ex)
            try:
                prompt = Prompt("m1", "alice", "is invoice-4 paid?")
                result = await backend.run(RunRequest("R1", "#bench", "T1", [], [prompt]))
            finally:
                await backend.aclose()
        assert result.reply == ANSWER
        tools = fake.requests[0]["tools"]
        results = [m["content"] for m in fake.requests[-1]["messages"] if m.get("role") == "tool"]
        assert "pending" in results[-1], results
        if searchable:
            assert "async def get_invoice" in results[0]  # describe() showed the stub
        harness = system_prompt(HARNESS_SYSTEM_PROMPT, compact_description(ex.catalog))
        return {
            "mode": f"budget {budget:,}" if searchable else "stubs",
            "stubs": len(ex.catalog.render()),
            "system": len(CODE_MODE_SYSTEM_PROMPT.encode()),
            "tools": len(json.dumps(tools).encode()),
            "harness": len(harness.encode()),
            "rounds": len(fake.requests),
            "requests": sum(len(json.dumps(r).encode()) for r in fake.requests),
            "results": sum(len(r.encode()) for r in results),
        }
    finally:
        await ex.aclose()


def table(full: dict[str, Any], cut: dict[str, Any]) -> str:
    """The markdown table, with budget / stubs ratios."""
    rows = [
        ("rendered stubs (characters)", "stubs"),
        ("system message, plain loop (bytes)", "system"),
        ("`tools` with run_code's description (bytes)", "tools"),
        ("system message, small-model harness (bytes)", "harness"),
        ("model requests in the run", "rounds"),
        ("request bytes the model received in the run", "requests"),
        ("tool-result bytes the model read", "results"),
    ]
    out = [
        f"| 40 tools | {full['mode']} | {cut['mode']} | ratio |",
        "|---|---|---|---|",
    ]
    for label, key in rows:
        a, b = full[key], cut[key]
        ratio = f"{b / a:.2f}×" if a else "-"
        out.append(f"| {label} | {a:,} | {b:,} | {ratio} |")
    return "\n".join(out)


async def main() -> None:
    """Both modes, one after the other, then the table."""
    full = await measure(1_000_000)
    cut = await measure(CodeModeLimits().catalog_budget)
    today = datetime.date.today().isoformat()
    print(f"bench/catalog.py, {today}: one question over the 40-tool catalog\n")
    print(table(full, cut))


if __name__ == "__main__":
    asyncio.run(main())
