"""The backend's small-model harness, against the scripted model and real code mode.

Each test replays what Qwen2.5-Coder-1.5B really did on llama-cpp-python
(notes/local-model.md, issue 9, ``python -m bench.questions``) and checks the harness's
answer to it: the code-block protocol (a fenced python block runs as
run_code), the catalog and example in the system message, broken arguments
and code mended, printed output as the result, a warmer retry after a
failure, and an answer request that carries the result and the question.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.model import OpenAiCompatibleBackend
from daemon.model.conversation import LoopState
from daemon.model.harness import (
    CODE_STOP,
    HARNESS_RULES,
    MAX_FAILED_SNIPPETS,
    RULES,
    TRIALS,
    WORKED_EXAMPLE,
    from_environ,
    noticing,
    reaching,
    retry_seed,
)
from daemon.model.harness.feedback import short_reply
from daemon.model.prompts import FINAL_ROUND_PROMPT
from daemon.model.records import RunState
from daemon.runtime.runs import Prompt, RunRequest
from tests.fakes.executor import FakeToolExecutor, code_mode_over
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls

LOCAL = "qwen-coder-1.5b"  # the embedded model's name: the harness is on by default
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
    async with code_mode_over(inner, monty_pool) as ex:
        yield ex, inner


def request(text: str = QUESTION, thread: str = "T1", run: str = "R1") -> RunRequest:
    """One prompt in ``thread``."""
    return RunRequest(run, "#ops", thread, [], [Prompt("m1", "alice", text)])


def rules_off(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Switch the harness rules ``names`` off for one test (``ASYNCAI_HARNESS_OFF``, read
    where the backend builds its profile): a test of another mechanism, scripted for the
    one-snippet flow that those rules change, keeps testing its own mechanism."""
    monkeypatch.setenv("ASYNCAI_HARNESS_OFF", ",".join(names))


async def run_script(
    executor: Any, script: list, *requests: RunRequest, **params: Any
) -> tuple[FakeOpenAI, list]:
    """Serve ``script``; run ``requests`` in turn with ``params`` over ModelConfig's defaults
    (one sample per answer, so that a script lists every request; the vote has its tests)."""
    async with FakeOpenAI(script) as fake:
        params = {"model": LOCAL, "answer_samples": 1, **params}
        config = ModelConfig(base_url=fake.base_url, api_key="k", **params)
        backend = OpenAiCompatibleBackend(config, executor)
        try:
            results = [await backend.run(r) for r in requests]
        finally:
            await backend.aclose()
    return fake, results


def tool_message(body: dict) -> dict:
    """The last tool message of a request (direct mode)."""
    return next(m for m in reversed(body["messages"]) if m["role"] == "tool")


def block(code: str) -> Reply:
    """The model's reply: one fenced python block (cut at the stop sequence, as llama.cpp
    does: the closing fence never arrives)."""
    return Reply(f"I will list them.\n```python\n{code}")


FILTER = "pods = await list_pods(namespace='prod')\n" + (
    "[p['metadata']['name'] for p in items(pods) if p['status']['phase'] == 'Failed']"
)


