"""The OpenAI-compatible backend against a scripted model server on loopback.

The model is the fake (``tests/fakes/fake_openai.py``); the executor is an
in-memory one shaped like code mode (one ``run_code`` tool, thread scopes,
context notes) so these tests are about the loop itself. The run_code and
``asyncai ask`` tests with the real sandbox and MCP servers are in
``test_backend_code_mode.py`` and ``test_ask.py``.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion

from daemon.config import Config, ModelConfig, RuntimeConfig
from daemon.errors import ConfigError, ToolTransportError
from daemon.logging import REDACTED, configure_logging, reset_logging
from daemon.model import OpenAiCompatibleBackend
from daemon.model.endpoint import ChatEndpoint
from daemon.model.prompts import (
    CODE_MODE_SYSTEM_PROMPT,
    DIRECT_SYSTEM_PROMPT,
    FINAL_ROUND_PROMPT,
)
from daemon.model.response import completion_problem
from daemon.runtime.runs import HistoryTurn, Prompt, RunRequest, ToolUseContext, current_tool_use
from daemon.runtime.timing import SPLIT_PARTS, Timelines
from daemon.tools import BaseToolExecutor, ThreadKey, ToolCallOutput, ToolDefinition
from sessions.model import RunMetrics
from tests.fakes.backoff import RecordingBackoff
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import Error, FakeOpenAI, Hold, Raw, Reply, ToolCalls

KEY = "sk-test-0123456789abcdefghij"
RUN_CODE = ToolDefinition(
    "run_code",
    "Run Python in a sandbox. Functions: async def list_pods(*, namespace: str) -> list",
    {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)


class CodeLikeExecutor(BaseToolExecutor):
    """One ``run_code`` tool answered by ``answer(code)``; scopes and notes like code mode."""

    def __init__(self, answer: Callable[[str], Any] | None = None):
        self.answer = answer or (lambda code: ToolCallOutput("42", False))
        self.calls: list[tuple[str | None, str, dict, ToolUseContext | None]] = []
        self.notes: dict[str, str] = {}  # by thread id
        self.scopes_made: list[ThreadKey] = []

    def definitions(self) -> list[ToolDefinition]:
        """Exactly run_code."""
        return [RUN_CODE]

    def thread_scope(self, thread: ThreadKey) -> _Scope:
        """A scope that tags its calls with the thread id."""
        self.scopes_made.append(thread)
        return _Scope(self, thread.thread_id)

    def context_note(self, thread: ThreadKey) -> str | None:
        """The note set for the thread id, if any."""
        return self.notes.get(thread.thread_id)

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """An unscoped call."""
        return await self._call(None, name, arguments)

    async def _call(self, thread: str | None, name: str, arguments: dict) -> ToolCallOutput:
        self.calls.append((thread, name, arguments, current_tool_use.get()))
        out = self.answer(arguments.get("code", ""))
        if asyncio.iscoroutine(out):
            out = await out
        return out


class _Scope(BaseToolExecutor):
    def __init__(self, parent: CodeLikeExecutor, thread_id: str):
        self.parent, self.thread_id = parent, thread_id

    def definitions(self) -> list[ToolDefinition]:
        return self.parent.definitions()

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        return await self.parent._call(self.thread_id, name, arguments)


def request(
    *texts: str, history: list[HistoryTurn] | None = None, thread: str = "T1"
) -> RunRequest:
    """A run request answering ``texts`` (coalesced) in ``thread``."""
    prompts = [Prompt(id=f"m{i}", sender="alice", text=t) for i, t in enumerate(texts)]
    return RunRequest(
        run_id=f"run-{thread}-{texts[0][:8]}",
        channel="#ops",
        thread_id=thread,
        history=history or [],
        prompts=prompts,
    )


@asynccontextmanager
async def scripted(
    script: list[Any],
    executor: Any,
    *,
    api_key: str | None = None,
    max_run_seconds: float = 30.0,
    **model: Any,
) -> AsyncIterator[tuple[FakeOpenAI, OpenAiCompatibleBackend, list]]:
    """The fake model serving ``script`` and a backend on it.

    The backoff records ``(attempt, retry_after)`` instead of sleeping.
    """
    backoff = RecordingBackoff()
    waits = backoff.asked
    async with FakeOpenAI(script, api_key=api_key) as fake:
        params = ModelConfig(base_url=fake.base_url, api_key=KEY, model="fake-model", **model)
        backend = OpenAiCompatibleBackend(
            params, executor, backoff=backoff, max_run_seconds=max_run_seconds
        )
        try:
            yield fake, backend, waits
        finally:
            await backend.aclose()


AUDIT = {
    "nested_calls": [
        {"tool": "list_pods", "arguments": {"namespace": "a"}, "is_error": False, "bytes": 5000},
        {"tool": "list_pods", "arguments": {"namespace": "b"}, "is_error": False, "bytes": 3000},
    ]
}


async def test_requests_list_only_run_code_and_tool_message_carries_result():
    """Invariant 1: the tools are exactly [run_code]; the tool message is what run_code returned."""
    ex = CodeLikeExecutor(lambda code: ToolCallOutput('["pod-a","pod-b"]', False, audit=AUDIT))
    script = [ToolCalls(("run_code", {"code": "names(await list_pods())"})), Reply("pod-a, pod-b")]
    async with scripted(script, ex) as (fake, backend, _):
        result = await backend.run(request("which pods?"))
    first, second = fake.requests
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "run_code",
                "description": RUN_CODE.description,
                "parameters": RUN_CODE.input_schema,
            },
        }
    ]
    assistant, tool = second["messages"][-2:]
    assert assistant["content"] == ""  # not null: llama.cpp rejects null
    call_id = assistant["tool_calls"][0]["id"]
    assert call_id.startswith("call__0_run_code_cmpl-")  # opaque ids pass through unchanged
    assert tool == {"role": "tool", "tool_call_id": call_id, "content": '["pod-a","pod-b"]'}
    assert result.status == "done"
    assert result.reply == "pod-a, pod-b"
    m = result.metrics
    assert (m.rounds, m.run_code_calls, m.nested_calls) == (2, 1, 2)
    assert (m.bytes_in, m.bytes_out) == (8000, len('["pod-a","pod-b"]'))
    assert not m.final_round_forced
    assert (m.prompt_tokens, m.completion_tokens) == (20, 10)


async def test_records_are_claude_code_shaped_in_the_order_the_model_saw_them():
    """User text, assistant tool_use, tool_result (audit as tool_use_result), assistant text."""
    ex = CodeLikeExecutor(lambda code: ToolCallOutput("3", False, audit=AUDIT))
    script = [ToolCalls(("run_code", {"code": "1 + 2"}), content="Let me count."), Reply("3")]
    async with scripted(script, ex) as (fake, backend, _):
        result = await backend.run(request("count them"))
    user, assistant, tool_result, final = result.records
    assert [r.type for r in result.records] == ["user", "assistant", "user", "assistant"]
    assert user.message == {"role": "user", "content": [{"type": "text", "text": "count them"}]}
    call_id = fake.requests[1]["messages"][-1]["tool_call_id"]
    msg = assistant.message
    assert msg["type"] == "message"
    assert msg["role"] == "assistant"
    assert msg["model"] == "fake-model"
    assert msg["id"].startswith("chatcmpl-")
    assert msg["stop_reason"] == "tool_use"
    assert msg["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert msg["content"] == [
        {"type": "text", "text": "Let me count."},
        {"type": "tool_use", "id": call_id, "name": "run_code", "input": {"code": "1 + 2"}},
    ]
    assert tool_result.message["content"] == [
        {"type": "tool_result", "tool_use_id": call_id, "content": "3", "is_error": False}
    ]
    assert tool_result.tool_use_result == AUDIT
    assert final.message["content"] == [{"type": "text", "text": "3"}]
    assert final.message["stop_reason"] == "end_turn"
    assert len({r.uuid for r in result.records}) == 4
    assert all(r.timestamp.endswith("Z") for r in result.records)


async def test_current_tool_use_names_the_run_and_the_assistant_record():
    """The audit observer can attribute nested calls: run, thread, tool_use id, record uuid."""
    ex = CodeLikeExecutor()
    script = [ToolCalls(("run_code", {"code": "1"})), Reply("done")]
    async with scripted(script, ex) as (_fake, backend, _):
        req = request("go", thread="T7")
        result = await backend.run(req)
    ((thread, _, _, ctx),) = ex.calls
    assert thread == "T7"  # the thread's scope answered, not the shared executor
    assert ex.scopes_made == [ThreadKey("#ops", "T7")]
    assert ctx == ToolUseContext(
        run_id=req.run_id,
        thread_id="T7",
        tool_use_id=result.records[1].message["content"][0]["id"],
        record_uuid=result.records[1].uuid,
        channel=req.channel,
    )
    assert current_tool_use.get() is None


async def test_final_round_withdraws_tools_and_its_answer_is_the_reply():
    """At most 8 requests; the 8th has no tools key, asks for an answer, and always ends the run."""
    ex = CodeLikeExecutor()
    script: list[Any] = [ToolCalls(("run_code", {"code": f"step{i}"})) for i in range(7)]
    # a model that still tries to call a tool in the final round is ignored, its text kept
    script.append(ToolCalls(("run_code", {"code": "more"}), content="Pods: a, b."))
    async with scripted(script, ex) as (fake, backend, _):
        result = await backend.run(request("dig"))
    assert len(fake.requests) == 8
    assert all(r["tools"][0]["function"]["name"] == "run_code" for r in fake.requests[:7])
    last = fake.requests[7]
    assert "tools" not in last
    assert last["messages"][-1] == {"role": "user", "content": FINAL_ROUND_PROMPT}
    assert len(ex.calls) == 7
    assert result.reply == "Pods: a, b."
    assert result.metrics.final_round_forced
    assert (result.metrics.rounds, result.metrics.run_code_calls) == (8, 7)
    # the harness's request is not a record: the history rebuilt from records stays the user's
    assert FINAL_ROUND_PROMPT not in json.dumps([r.message for r in result.records])


async def test_max_rounds_is_configurable():
    """max_rounds = 2: one tool round, then the tool-free final round."""
    ex = CodeLikeExecutor()
    script = [ToolCalls(("run_code", {"code": "1"})), Reply("ok")]
    async with scripted(script, ex, max_rounds=2) as (fake, backend, _):
        result = await backend.run(request("q"))
    assert "tools" in fake.requests[0]
    assert "tools" not in fake.requests[1]
    assert result.reply == "ok"
    assert result.metrics.final_round_forced


async def test_tool_description_is_byte_identical_across_runs_while_the_note_changes():
    """The note goes on the newest user message; system prompt and tools never change (A11)."""
    ex = CodeLikeExecutor()
    async with scripted(["first", "second"], ex) as (fake, backend, _):
        ex.notes["T1"] = "[run_code variables still in scope: pods: list[80]]"
        first = await backend.run(request("how many pods?"))
        ex.notes["T1"] = "[run_code variables still in scope: pods: list[80], bad: list[3]]"
        await backend.run(
            request(
                "and which are failing?",
                history=[HistoryTurn("user", "how many pods?"), HistoryTurn("assistant", "first")],
            )
        )
    a, b = fake.requests
    assert json.dumps(a["tools"]) == json.dumps(b["tools"])
    assert (
        a["messages"][0]
        == b["messages"][0]
        == {
            "role": "system",
            "content": CODE_MODE_SYSTEM_PROMPT,
        }
    )
    assert a["messages"][-1]["content"] == (
        "how many pods?\n\n[run_code variables still in scope: pods: list[80]]"
    )
    assert b["messages"][-1]["content"].endswith("pods: list[80], bad: list[3]]")
    # the note is harness text: kept out of the record the history is rebuilt from
    assert first.records[0].message["content"] == [{"type": "text", "text": "how many pods?"}]


async def test_coalesced_prompts_are_one_user_message_after_the_history():
    """Queued prompts arrive as ONE user message, in order, separated by blank lines."""
    ex = CodeLikeExecutor()
    history = [HistoryTurn("user", "earlier q"), HistoryTurn("assistant", "earlier a")]
    async with scripted(["ok"], ex) as (fake, backend, _):
        result = await backend.run(request("one", "two", "three", history=history))
    assert fake.requests[0]["messages"][1:] == [
        {"role": "user", "content": "earlier q"},
        {"role": "assistant", "content": "earlier a"},
        {"role": "user", "content": "one\n\ntwo\n\nthree"},
    ]
    assert result.records[0].message["content"][0]["text"] == "one\n\ntwo\n\nthree"


async def test_invalid_json_arguments_become_an_error_the_model_can_correct():
    """Broken JSON runs nothing, the model reads why, and its corrected call runs."""
    ex = CodeLikeExecutor()
    broken = '{"code": "print("hi")"}'  # an unescaped quote, as a local model wrote it
    script = [
        ToolCalls(("run_code", broken)),
        ToolCalls(("run_code", {"code": 'print("hi")'})),
        Reply("hi"),
    ]
    async with scripted(script, ex) as (fake, backend, _):
        result = await backend.run(request("say hi"))
    assert [c[2] for c in ex.calls] == [{"code": 'print("hi")'}]
    assistant, tool = fake.requests[1]["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"  # servers re-parse it
    assert tool["content"].startswith(
        "Error: the arguments of this run_code call were not valid JSON"
    )
    assert "nothing ran" in tool["content"]
    assert result.reply == "hi"
    bad_use = result.records[1].message["content"][0]
    assert bad_use["input"] == {"invalid_arguments": broken}
    assert result.records[2].message["content"][0]["is_error"] is True


async def test_arguments_that_are_not_an_object_and_unknown_tools_are_errors():
    """A JSON list is not arguments; a tool name that was not offered is named back."""
    ex = CodeLikeExecutor()
    script = [ToolCalls(("run_code", "[1, 2]"), ("bash", {"cmd": "ls"})), Reply("ok")]
    async with scripted(script, ex) as (fake, backend, _):
        result = await backend.run(request("q"))
    not_object, unknown = fake.requests[1]["messages"][-2:]
    assert "expected a JSON object, got list" in not_object["content"]
    assert unknown["content"] == "Error: there is no tool named 'bash'; the tools are: run_code."
    assert ex.calls == []
    assert result.metrics.tool_errors == 2


async def test_missing_and_repeated_tool_call_ids_are_made_unique():
    """Ids are opaque, but each tool message must answer exactly one call."""
    ex = CodeLikeExecutor()
    script = [
        ToolCalls(("run_code", {"code": "1"}), ("run_code", {"code": "2"}), ids=["same", "same"]),
        Reply("ok"),
    ]
    async with scripted(script, ex) as (fake, backend, _):
        await backend.run(request("q"))
    assistant, t1, t2 = fake.requests[1]["messages"][-3:]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert ids[0] == "same"
    assert ids[1] != "same"
    assert [t1["tool_call_id"], t2["tool_call_id"]] == ids


async def test_a_500_is_retried_with_backoff_then_succeeds():
    """5xx is transient: back off, ask again, and the run goes on."""
    script = [Error(500, "overloaded"), Reply("fine")]
    async with scripted(script, CodeLikeExecutor()) as (fake, backend, waits):
        result = await backend.run(request("q"))
    assert result.status == "done"
    assert result.reply == "fine"
    assert waits == [(1, None)]
    assert len(fake.requests) == 2
    assert result.metrics.rounds == 1
    assert result.metrics.retries == 1


async def test_a_429_passes_retry_after_to_the_backoff():
    """Rate limits are retried, honouring the server's Retry-After."""
    script = [Error(429, "slow down", headers={"retry-after": "7"}), Reply("ok")]
    async with scripted(script, CodeLikeExecutor()) as (_fake, backend, waits):
        result = await backend.run(request("q"))
    assert result.reply == "ok"
    assert waits == [(1, 7.0)]


