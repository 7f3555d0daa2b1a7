"""The harness's reading of what a failed snippet's values really are, against the
scripted model and real code mode: the reruns of a fixed snippet (``loop_fix``) never
repeat a side effect and are bounded; a question about a fetched URL keeps its data.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.model.harness import MAX_RERUNS
from tests.fakes.executor import FakeToolExecutor, code_mode_over
from tests.test_backend_harness import block, request, run_script

STATUS = {
    "status": 200,
    "json": {
        "version": "2.7.1",
        "healthy": False,
        "components": [
            {"name": "db", "status": "up"},
            {"name": "cache", "status": "down"},
            {"name": "search", "status": "down"},
        ],
    },
}
PODS = {"kind": "List", "items": [{"metadata": {"name": "web-1"}, "restarts": 3}]}


def tools() -> FakeToolExecutor:
    """Read-only tools with the shapes of an HTTP response and a kubernetes list, and a
    mutating one."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def fetch(*, url: str) -> dict:
        """Fetch a URL: status, body text, and json when the body is JSON."""
        return {"/status": STATUS}[url]

    @fake.tool(read_only=True)
    async def list_pods() -> dict:
        """List the pods."""
        return PODS

    @fake.tool(read_only=False, destructive=True)
    async def restart(*, url: str) -> dict:
        """Restart a service and fetch its status."""
        return STATUS

    return fake


@pytest.fixture
async def code_mode(monty_pool: Any) -> AsyncIterator[tuple[CodeModeToolExecutor, Any]]:
    """Code mode over the tools on the shared pool."""
    inner = tools()
    async with code_mode_over(inner, monty_pool) as ex:
        yield ex, inner


def ran_codes(result: Any) -> list[str]:
    """The code of every run_code call in a run's transcript, in order."""
    return [
        b["input"]["code"]
        for r in result.records
        if r.type == "assistant"
        for b in r.message["content"]
        if b.get("type") == "tool_use"
    ]


async def test_a_snippet_naming_a_mutating_function_is_never_run_again(code_mode):
    """A loop over a list result's dict (the loop fix's case) in a snippet that also calls
    a mutating tool: no rerun (it would repeat the side effect); the model is asked for
    a new block."""
    ex, inner = code_mode
    bad = (
        "pods = await list_pods()\nr = await restart(url='/status')\n[p['restarts'] for p in pods]"
    )
    script = [block(bad), block("[p['restarts'] for p in items(pods)]"), "3 restarts."]
    fake, (result,) = await run_script(ex, script, request())
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "string indices must be integers" in retry
    assert result.metrics.key_fixes == 0
    assert len(inner.calls_to("restart")) == 1
    assert result.reply == "3 restarts."


async def test_a_rerun_that_fails_again_is_a_failure_and_reruns_are_bounded(code_mode):
    """A fixed snippet that fails on the next loop over a dict is fixed again, up to
    MAX_RERUNS a run; after that the model is asked for a new block."""
    ex, _ = code_mode
    reads = {"a": "p['restarts']", "b": "p.get('restarts')", "c": "p['restarts']"}
    code = "\n".join(
        f"{v} = await list_pods()\nn_{v} = [{read} for p in {v}]" for v, read in reads.items()
    )
    script = [block(code), block("sum(p['restarts'] for p in items(c))"), "3."]
    fake, (result,) = await run_script(ex, script, request())
    assert MAX_RERUNS == 2
    assert result.metrics.key_fixes == 2
    assert len(fake.requests) == 3  # the block, the retry after the third failure, the answer
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "string indices must be integers" in retry  # c's, after two reruns
    codes = ran_codes(result)
    assert "for p in a['items']" in codes[1]
    assert "for p in b['items']" in codes[2]
    assert "for p in c['items']" not in codes[2]
    assert result.reply == "3."


async def test_a_question_about_a_fetched_url_gets_no_other_function_as_its_topic(code_mode):
    """The question names a URL, and its words ("service", "restart") match another
    function's stub better than the fetch's: once the snippet fetched the URL, the retry
    is about that URL's data: it shows the data and names no other function."""
    ex, _ = code_mode
    question = "Which service must restart, by the report at http://127.0.0.1:9/status?"
    bad = "s = await fetch(url='/status')\nlen(s['pods'])"
    script = [block(bad), block("len(s['json']['components'])"), "3."]
    fake, _ = await run_script(ex, script, request(question))
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "KeyError: pods" in retry
    assert "What your variables hold now" in retry
    assert "restart(" not in retry
    assert "Hint: my question is about" not in retry