async def test_code_block_protocol_for_the_local_model(code_mode):
    """For the embedded model: no tools in the request but a stop after the code block,
    the catalog stub, short rules and the worked example in a system message that stays
    byte-identical from run to run; the fenced block runs as run_code, and the result
    comes back in a user message with the question, which the answer then answers."""
    ex, inner = code_mode
    script = [block(FILTER), "pod-0, pod-4 and pod-8 are failing."] * 2
    fake, (result, _) = await run_script(ex, script, request(), request(run="R2", thread="T2"))
    first, second, again, _ = fake.requests
    assert "tools" not in first
    assert "tool_choice" not in first
    assert first["stop"] == [CODE_STOP]
    system = first["messages"][0]["content"]
    assert "async def list_pods(*, namespace: str)" in system
    assert system.endswith(WORKED_EXAMPLE)
    assert HARNESS_RULES in system
    assert "Return contract:" not in system  # the long sandbox text stays out
    # list_pods declares no output schema: the first run taught its shape, which its
    # stub shows from then on (issue 19); the rest of the system message is the same
    before = (
        'async def list_pods(*, namespace: str) -> Any:\n    """List the pods of a namespace."""'
    )
    after = (
        "async def list_pods(*, namespace: str) -> list[dict[str, Any]]:\n"
        '    """\n    List the pods of a namespace.\n'
        '    Returns (observed): [{"metadata": {"name": str}, "status": {"phase": str}}]\n'
        '    """'
    )
    assert before in system
    assert again["messages"][0]["content"] == system.replace(before, after)
    assert inner.calls == [("list_pods", {"namespace": "prod"})] * 2
    # the answer request carries the snippet's result and the question, and no stop
    assert second["messages"][-2] == {"role": "assistant", "content": f"```python\n{FILTER}\n```"}
    last = second["messages"][-1]
    assert last["role"] == "user"
    assert last["content"].startswith('The code returned:\n["pod-0","pod-4","pod-8"]')
    assert QUESTION in last["content"]
    assert "Do not write code" in last["content"]
    assert "stop" not in second
    assert result.reply == "pod-0, pod-4 and pod-8 are failing."
    m = result.metrics
    assert (m.rounds, m.run_code_calls, m.final_round_forced) == (2, 1, False)
    assert m.code_blocks == 1
    assert m.peeks == 0  # nothing failed: no look
    # records: the prompt, the call as tool_use with its tool_result, the answer
    assert [r.type for r in result.records] == ["user", "assistant", "user", "assistant"]
    use = result.records[1].message["content"][0]
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "run_code", {"code": FILTER})


async def test_other_models_are_left_alone_unless_asked(code_mode):
    """Another model name gets the plain loop (run_code offered as a tool); harness=false
    turns the harness off for the local model, harness=true on for any model."""
    ex, _ = code_mode
    fake, _ = await run_script(ex, ["hi"], request(), model="gpt-4o")
    assert [t["function"]["name"] for t in fake.requests[0]["tools"]] == ["run_code"]
    assert "async def list_pods" not in fake.requests[0]["messages"][0]["content"]
    fake, _ = await run_script(ex, ["hi"], request(), harness=False)
    assert "tools" in fake.requests[0]
    fake, (result,) = await run_script(ex, ["Hello!"], request(), model="gpt-4o", harness=True)
    assert "tools" not in fake.requests[0]
    assert fake.requests[0]["stop"] == [CODE_STOP]
    assert result.reply == "Hello!"  # a reply without code is the answer


async def test_real_tool_calls_still_run_and_broken_json_is_recovered(code_mode, monkeypatch):
    """An endpoint that does return tool calls: raw newlines and unescaped quotes in the
    arguments still run; the record holds the recovered arguments."""
    ex, inner = code_mode
    raw = (
        '{"code": "pods = await list_pods(namespace="prod")\n'
        '[p["metadata"]["name"] for p in items(pods) if p["status"]["phase"] == "Failed"]"}'
    )
    script = [ToolCalls(("run_code", raw)), "Three pods are failing."]
    fake, (result,) = await run_script(ex, script, request())
    assert fake.requests[1]["messages"][-1]["content"].startswith(
        'The code returned:\n["pod-0","pod-4","pod-8"]'
    )
    assert inner.calls == [("list_pods", {"namespace": "prod"})]
    code = result.records[1].message["content"][0]["input"]["code"]
    assert code.startswith('pods = await list_pods(namespace="prod")\n')
    assert result.metrics.harness_repairs == 1


async def test_a_run_code_call_written_as_text_runs(code_mode):
    """Qwen's own <tool_call> text, which llama-cpp-python leaves in the content, runs."""
    ex, inner = code_mode
    text = "<tool_call>\n" + json.dumps({"name": "run_code", "arguments": {"code": FILTER}})
    _, (result,) = await run_script(ex, [Reply(text + "\n</tool_call>"), "Three."], request())
    assert inner.calls == [("list_pods", {"namespace": "prod"})]
    # the words left the names out: the value is quoted after them
    assert result.reply == "Three.\n\nThe result of run_code: pod-0, pod-4, pod-8"


async def test_a_trailing_assignment_is_the_result(code_mode, monkeypatch):
    """A snippet ending in an assignment returns the assigned value, so one snippet is
    enough; the record shows the code that ran."""
    ex, _ = code_mode
    code = (
        "pods = await list_pods(namespace='prod')\n"
        "failed = [p['metadata']['name'] for p in pods if p['status']['phase'] == 'Failed']"
    )
    fake, (result,) = await run_script(ex, [block(code), "Three."], request())
    assert fake.requests[1]["messages"][-1]["content"].startswith(
        'The code returned:\n["pod-0","pod-4","pod-8"]'
    )
    assert result.metrics.harness_repairs == 1
    ran = result.records[1].message["content"][0]["input"]["code"]
    assert ran == f"{code}\nfailed"