async def test_spent_retries_fail_the_run_with_a_clear_message_and_a_reply():
    """After the retries the run fails: what happened, where, how often, and a short reply."""
    script = [Error(503, "model loading")] * 3
    async with scripted(script, CodeLikeExecutor(), retries=2) as (fake, backend, waits):
        result = await backend.run(request("q"))
    assert result.status == "failed"
    assert result.error == (
        f"the model endpoint {fake.base_url} failed with HTTP 503: model loading (after 3 attempts)"
    )
    assert result.reply == f"Sorry, this run failed: {result.error}"
    assert waits == [(1, None), (2, None)]
    assert [r.type for r in result.records] == ["user"]


async def test_an_unreachable_endpoint_fails_the_run_clearly():
    """Connection refused is retried, then reported with the URL and the reason."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    params = ModelConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1)
    backoff = RecordingBackoff()
    backend = OpenAiCompatibleBackend(params, CodeLikeExecutor(), backoff=backoff)
    try:
        result = await backend.run(request("q"))
    finally:
        await backend.aclose()
    assert result.status == "failed"
    assert result.error.startswith(
        f"the model endpoint http://127.0.0.1:{port}/v1 cannot be reached ("
    )
    assert "after 2 attempts" in result.error
    assert backoff.asked == [(1, None)]


async def test_a_refused_key_is_not_retried_and_says_what_to_set():
    """401 is the operator's to fix: no retry, and the message names the setting."""
    async with scripted(["never"], CodeLikeExecutor(), api_key="the-right-key") as (
        _fake,
        backend,
        waits,
    ):
        result = await backend.run(request("q"))
    assert result.status == "failed"
    assert "refused the API key (HTTP 401" in result.error
    assert "OPENAI_API_KEY" in result.error
    assert KEY not in result.error
    assert waits == []


