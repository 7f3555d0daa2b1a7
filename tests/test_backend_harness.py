"""The backend's small-model harness, against the scripted model and real code mode.

Each test replays what Qwen2.5-Coder-1.5B really did on llama-cpp-python
(notes/local-model.md, issue 9) and checks the harness's answer to it: the
forced first call, the catalog and example in the system message, broken
arguments and code mended, printed output as the result, another forced try
after a failure, and an answer round after the first good result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.backend import FINAL_ROUND_PROMPT, OpenAiCompatibleBackend
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.harness import HARNESS_RULES, SHORT_RUN_CODE_DESCRIPTION, WORKED_EXAMPLE
from daemon.runs import Prompt, RunRequest
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI, ToolCalls

LOCAL = "qwen-coder-1.5b"  # the embedded model's name: the harness is on by default
FORCED = {"type": "function", "function": {"name": "run_code"}}
PODS = [
    {"metadata": {"name": f"pod-{i}"}, "status": {"phase": "Failed" if i % 4 == 0 else "Running"}}
    for i in range(12)
]
FAILED = ["pod-0", "pod-4", "pod-8"]
QUESTION = "which pods are failing?"


def inner_tools() -> FakeToolExecutor:
    """One read-only list tool."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_pods(*, namespace: str) -> list:
        """List the pods of a namespace."""
        return PODS

    return fake


@pytest.fixture
async def code_mode(
    monty_pool: Any,
) -> AsyncIterator[tuple[CodeModeToolExecutor, FakeToolExecutor]]:
    """Code mode over the fake tool on the shared pool."""
    inner = inner_tools()
    limits = CodeModeLimits(max_feed_duration=5.0, max_wall=30.0, tool_timeout=10.0)
    ex = CodeModeToolExecutor(inner, limits, pool=monty_pool)
    try:
        yield ex, inner
    finally:
        await ex.aclose()


def request(text: str = QUESTION, thread: str = "T1", run: str = "R1") -> RunRequest:
    """One prompt in ``thread``."""
    return RunRequest(run, "#ops", thread, [], [Prompt("m1", "alice", text)])


async def run_script(
    executor: Any, script: list, *requests: RunRequest, **params: Any
) -> tuple[FakeOpenAI, list]:
    """Serve ``script``; run ``requests`` in turn with ``params`` over ModelConfig's defaults."""
    async with FakeOpenAI(script) as fake:
        config = ModelConfig(base_url=fake.base_url, api_key="k", **{"model": LOCAL, **params})
        backend = OpenAiCompatibleBackend(config, executor)
        try:
            results = [await backend.run(r) for r in requests]
        finally:
            await backend.aclose()
    return fake, results


def tool_message(body: dict) -> dict:
    """The last tool message of a request."""
    return next(m for m in reversed(body["messages"]) if m["role"] == "tool")


async def test_local_model_gets_forced_run_code_and_the_catalog_in_the_system_message(code_mode):
    """For the embedded model: the first request forces run_code, the system message holds
    the catalog stub and the worked example, the tool carries a short description, and the
    system message is byte-identical from run to run (the server's prefix cache)."""
    ex, _ = code_mode
    code = f"pods = await list_pods(namespace='prod')\n{_failed_expr()}"
    script = [ToolCalls(("run_code", {"code": code})), "pod-0, pod-4 and pod-8 are failing."] * 2
    fake, _ = await run_script(ex, script, request(), request(run="R2", thread="T2"))
    first = fake.requests[0]
    assert first["tool_choice"] == FORCED
    system = first["messages"][0]["content"]
    assert "async def list_pods(*, namespace: str)" in system
    assert WORKED_EXAMPLE in system
    assert HARNESS_RULES in system
    assert "Return contract:" not in system  # the long sandbox rules stay out
    assert [t["function"]["description"] for t in first["tools"]] == [SHORT_RUN_CODE_DESCRIPTION]
    assert fake.requests[2]["messages"][0]["content"] == system


async def test_other_models_are_left_alone_unless_asked(code_mode):
    """Another model name gets no forcing and the usual prompt; harness=false turns it off for
    the local model, harness=true turns it on for any model."""
    ex, _ = code_mode
    fake, _ = await run_script(ex, ["hi"], request(), model="gpt-4o")
    assert "tool_choice" not in fake.requests[0]
    assert "async def list_pods" not in fake.requests[0]["messages"][0]["content"]
    fake, _ = await run_script(ex, ["hi"], request(), harness=False)
    assert "tool_choice" not in fake.requests[0]
    fake, _ = await run_script(ex, ["hi"], request(), model="gpt-4o", harness=True)
    assert fake.requests[0]["tool_choice"] == FORCED