async def test_printed_output_is_shown_as_run_code_returned_it(code_mode, monkeypatch):
    """A snippet that ends on print() hands the model run_code's result as the return
    contract wrote it, the printed text under "output" (prints-as-result was removed)."""
    ex, _ = code_mode
    code = "pods = await list_pods(namespace='prod')\nprint(len(pods))"
    fake, _ = await run_script(ex, [block(code), "12 pods."], request())
    shown = fake.requests[1]["messages"][-1]["content"]
    assert shown.startswith('The code returned:\n{"output":"12\\n"}\n\n')


async def test_a_failed_snippet_is_retried_warmer(code_mode, monkeypatch):
    """An error (or nothing shown) asks for a corrected block, at a higher temperature; the
    first good result then gets the answer request."""
    ex, _ = code_mode
    script = [
        block("pods = await list_pods()"),  # TypeError: namespace is required
        block("None"),  # shows nothing
        block(FILTER),
        "pod-0, pod-4 and pod-8.",
    ]
    fake, (result,) = await run_script(ex, script, request())
    # greedy when no temperature is configured (a server's default would be random)
    assert [r.get("temperature") for r in fake.requests] == [0.0, 0.7, 0.7, 0.0]
    # a retry is seeded by its own prompt: the same retry draws the same snippet
    seeds = [r.get("seed") for r in fake.requests]
    assert seeds[0] is None
    assert seeds[3] is None
    assert seeds[1:3] == [retry_seed(r["messages"]) for r in fake.requests[1:3]]
    assert seeds[1] != seeds[2]  # another failure, another prompt
    assert [r.get("stop") for r in fake.requests] == [[CODE_STOP]] * 3 + [None]
    retry = fake.requests[1]["messages"][-1]["content"]
    assert retry.startswith("Your last attempt failed:\nTraceback")
    assert "Write a new ```python block" in retry
    # the failed code is not replayed: a small model would send it again verbatim
    assert [m["role"] for m in fake.requests[1]["messages"]] == ["system", "user", "user"]
    assert QUESTION in retry
    assert fake.requests[3]["messages"][-1]["content"].startswith("The code returned:")
    assert result.reply == "pod-0, pod-4 and pod-8."
    assert result.metrics.run_code_calls == 3


async def test_a_reply_that_restates_code_still_carries_the_result(code_mode, monkeypatch):
    """If the answer is only a code block, the short result's values it leaves out are
    quoted after it (rule quote-result): the user still reads the answer."""
    ex, _ = code_mode
    script = [block(FILTER), f"```python\n{FILTER}\n```"]
    _, (result,) = await run_script(ex, script, request())
    assert result.reply.startswith("```python\n")
    assert result.reply.endswith("```\n\nThe result of run_code: pod-0, pod-4, pod-8")
    assert result.metrics.reply_from_result is False


async def test_a_reply_that_retells_the_worked_example_is_replaced_by_the_result(code_mode):
    """After an empty result, a reply that retells the worked example's closing sentence
    is no answer: the (empty) result is the reply."""
    ex, _ = code_mode
    empty = (
        "pods = await list_pods(namespace='prod')\n[p for p in pods if p['status']['phase'] == 'x']"
    )
    retold = (
        "The question names the store, and asks about pods: so the code lists the pods "
        "in namespace prod, passing the store as an argument."
    )
    _, (result,) = await run_script(ex, [block(empty), retold], request())
    assert (
        result.reply
        == "The result of run_code: (empty result: the last expression was an empty list)"
    )
    assert result.metrics.reply_from_result is True