async def test_a_404_points_at_the_base_url_and_model():
    """A wrong base URL (missing /v1) is a 404 whose message says what to check."""
    async with FakeOpenAI() as fake:
        params = ModelConfig(base_url=fake.base_url[: -len("/v1")], model="m", retries=0)
        backend = OpenAiCompatibleBackend(params, CodeLikeExecutor())
        try:
            result = await backend.run(request("q"))
        finally:
            await backend.aclose()
    assert result.status == "failed"
    assert "HTTP 404" in result.error
    assert "ends in /v1" in result.error


async def test_a_request_that_hangs_times_out_under_request_timeout():
    """Every model request has a timeout; a hung server fails the run, it never hangs."""
    hold = Hold(Reply("too late"))
    async with scripted([hold], CodeLikeExecutor(), request_timeout=0.2, retries=0) as (
        fake,
        backend,
        _,
    ):
        result = await backend.run(request("q"))
    assert hold.arrived.is_set()
    assert result.status == "failed"
    assert result.error == f"the model endpoint {fake.base_url} did not answer within 0.2 s"


async def test_the_run_deadline_ends_a_run_stuck_in_a_tool():
    """max_run_seconds bounds the whole run, tool calls included."""
    never = asyncio.Event()

    async def stuck(code: str) -> ToolCallOutput:
        await never.wait()
        raise AssertionError("released")

    script = [ToolCalls(("run_code", {"code": "while True: pass"}))]
    async with scripted(script, CodeLikeExecutor(stuck), max_run_seconds=0.2) as (
        _fake,
        backend,
        _,
    ):
        result = await backend.run(request("q"))
    assert result.status == "failed"
    assert result.error == "the run did not finish within max_run_seconds (0.2 s)"
    # the cut call's tool_use is answered: an error result saying why
    assert [r.type for r in result.records] == ["user", "assistant", "user"]
    [use] = result.records[1].message["content"]
    [answer] = result.records[2].message["content"]
    assert (answer["tool_use_id"], answer["is_error"]) == (use["id"], True)