def _failed_expr() -> str:
    return "[p['metadata']['name'] for p in pods if p['status']['phase'] == 'Failed']"


async def test_a_good_result_gets_an_answer_round_with_the_question(code_mode):
    """After a good result the next request withdraws the tools and asks for an answer to
    the question, in words; that answer is the reply, and not a forced final round."""
    ex, _ = code_mode
    code = f"pods = await list_pods(namespace='prod')\n{_failed_expr()}"
    script = [ToolCalls(("run_code", {"code": code})), "pod-0, pod-4 and pod-8 are failing."]
    fake, (result,) = await run_script(ex, script, request())
    assert json.loads(tool_message(fake.requests[1])["content"]) == FAILED
    second = fake.requests[1]
    assert "tools" not in second
    assert "tool_choice" not in second
    instruction = second["messages"][-1]
    assert instruction["role"] == "user"
    assert QUESTION in instruction["content"]
    assert "Do not write code" in instruction["content"]
    assert result.reply == "pod-0, pod-4 and pod-8 are failing."
    assert (result.metrics.rounds, result.metrics.final_round_forced) == (2, False)
    # the instruction is harness text: the records hold the prompt, call, result, answer
    assert [r.type for r in result.records] == ["user", "assistant", "user", "assistant"]


async def test_broken_arguments_json_is_recovered_and_replayed_valid(code_mode):
    """Raw newlines and unescaped quotes in the arguments (as llama.cpp's grammar lets
    through) still run; the record and the replayed call carry valid JSON of what ran."""
    ex, inner = code_mode
    raw = (
        '{"code": "pods = await list_pods(namespace="prod")\n'
        '[p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Failed"]"}'
    )
    script = [ToolCalls(("run_code", raw)), "Three pods are failing."]
    fake, (result,) = await run_script(ex, script, request())
    assert json.loads(tool_message(fake.requests[1])["content"]) == FAILED
    assert inner.calls == [("list_pods", {"namespace": "prod"})]
    replayed = fake.requests[1]["messages"][-3]["tool_calls"][0]["function"]["arguments"]
    code = json.loads(replayed)["code"]
    assert code.startswith('pods = await list_pods(namespace="prod")\n')
    assert result.records[1].message["content"][0]["input"] == {"code": code}
    assert result.metrics.extra["harness_repairs"] == 1


async def test_code_repairs_await_precedence_and_a_trailing_assignment(code_mode):
    """`await f()[...]` awaits the call, and a snippet ending in an assignment returns the
    assigned value, so one forced call is enough."""
    ex, _ = code_mode
    code = f"pods = await list_pods(namespace='prod')[0:12]\nfailed = {_failed_expr()}"
    script = [ToolCalls(("run_code", {"code": code})), "Three."]
    fake, (result,) = await run_script(ex, script, request())
    assert json.loads(tool_message(fake.requests[1])["content"]) == FAILED
    assert result.metrics.extra["harness_repairs"] == 2
    assert result.metrics.run_code_calls == 1


async def test_printed_output_is_the_result(code_mode):
    """A snippet that ends on print() hands the model the printed text, not a JSON wrapper."""
    ex, _ = code_mode
    code = "pods = await list_pods(namespace='prod')\nprint(len(pods))"
    fake, _ = await run_script(ex, [ToolCalls(("run_code", {"code": code})), "12 pods."], request())
    assert tool_message(fake.requests[1])["content"] == "12"


async def test_a_failed_snippet_gets_another_forced_try(code_mode):
    """An error result (or no output) is followed by another forced run_code round; the
    first good result then gets the answer round."""
    ex, _ = code_mode
    script = [
        ToolCalls(("run_code", {"code": "pods = await list_pods()"})),  # TypeError: namespace
        ToolCalls(("run_code", {"code": "print()"})),  # prints nothing, returns None
        ToolCalls(
            ("run_code", {"code": f"pods = await list_pods(namespace='p')\n{_failed_expr()}"})
        ),
        "pod-0, pod-4 and pod-8.",
    ]
    fake, (result,) = await run_script(ex, script, request())
    assert [r.get("tool_choice") for r in fake.requests] == [FORCED, FORCED, FORCED, None]
    # retries bring a little randomness: at temperature 0 the same snippet comes back
    assert [r.get("temperature") for r in fake.requests] == [None, 0.7, 0.7, None]
    assert tool_message(fake.requests[1])["content"].startswith("Traceback")
    assert "tools" not in fake.requests[3]
    assert result.reply == "pod-0, pod-4 and pod-8."
    assert result.metrics.run_code_calls == 3