async def test_after_the_last_failed_snippet_the_model_answers(code_mode, monkeypatch):
    """MAX_FAILED_SNIPPETS failures end the tries: the last result asks for an answer
    (which may say what went wrong)."""
    rules_off(monkeypatch, "failed-honest")  # on, the harness says why
    ex, _ = code_mode
    js = block("let n = 1; let m = n + 1;")
    answer = "I could not find out: my code was not valid Python."
    script = [js] * MAX_FAILED_SNIPPETS + [answer]
    fake, (result,) = await run_script(ex, script, request())
    assert len(fake.requests) == MAX_FAILED_SNIPPETS + 1
    answer_request = fake.requests[-1]
    assert "stop" not in answer_request
    assert answer_request["messages"][-1]["content"].startswith("The code failed:")
    assert "Answer my question now" in answer_request["messages"][-1]["content"]
    assert result.reply.startswith("I could not find out")
    assert result.metrics.harness_gave_up is True


async def test_the_same_error_twice_draws_a_third_snippet(code_mode):
    """Two snippets end with the same exception: a third is drawn as any retry (up to
    MAX_FAILED_SNIPPETS), shown the error as the first was (repeat-hint, a stronger
    hint the second time, was removed); all three failed, the run says so."""
    ex, _ = code_mode
    missing = block("import requests\nr = requests.get('http://h/x')\nr")
    fake, (result,) = await run_script(ex, [missing] * MAX_FAILED_SNIPPETS, request())
    assert len(fake.requests) == MAX_FAILED_SNIPPETS == 3
    second, third = (r["messages"][-1]["content"] for r in fake.requests[1:])
    assert "No module named 'requests'" in second
    assert "No module named 'requests'" in third
    assert "the same error as last time" not in second + third
    assert result.reply.startswith("I could not answer this:")
    assert result.metrics.harness_gave_up is True


async def test_the_round_limit_bounds_the_tries(code_mode, monkeypatch):
    """With max_rounds=3 the second failure already asks for the answer (the last round
    must be one)."""
    rules_off(monkeypatch, "failed-honest")  # the last round is the model's answer
    ex, _ = code_mode
    bad = block("1/0")
    fake, (result,) = await run_script(ex, [bad, bad, "No idea."], request(), max_rounds=3)
    assert len(fake.requests) == 3
    assert "Answer my question now" in fake.requests[2]["messages"][-1]["content"]
    assert result.reply == "No idea."


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
    assert result.metrics.text_tool_calls == 1
    # without the harness the same text is the reply
    _, (plain,) = await run_script(
        inner_tools(), [text], request(), tool_mode="direct", harness=False
    )
    assert plain.reply == text


async def test_a_failure_shows_what_the_variables_really_hold(code_mode):
    """A snippet that guessed a key: the retry request shows the fetched data's real shape
    (first item, keys and values) from the same REPL, so the model can fix the key."""
    ex, _ = code_mode
    guess = "pods = await list_pods(namespace='prod')\n[p['state'] for p in pods]"
    script = [block(guess), block(FILTER), "pod-0, pod-4 and pod-8."]
    fake, (result,) = await run_script(ex, script, request())
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "KeyError" in retry
    assert "What your variables hold now" in retry
    assert "len(pods) == 12\npods[0]['metadata']['name'] == 'pod-0'\n" in retry
    assert "pods[0]['status']['phase'] == 'Failed'" in retry
    assert result.metrics.peeks == 1
    assert result.metrics.run_code_calls == 2  # the look is the harness's, not the model's