async def test_a_tool_call_past_its_timeout_is_an_error_result_and_the_run_goes_on():
    """tool_call_timeout cancels one call; the model reads why and answers; with no call
    returning data, the reply says what failed and why (not the model's words)."""
    never = asyncio.Event()

    async def stuck(code: str) -> ToolCallOutput:
        await never.wait()
        raise AssertionError("released")

    script = [ToolCalls(("run_code", {"code": "slow()"})), Reply("it timed out")]
    async with scripted(script, CodeLikeExecutor(stuck), tool_call_timeout=0.1) as (
        fake,
        backend,
        _,
    ):
        result = await backend.run(request("q"))
    assert fake.requests[1]["messages"][-1]["content"] == (
        "Error: run_code did not finish within 0.1 s and was cancelled."
    )
    assert result.reply.startswith("I could not find this out")
    assert "- run_code failed: Error: run_code did not finish within 0.1 s" in result.reply


async def test_a_transport_error_is_an_error_result():
    """A call that could not be made (server died) is reported to the model, not raised."""

    def dead(code: str) -> ToolCallOutput:
        raise ToolTransportError("server 'kcp' exited with code 1", tool="run_code")

    script = [ToolCalls(("run_code", {"code": "x"})), Reply("the server is down")]
    async with scripted(script, CodeLikeExecutor(dead)) as (fake, backend, _):
        result = await backend.run(request("q"))
    assert fake.requests[1]["messages"][-1]["content"] == (
        "Error: tool error: server 'kcp' exited with code 1"
    )
    assert result.records[2].message["content"][0]["is_error"] is True
    assert result.status == "done"


