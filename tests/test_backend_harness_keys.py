"""The harness's reading of what a failed snippet's values really are, against the
scripted model and real code mode: a key read one path off is read where the look
found it and the snippet runs again with no model round (``key_fix``); a result's
``.items()`` gets a hint that names what the value is (``value_hint``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.model.harness import MAX_KEY_FIXES
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


DOWN = (
    "s = await fetch(url='/status')\n"
    "down = [c['name'] for c in s['components'] if c['status'] == 'down']\ndown"
)


async def test_a_key_one_path_off_is_read_where_it_is_without_a_model_round(code_mode):
    """``s['components']`` of a result that holds it at ``s['json']['components']``: the
    harness runs the snippet again with the path the look found, and the model's next
    request is the answer, with the right result; the transcript holds both runs."""
    ex, inner = code_mode
    fake, (result,) = await run_script(ex, [block(DOWN), "cache and search are down."], request())
    assert len(fake.requests) == 2  # the block, then the answer: no round for the fix
    answer = fake.requests[1]["messages"][-1]["content"]
    assert "cache" in answer
    assert "search" in answer
    assert "KeyError" not in answer
    assert result.reply == "cache and search are down."
    assert result.metrics.key_fixes == 1
    assert result.metrics.run_code_calls == 2
    assert result.metrics.harness_gave_up is False
    assert inner.calls_to("fetch") == [{"url": "/status"}] * 2
    codes = ran_codes(result)
    assert codes[0] == DOWN
    assert "s['json']['components']" in codes[1]


async def test_a_snippet_naming_a_mutating_function_is_never_run_again(code_mode):
    """The same misread key in a snippet that calls a mutating tool: no rerun (it would
    repeat the side effect); the model gets the hint with the path and writes the fix."""
    ex, inner = code_mode
    bad = DOWN.replace("fetch(url=", "restart(url=")
    good = "[c['name'] for c in s['json']['components'] if c['status'] == 'down']"
    script = [block(bad), block(good), "cache and search are down."]
    fake, (result,) = await run_script(ex, script, request())
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "it is at s['json']['components']" in retry
    assert result.metrics.key_fixes == 0
    assert len(inner.calls_to("restart")) == 1


async def test_a_rerun_that_fails_again_is_a_failure_and_fixes_are_bounded(code_mode):
    """A fixed snippet that fails on the next misread key is fixed again, up to
    MAX_KEY_FIXES a run; after that the model is asked for a new block, with the hint."""
    ex, _ = code_mode
    keys = ["components", "version", "healthy"]
    code = "s = await fetch(url='/status')\n" + "\n".join(f"x = s['{k}']" for k in keys)
    script = [block(code), block("s['json']['version']"), "2.7.1."]
    fake, (result,) = await run_script(ex, script, request())
    assert MAX_KEY_FIXES == 2
    assert result.metrics.key_fixes == 2
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "KeyError: healthy" in retry
    assert "it is at s['json']['healthy']" in retry
    assert result.reply == "2.7.1."


async def test_dict_items_of_a_list_result_is_told_where_the_list_is(code_mode):
    """``pods.items()`` of a result holding its list at ``pods['items']``: the dict
    method's pairs were indexed as pods; the hint says so, not "parse the text"."""
    ex, _ = code_mode
    bad = "pods = await list_pods()\nmax(pods.items(), key=lambda kv: kv[1]['restarts'])"
    script = [block(bad), block("max(items(pods), key=lambda p: p['restarts'])"), "web-1."]
    fake, _ = await run_script(ex, script, request())
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "Hint: pods.items() is the dict method" in retry
    assert "The list is pods['items']" in retry
    assert "Parse the text first" not in retry


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