async def test_a_key_some_items_lack_is_counted_and_its_dig_written(monty_pool):
    """A KeyError on a key that only some items hold (a Pending pod has no
    status.containerStatuses; here the first pod is one): the look at the variables
    counts the items that have it, and the retry request writes the dig() that reads
    it with a default, at its path from the item (not a test one level too high)."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_pods(*, namespace: str) -> dict:
        """List the pods of a namespace."""
        pods = [
            {"metadata": {"name": f"pod-{i}"}, "status": {"phase": "Pending"}}
            if i in (0, 5)
            else {
                "metadata": {"name": f"pod-{i}"},
                "status": {"phase": "Running", "containerStatuses": [{"restartCount": i}]},
            }
            for i in range(8)
        ]
        return {"kind": "List", "items": pods}

    guess = (
        "pods = await list_pods(namespace='prod')\n"
        "sum(p['status']['containerStatuses'][0]['restartCount'] for p in items(pods))"
    )
    fixed = (
        "pods = await list_pods(namespace='prod')\n"
        "sum(c['restartCount'] for p in items(pods) "
        "for c in dig(p, 'status.containerStatuses', default=[]))"
    )
    async with code_mode_over(fake, monty_pool) as ex:
        script = [block(guess), block(fixed), "The pods restarted 23 times."]
        openai, (result,) = await run_script(ex, script, request())
    retry = openai.requests[1]["messages"][-1]["content"]
    assert "KeyError" in retry
    assert "pods['items']: 6 of 8 items have ['status']['containerStatuses'] (a list)" in retry
    assert (
        "Hint: only 6 of the 8 items of pods['items'] have ['status']['containerStatuses']; "
        "the other 2 do not"
    ) in retry
    assert (
        "[x for item in items(pods) for x in dig(item, 'status.containerStatuses', default=[])]"
    ) in retry
    answer = openai.requests[2]["messages"][-1]["content"]
    assert "23" in answer
    assert result.metrics.peeks == 1


async def test_a_snippet_failing_on_data_fetched_before_is_shown_that_data(code_mode):
    """A snippet that fails on its first line, reading a variable an earlier snippet set,
    assigned nothing: the look shows the variable it read, and a key no value holds is
    said to be made up."""
    ex, _ = code_mode
    first = "pods = await list_pods(namespace='prod')\n[p['state'] for p in pods]"
    second = "nodes = {n: 0 for n in pods[0]['nodes']}\nnodes"
    script = [block(first), block(second), block(FILTER), "pod-0, pod-4 and pod-8."]
    fake, (result,) = await run_script(ex, script, request())
    retry = fake.requests[2]["messages"][-1]["content"]
    assert "KeyError: nodes" in retry
    assert "pods[0]['metadata']['name'] == 'pod-0'" in retry
    assert "Hint: no value your variables hold has a key nodes" in retry
    assert result.metrics.peeks == 2


async def test_a_snippet_calling_a_function_named_like_the_place_gets_the_one_asked_about(
    code_mode,
):
    """The question names a namespace and asks about pods; the snippet listed the
    namespaces, which hold no pods: the retry names the function whose stub is about
    pods and their phases, its call written with the argument the snippet passed."""
    ex, inner = code_mode

    @inner.tool(read_only=True)
    async def list_namespaces(*, namespace: str = "") -> list:
        """List the child namespaces of a namespace."""
        return [{"name": "prod"}]

    @inner.tool(read_only=True)
    async def list_workloads(*, namespace: str) -> list:
        """List the pods and jobs of a namespace, each with its phase."""
        return PODS

    wrong = "ns = await list_namespaces(namespace='prod')\n[n['phase'] for n in ns]"
    script = [block(wrong), block(FILTER), "pod-0, pod-4 and pod-8."]
    question = "In namespace prod, which pods are in phase Failed?"
    fake, (result,) = await run_script(ex, script, request(question))
    retry = fake.requests[1]["messages"][-1]["content"]
    assert "KeyError: phase" in retry
    assert (
        "Hint: my question is about phase, pod, and list_namespaces does not return those. "
        "list_workloads does, for example: await list_workloads(namespace='prod')"
    ) in retry
    # the namespaces' keys would only mislead: no look at them; the new block's first call
    assert "What your variables hold" not in retry
    assert retry.endswith(
        "Write a new ```python block that starts with await list_workloads(namespace='prod') "
        f"and answers my question: {question}"
    )
    assert result.reply.startswith("pod-0, pod-4 and pod-8.")


async def test_an_empty_result_gets_the_answer_request(code_mode):
    """An empty result is a result: the model is asked for the answer, with the
    empty result and the request to say that nothing matched (no look, no new block)."""
    ex, _ = code_mode
    empty = (
        "pods = await list_pods(namespace='prod')\n[p for p in pods if p.get('phase') == 'Failed']"
    )
    script = [block(empty), "No pod has failed."]
    fake, (result,) = await run_script(ex, script, request())
    answer = fake.requests[1]["messages"][-1]["content"]
    assert answer.startswith("The code returned:\n(empty result")
    assert "If the result is empty, say that nothing matched" in answer
    assert "What your variables hold now" not in answer
    assert "stop" not in fake.requests[1]  # the answer round: words, no code
    assert result.reply == "No pod has failed."


async def test_text_indexed_as_parsed_data_is_shown_as_lines(code_mode, monkeypatch):
    """Text indexed as if it were parsed: each retry shows the value is a str and its
    first lines. Text the look shows as CSV gets the CSV reader instead
    (tests/test_backend_harness_keys.py)."""
    ex, _ = code_mode
    bad = block("body = 'item stock\\nbolts 120\\nnuts 45'\nbody['item']")
    script = [bad, bad, block(FILTER), "pod-0, pod-4 and pod-8."]
    fake, (result,) = await run_script(ex, script, request())
    first, second = (fake.requests[i]["messages"][-1]["content"] for i in (1, 2))
    assert "body is a str of 3 lines (text, not parsed)" in first
    assert "body.splitlines()[:3] == ['item stock', 'bolts 120', 'nuts 45']" in first
    assert "body is a str of 3 lines (text, not parsed)" in second
    assert result.reply == "pod-0, pod-4 and pod-8."


async def test_a_run_no_trial_applied_to_goes_the_same_way_with_the_trials_on(monty_pool):
    """The premise of the bench's --skip-unchanged: where no trial applied (noticing()
    collects none), switching every trial on changes no request and no reply; where one
    applied, it is noticed, and switched on it changes the run. Each run has code mode of
    its own, as each arm has (what one run learns changes the next one's catalog)."""

    async def asked(
        script: list, question: str = QUESTION, **params: Any
    ) -> tuple[FakeOpenAI, Any, set[str]]:
        tools = inner_tools()

        @tools.tool(read_only=True)
        async def http_get(*, url: str) -> dict:
            """Fetch a URL."""
            return {"status": 200}

        async with code_mode_over(tools, monty_pool) as ex:
            with noticing() as noticed:
                fake, (result,) = await run_script(ex, script, request(question), **params)
        return fake, result, noticed

    everything = ",".join(sorted(TRIALS))
    data = "pods = await list_pods(namespace='prod')\npods"  # data, not a short answer
    script = [block(data), "Three of them are failing."]
    off, reply_off, noticed = await asked(script)
    assert noticed == set()
    on, reply_on, noticed = await asked(script, harness_trials=everything)
    assert noticed == set()  # on, they act where they apply: nothing is noticed
    assert on.requests == off.requests
    assert reply_on.reply == reply_off.reply == "Three of them are failing."

    # a question naming a URL the snippet never fetched: trial unfetched-url applies
    off, _, noticed = await asked(script[:2], question="Pods failing, by http://h:1/api/x?")
    assert noticed == {"unfetched-url"}


@pytest.mark.parametrize("trial", [True, False])
async def test_a_good_result_that_never_fetched_the_url_asked_about_is_sent_back(monty_pool, trial):
    """Trial unfetched-url: a question names a URL, the snippet answered from another
    tool's data; the result comes back with the call that fetches the URL (the code is
    not replayed), once; the block that fetches it is answered as usual. Off, the first
    result is answered."""
    fake_tools = inner_tools()

    @fake_tools.tool(read_only=True)
    async def http_get(*, url: str) -> dict:
        """Fetch a URL."""
        return {"status": 200, "json": {"failing": 3}}

    question = "How many pods are failing, by http://127.0.0.1:8000/api/health?"
    wrong = "pods = await list_pods(namespace='prod')\nlen(items(pods))"
    fetch = "r = await http_get(url='http://127.0.0.1:8000/api/health')\nr['json']['failing']"
    script = [block(wrong), block(fetch), "3 pods are failing."]
    params = {"harness_trials": "unfetched-url"} if trial else {}
    async with code_mode_over(fake_tools, monty_pool) as ex:
        fake, (result,) = await run_script(
            ex, script[: 3 if trial else 2], request(question), **params
        )
    second = fake.requests[1]["messages"]
    if not trial:
        assert second[-1]["content"].startswith("The code returned:\n12\n\nAnswer my question")
        return
    assert second[-1]["content"].startswith("Your code returned:\n12\n\nThat is not from")
    assert "r = await http_get(url='http://127.0.0.1:8000/api/health')" in second[-1]["content"]
    assert all(wrong not in str(m["content"]) for m in second)  # not replayed
    answer = fake.requests[2]["messages"][-1]["content"]
    assert answer.startswith("The code returned:\n3\n\nAnswer my question now")
    assert result.reply == "3 pods are failing."


def test_a_paused_run_keeps_its_look() -> None:
    """The look flag is part of the loop's stored position: a run paused and resumed
    after its look does not look again."""
    ls = LoopState(mode="small", looked=True, base=4)
    stored = json.loads(json.dumps(ls.to_json(RunState(request()))))
    resumed, _ = LoopState.from_json(stored, request())
    assert resumed.looked
    assert resumed.base == 4


def test_a_paused_run_stored_by_a_former_version_resumes() -> None:
    """A key of the stored position that this version has no field for (``checked``,
    the removed check-answer trial's; ``restarted``, the removed fresh-start's) is left
    out: the run resumes after an upgrade."""
    stored = json.loads(json.dumps(LoopState(mode="small", base=4).to_json(RunState(request()))))
    stored["loop"]["checked"] = True
    stored["loop"]["restarted"] = True
    resumed, _ = LoopState.from_json(stored, request())
    assert resumed.base == 4


@pytest.mark.parametrize("honest", [True, False])
async def test_failed_honest_replies_why_when_no_snippet_ran_to_a_result(
    code_mode, monkeypatch, honest
):
    """Rule failed-honest (on by default): after the last failed snippet the run says the
    question could not be answered and the last error's line, without asking the model
    (its words could only guess: it stated values it never computed). Switched off
    (ASYNCAI_HARNESS_OFF), the model answers."""
    if not honest:
        rules_off(monkeypatch, "failed-honest")
    ex, _ = code_mode
    guess = "The busiest pod is pod-7, with 12 restarts."
    script = [block("1/0")] * MAX_FAILED_SNIPPETS + [guess]
    fake, (result,) = await run_script(ex, script, request())
    assert result.metrics.harness_gave_up is True
    if not honest:
        assert len(fake.requests) == MAX_FAILED_SNIPPETS + 1
        assert result.reply == guess
        return
    assert len(fake.requests) == MAX_FAILED_SNIPPETS  # no answer round
    assert result.reply == (
        "I could not answer this: none of the code I ran returned a result. "
        "The last attempt ended with: ZeroDivisionError: division by zero"
    )
    last = result.records[-1].message
    assert last["role"] == "assistant"
    assert last["content"] == [{"type": "text", "text": result.reply}]


async def test_failed_honest_replaces_words_after_a_failed_snippet(code_mode):
    """Rule failed-honest: a reply in words in place of a retry, with no result behind
    it, is replaced too."""
    ex, _ = code_mode
    _, (result,) = await run_script(ex, [block("1/0"), "There are 3 pods."], request())
    assert result.reply.endswith("ended with: ZeroDivisionError: division by zero")


async def test_failed_honest_keeps_answers_without_code_or_with_a_result(code_mode):
    """Rule failed-honest: a question answered without code (arithmetic, or "no tool
    can answer this") keeps the model's words, and so does a run where one snippet ran
    to a result after failures."""
    ex, _ = code_mode
    no_tool = "No tool here can tell the weather in Paris."
    script = [no_tool, block("1/0"), block(FILTER), "pod-0, pod-4 and pod-8."]
    fake, (plain, after) = await run_script(
        ex, script, request("what is the weather in Paris?"), request(run="R2", thread="T2")
    )
    assert plain.reply == no_tool
    assert after.reply == "pod-0, pod-4 and pod-8."
    assert len(fake.requests) == 4


async def test_a_short_result_is_the_reply_without_an_answer_round(code_mode):
    """``[model] reply_with_short_result``: a good result that is a short value (three
    names) is the reply as one line, and the model is asked once; data (the pods
    themselves) and an empty result still get the answer round."""
    ex, _ = code_mode
    fake, (short,) = await run_script(ex, [block(FILTER)], request(), reply_with_short_result=True)
    assert len(fake.requests) == 1
    assert short.reply == "pod-0, pod-4, pod-8"
    assert short.metrics.reply_from_result is True
    assert [r.type for r in short.records] == ["user", "assistant", "user", "assistant"]
    assert short.records[-1].message["content"][0]["text"] == "pod-0, pod-4, pod-8"
    data = "pods = await list_pods(namespace='prod')\nitems(pods)"
    empty = "pods = await list_pods(namespace='prod')\n[p for p in items(pods) if p is None]"
    words = "Twelve pods, none failed."
    for code, script in ((data, [block(data), words]), (empty, [block(empty), words])):
        fake, (result,) = await run_script(ex, script, request(), reply_with_short_result=True)
        assert len(fake.requests) == 2, code
        assert result.reply == words


async def test_without_the_key_a_short_result_still_gets_its_answer_round(code_mode):
    """The default (``reply_with_short_result = false``): the model phrases the answer."""
    ex, _ = code_mode
    fake, (result,) = await run_script(ex, [block(FILTER), "pod-0, pod-4 and pod-8."], request())
    assert len(fake.requests) == 2
    assert result.reply == "pod-0, pod-4 and pod-8."


def test_a_short_reply_writes_a_sum_as_its_decimals() -> None:
    """A float sum's binary tail is not the answer: 6699.400000000001 is written 6699.4;
    names, dicts and text pass as they are."""
    assert short_reply("6699.400000000001") == "6699.4"
    assert short_reply('{"Maple Teapot": 6699.400000000001}') == "Maple Teapot: 6699.4"
    assert short_reply('["a", "b"]') == "a, b"
    assert short_reply("Cedar Blanket (100.61)") == "Cedar Blanket (100.61)"
    assert short_reply("[]") is None
    assert short_reply("null") is None


@pytest.mark.parametrize("on", [True, False])
async def test_a_loop_over_a_kubernetes_list_runs_again_over_its_items(monty_pool, monkeypatch, on):
    """Rule dict-loop: a comprehension over a list tool's whole result (a dict that holds
    its list under 'items') fails on its first item, a str key; the harness loops over
    the list the look found and runs the snippet again, and the model is asked only for
    the answer; switched off, it is asked for a new block."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def list_pods(*, namespace: str) -> dict:
        """List the pods of a namespace."""
        return {"kind": "List", "items": PODS}

    loop = "pods = await list_pods(namespace='prod')\n" + (
        "[p['metadata']['name'] for p in pods if p['status']['phase'] == 'Failed']"
    )
    script = [block(loop), *([] if on else [block(FILTER)]), "pod-0, pod-4 and pod-8."]
    if not on:
        rules_off(monkeypatch, "dict-loop")
    async with code_mode_over(tools, monty_pool) as ex:
        fake, (result,) = await run_script(ex, script, request())
    second = fake.requests[1]["messages"][-1]["content"]
    if on:
        assert len(fake.requests) == 2  # the block, then the answer: no retry round
        assert second.startswith('The code returned:\n["pod-0","pod-4","pod-8"]')
        assert result.metrics.key_fixes == 1
    else:
        assert "string indices must be integers" in second
    assert result.reply == "pod-0, pod-4 and pod-8."


async def test_a_rule_a_run_never_reached_changes_nothing_switched_off(monty_pool, monkeypatch):
    """The premise of an ablation that asks only where a rule was reached (reaching()):
    every rule a run did not reach, switched off together, leaves each request and the
    reply as they were; one it reached, switched off, changes the run. A failed snippet
    reaches the rules of a retry; a first good one does not."""

    async def asked(script: list, *off: str) -> tuple[FakeOpenAI, Any, set[str]]:
        monkeypatch.setenv("ASYNCAI_HARNESS_OFF", ",".join(off))
        async with code_mode_over(inner_tools(), monty_pool) as ex:
            with reaching(from_environ(os.environ)) as reached:
                fake, (result,) = await run_script(ex, script, request())
        return fake, result, reached

    bad = block("pods = await list_pods(namespace='prod')\npods['pods'][0]")
    script = [bad, block(FILTER), "pod-0, pod-4 and pod-8."]
    all_on, reply, reached = await asked(script)
    assert reply.reply == "pod-0, pod-4 and pod-8."
    assert {"worked-example", "look", "retry-alone", "warm-retry"} <= reached
    unreached = sorted(set(RULES) - reached)
    # asked, but with nothing to change here: no value to quote
    assert "quote-result" in unreached
    assert {"vote", "dict-loop", "failed-honest"} <= set(unreached)
    off, reply_off, reached_off = await asked(script, *unreached)
    assert off.requests == all_on.requests
    assert reply_off.reply == reply.reply
    assert reached_off == reached  # an off rule is never reached

    # a good first snippet: no retry, so no rule of one is reached
    _, _, first_good = await asked([block(FILTER), "pod-0, pod-4 and pod-8."])
    assert not {"look", "retry-alone", "warm-retry"} & first_good

    # a reached rule switched off changes the run: without the look, no variables shown
    changed, _, _ = await asked(script, "look")
    assert changed.requests[1] != all_on.requests[1]