async def test_cancellation_propagates():
    """!stop and shutdown cancel the run task: CancelledError is never swallowed."""
    hold = Hold(Reply("late"))
    async with scripted([hold], CodeLikeExecutor()) as (_fake, backend, _):
        task = asyncio.create_task(backend.run(request("q")))
        await hold.arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_empty_reply_is_replaced_by_a_visible_placeholder():
    """Small local models sometimes answer nothing; the channel gets a line saying so."""
    async with scripted([Reply("")], CodeLikeExecutor()) as (_fake, backend, _):
        result = await backend.run(request("q"))
    assert result.reply == "(the model returned an empty reply)"
    assert result.records[-1].message["content"] == []


async def test_direct_mode_exposes_the_inner_tools_as_functions():
    """Without code mode the MCP tools are the functions; bytes_in equals bytes_out."""
    inner = FakeToolExecutor()

    @inner.tool(name="kcp.get_object", read_only=True)
    async def get_object(*, name: str) -> dict:
        """Get one object."""
        return {"kind": "Pod", "name": name}

    script = [ToolCalls(("kcp_get_object", {"name": "p1"})), Reply("a Pod")]
    async with scripted(script, inner) as (fake, backend, _):
        result = await backend.run(request("what is p1?"))
    (tool,) = fake.requests[0]["tools"]
    assert tool["function"]["name"] == "kcp_get_object"  # OpenAI refuses dots in names
    assert tool["function"]["description"] == "Get one object."
    assert fake.requests[0]["messages"][0]["content"] == DIRECT_SYSTEM_PROMPT
    assert inner.calls == [("kcp.get_object", {"name": "p1"})]
    m = result.metrics
    assert m.bytes_in == m.bytes_out == len('{"kind": "Pod", "name": "p1"}')
    assert m.nested_calls == 0