async def test_a_reply_that_restates_code_is_replaced_by_the_result(code_mode):
    """If the answer round brings only a code block, the run_code result is the reply."""
    ex, _ = code_mode
    code = f"pods = await list_pods(namespace='prod')\n{_failed_expr()}"
    script = [ToolCalls(("run_code", {"code": code})), "```python\n" + code + "\n```"]
    _, (result,) = await run_script(ex, script, request())
    assert result.reply == 'The result of run_code: ["pod-0","pod-4","pod-8"]'
    assert result.metrics.extra["reply_from_result"] is True


async def test_the_round_limit_still_ends_with_the_harness_instruction(code_mode):
    """With every try failing, the last round withdraws the tools with the question asked
    again, and counts as a forced final round."""
    ex, _ = code_mode
    bad = ToolCalls(("run_code", {"code": "1/0"}))
    fake, (result,) = await run_script(
        ex, [bad, bad, "I could not find out."], request(), max_rounds=3
    )
    assert [r.get("tool_choice") for r in fake.requests] == [FORCED, FORCED, None]
    assert QUESTION in fake.requests[2]["messages"][-1]["content"]
    assert result.metrics.final_round_forced is True


async def test_direct_mode_keeps_its_tools_and_gets_only_the_final_instruction():
    """In direct mode the harness forces nothing (several tools), and its final round asks
    for an answer from the tool results with the question repeated."""
    inner = inner_tools()
    script = [ToolCalls(("list_pods", {"namespace": "prod"})), "Three pods fail."]
    fake, (result,) = await run_script(inner, script, request(), tool_mode="direct", max_rounds=2)
    assert "tool_choice" not in fake.requests[0]
    final = fake.requests[1]["messages"][-1]["content"]
    assert "the tool results above" in final
    assert QUESTION in final
    assert final != FINAL_ROUND_PROMPT
    assert result.reply == "Three pods fail."


async def test_direct_mode_runs_tool_calls_the_model_wrote_as_text():
    """llama-cpp-python leaves Qwen's text tool calls in the content; the harness runs
    them as calls (with made-up ids) and replays the turn as a real tool call."""
    inner = inner_tools()
    text = '```json\n{"name": "list_pods", "arguments": {"namespace": "prod"}}\n```'
    script = [text, "Three pods fail."]
    fake, (result,) = await run_script(inner, script, request(), tool_mode="direct", harness=True)
    assert inner.calls == [("list_pods", {"namespace": "prod"})]
    replay = next(m for m in fake.requests[1]["messages"] if m["role"] == "assistant")
    assert replay["content"] == ""
    assert replay["tool_calls"][0]["function"]["name"] == "list_pods"
    assert json.loads(tool_message(fake.requests[1])["content"])[0]["metadata"]["name"] == "pod-0"
    assert result.reply == "Three pods fail."
    assert result.metrics.extra["text_tool_calls"] == 1
    # without the harness the same text is the reply
    _, (plain,) = await run_script(
        inner_tools(), [text], request(), tool_mode="direct", harness=False
    )
    assert plain.reply == text


async def test_after_three_failed_snippets_the_model_answers(code_mode):
    """Three failures in a row end the tries: the next round asks for an answer (which may
    say what went wrong), well before the round limit; a JavaScript snippet's SyntaxError
    carries a hint to write Python."""
    ex, _ = code_mode
    js = ToolCalls(("run_code", {"code": "let n = 1; let m = n + 1;"}))
    script = [js, js, js, "I could not find out: my code was not valid Python."]
    fake, (result,) = await run_script(ex, script, request())
    assert len(fake.requests) == 4
    assert "JavaScript" in tool_message(fake.requests[1])["content"]
    assert "tools" not in fake.requests[3]
    assert QUESTION in fake.requests[3]["messages"][-1]["content"]
    assert result.reply.startswith("I could not find out")
    assert result.metrics.extra["harness_gave_up"] is True