async def test_optional_sampling_parameters_are_sent_only_when_configured():
    """temperature and max_tokens reach the server when set, and are absent otherwise."""
    async with scripted(["a"], CodeLikeExecutor()) as (plain, backend, _):
        await backend.run(request("q"))
    async with scripted(["b"], CodeLikeExecutor(), temperature=0.0, max_tokens=64) as (
        tuned,
        b2,
        _,
    ):
        await b2.run(request("q"))
    assert "temperature" not in plain.requests[0]
    assert "max_tokens" not in plain.requests[0]
    assert (tuned.requests[0]["temperature"], tuned.requests[0]["max_tokens"]) == (0.0, 64)


async def test_a_config_without_a_model_is_refused_at_construction():
    """The backend will not start without a model name, and says where to set it."""
    with pytest.raises(ConfigError, match="ASYNCAI_MODEL"):
        OpenAiCompatibleBackend(Config(), CodeLikeExecutor())


async def test_a_whole_config_supplies_the_run_deadline():
    """From a Config the deadline is runtime.max_run_seconds."""
    config = Config(model=ModelConfig(model="m"), runtime=RuntimeConfig(max_run_seconds=12.5))
    backend = OpenAiCompatibleBackend(config, CodeLikeExecutor())
    try:
        assert backend.max_run_seconds == 12.5
    finally:
        await backend.aclose()


# ---- logs ----


@pytest.fixture
def log_stream() -> Any:
    """Verbose NDJSON logging into a buffer, undone afterwards."""
    stream = io.StringIO()
    configure_logging(True, stream, secrets=[KEY])
    yield stream
    reset_logging()


def events(stream: io.StringIO) -> list[dict]:
    """Every log line, parsed (each must be one JSON object)."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_verbose_events_carry_the_spec_fields(log_stream: io.StringIO):
    """model.tool_call, model.tool_result (content decoded) and model.turn_summary (A9)."""
    ex = CodeLikeExecutor(lambda code: ToolCallOutput('{"count": 2}', False, audit=AUDIT))
    script = [ToolCalls(("run_code", {"code": "len(pods)"})), Reply("2")]
    async with scripted(script, ex) as (_fake, backend, _):
        await backend.run(request("how many?"))
    by_name = {e["event"]: e for e in events(log_stream)}
    call = by_name["model.tool_call"]
    assert (call["level"], call["logger"]) == ("info", "asyncai.backend")
    assert (call["tool"], call["arguments"]) == ("run_code", {"code": "len(pods)"})
    result = by_name["model.tool_result"]
    assert (result["tool"], result["is_error"], result["content"]) == (
        "run_code",
        False,
        {"count": 2},
    )
    summary = by_name["model.turn_summary"]
    assert {k: summary[k] for k in ("rounds", "run_code_calls", "nested_calls", "bytes_in")} == {
        "rounds": 2,
        "run_code_calls": 1,
        "nested_calls": 2,
        "bytes_in": 8000,
    }
    assert summary["bytes_out"] == len('{"count": 2}')
    assert summary["final_round_forced"] is False
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (20, 10)
    assert summary["status"] == "done"
    # the split (issue 31) only inside a run's timeline, which the daemon opens
    assert "total_s" not in summary
    log_stream.truncate(0)
    log_stream.seek(0)
    script = [ToolCalls(("run_code", {"code": "len(pods)"})), Reply("2")]
    async with (
        scripted(script, ex) as (_fake, backend, _),
        Timelines().timing_run("run-T1", {}),
    ):
        result = await backend.run(request("how many?"))
    summary = {e["event"]: e for e in events(log_stream)}["model.turn_summary"]
    split = {part: summary[f"{part}_s"] for part in SPLIT_PARTS}
    assert split == result.metrics.split
    assert split["prompt_eval"] > 0
    assert split["total"] >= split["prompt_eval"]


async def test_without_verbose_only_warnings_are_logged():
    """The default level hides the call events but keeps retries and failures."""
    stream = io.StringIO()
    configure_logging(False, stream)
    try:
        script = [Error(500), ToolCalls(("run_code", {"code": "1"})), Reply("ok")]
        async with scripted(script, CodeLikeExecutor()) as (_fake, backend, _):
            await backend.run(request("q"))
    finally:
        reset_logging()
    assert [(e["level"], e["event"]) for e in events(stream)] == [
        ("warning", "model.request_retry")
    ]


async def test_the_api_key_never_appears_in_a_log_line(log_stream: io.StringIO):
    """Even when a tool echoes the key (a snippet printing the environment), the log hides it."""
    leak = ToolCallOutput(f"OPENAI_API_KEY={KEY}\nAuthorization: Bearer {KEY}", False)
    script = [ToolCalls(("run_code", {"code": f"'{KEY}'"})), Reply(f"the key is {KEY}")]
    async with scripted(script, CodeLikeExecutor(lambda c: leak)) as (fake, backend, _):
        await backend.run(request("print the key"))
    text = log_stream.getvalue()
    assert KEY not in text
    assert REDACTED in text
    assert fake.headers[0]["authorization"] == f"Bearer {KEY}"  # the server did get it


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    [
        "choices",
        "message",
        "content",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "usage",
        "prompt_tokens",
        "finish_reason",
        "custom",
    ]
)
# bodies shaped like a completion, with anything in the places the loop reads
_SHAPED = st.recursive(
    _JSON, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner), max_leaves=30
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), _SHAPED.map(lambda v: json.dumps(v).encode())))
def test_completion_problem_gives_none_or_a_reason_for_any_body(body: bytes):
    """The body check never raises: any bytes are a completion the loop can read (None)
    or a reason in words; deep nesting and huge numbers included."""
    problem = completion_problem(body)
    assert problem is None or (isinstance(problem, str) and problem)


def test_completion_problem_accepts_what_servers_send_and_names_the_rest():
    """A plain reply, tool calls and usage pass; each wrong place is named by its path."""
    call = {"id": None, "type": "function", "function": {"name": "run_code", "arguments": ""}}
    good = {
        "choices": [{"message": {"content": None, "tool_calls": [call]}, "finish_reason": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 0},
    }
    assert completion_problem(json.dumps(good).encode()) is None
    assert completion_problem(b"[" * 100_000) is not None  # RecursionError in json.loads
    assert completion_problem(b"1" * 5000).startswith("the body is not JSON")  # > int digits
    assert completion_problem(b'{"choices": []}') == "it has no choices"
    assert completion_problem(b"\xff") == "the body is not UTF-8 (invalid start byte at byte 0)"
    bad_usage = {**good, "usage": {"prompt_tokens": True}}
    assert completion_problem(json.dumps(bad_usage).encode()) == (
        "usage.prompt_tokens is a boolean (true), not a count"
    )


async def test_a_malformed_response_fails_the_run_with_a_reply_and_is_not_retried():
    """``message: null`` with a 200: the run fails at once (no retry, no round counted)
    with the reason and the short reply; the loop used to raise AttributeError."""
    body = json.dumps({"choices": [{"index": 0, "message": None, "finish_reason": "stop"}]})
    async with scripted([Raw(body)], CodeLikeExecutor(), retries=2) as (fake, backend, waits):
        result = await backend.run(request("q"))
    assert result.status == "failed"
    assert result.error == (
        f"the model endpoint {fake.base_url} sent a malformed response: "
        "choices[0].message is null, not an object"
    )
    assert result.reply == f"Sorry, this run failed: {result.error}"
    assert (waits, result.metrics.rounds, len(fake.requests)) == ([], 0, 1)


async def test_the_endpoint_sends_the_body_as_given_and_reads_a_completion():
    """ChatEndpoint posts the loop's body itself (no SDK re-walk of it: issue 17), with the
    key; the answer is the SDK's ChatCompletion, its tool calls objects, its usage counted."""
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "héllo ✓"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": [1, None]}}}],
        "temperature": 0.5,
    }
    async with FakeOpenAI([ToolCalls(("f", {"a": 1}))]) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key=KEY, max_retries=0)
        params = ModelConfig(base_url=fake.base_url, api_key=KEY, model="fake-model")
        endpoint = ChatEndpoint(client, params, "fake-model", RecordingBackoff())
        metrics = RunMetrics()
        response = await endpoint.complete(body, metrics, "run-1")
        await client.close()
    # streamed (issue 31): the body as given and the two keys that ask for a stream
    assert fake.requests == [{**body, "stream": True, "stream_options": {"include_usage": True}}]
    assert "stream" not in body  # the loop's own body is left as it was
    assert fake.headers[0]["authorization"] == f"Bearer {KEY}"
    assert isinstance(response, ChatCompletion)
    call = response.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("f", {"a": 1})
    assert (metrics.rounds, metrics.prompt_tokens, metrics.completion_tokens) == (1, 10, 5)


async def test_a_completion_off_the_spec_where_the_loop_does_not_read_is_read_as_the_sdk_does():
    """No id, object, created or model, a tool call without ``type``: pydantic's check of
    the spec fails, so the endpoint builds it unchecked, as the SDK does, and the run goes on."""
    call = {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}
    body = json.dumps({"choices": [{"message": {"content": "", "tool_calls": [call]}}]})
    async with FakeOpenAI([Raw(body)]) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key=KEY, max_retries=0)
        params = ModelConfig(base_url=fake.base_url, api_key=KEY, model="fake-model")
        endpoint = ChatEndpoint(client, params, "fake-model", RecordingBackoff())
        metrics = RunMetrics()
        response = await endpoint.complete({"model": "fake-model", "messages": []}, metrics, "r")
        await client.close()
    assert isinstance(response, ChatCompletion)
    message = response.choices[0].message
    assert (message.content, message.tool_calls[0].function.name) == ("", "f")
    assert (metrics.rounds, metrics.prompt_tokens) == (1, 0)


async def test_the_endpoints_latency_is_timed_now_or_its_error_said():
    """latency() (the console's Health page): one GET /models timed; a port where nothing
    listens has no latency, only its error; a 404 is still the endpoint answering."""
    async with FakeOpenAI() as fake:
        for base_url in (fake.base_url, fake.base_url[: -len("/v1")]):
            backend = OpenAiCompatibleBackend(
                ModelConfig(base_url=base_url, model="m"), CodeLikeExecutor()
            )
            try:
                elapsed, error = await backend.latency()
            finally:
                await backend.aclose()
            assert elapsed is not None
            assert elapsed >= 0
            assert error is None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAiCompatibleBackend(
        ModelConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"), CodeLikeExecutor()
    )
    try:
        elapsed, error = await backend.latency(within=2.0)
    finally:
        await backend.aclose()
    assert elapsed is None
    assert error is not None
    assert error.startswith("APIConnectionError")
