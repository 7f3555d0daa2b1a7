"""A run that pauses for approval and goes on later, in both loops and both tool modes.

The model is the scripted server on loopback; the executors are in memory
(direct mode: MCP-like tools behind a gate; code mode: a ``run_code`` that
pauses and resumes like code mode's), so these tests are about the loop:
what is stored, and that the run continues exactly where it stopped, from
JSON, as it would after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from daemon.approvals import Decision, Pause, PendingCall, Verdict
from daemon.config import ModelConfig
from daemon.model import OpenAiCompatibleBackend
from daemon.runtime.runs import Prompt, RunRequest, RunResult
from daemon.tools import BaseToolExecutor, ToolCallOutput, ToolDefinition
from tests.fakes.backoff import RecordingBackoff
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls

REQUEST = RunRequest("R1", "#ops", "T1", [], [Prompt("M1", "alice", "delete web-1")])


def ask_for_mutating(definition: ToolDefinition, arguments: dict[str, Any]) -> Verdict:
    """The default policy: ask for every mutating call."""
    return Verdict("ask", "destructive")


def direct_tools() -> FakeToolExecutor:
    """A read-only get and a destructive delete that records its calls."""
    tools = FakeToolExecutor()

    @tools.tool(read_only=True)
    async def get_object(name: str) -> str:
        return f"{name} exists"

    @tools.tool(destructive=True)
    async def delete_object(name: str) -> str:
        return f"deleted {name}"

    return tools


def roundtrip(result: RunResult) -> tuple[Pause, dict[str, Any]]:
    """The paused run as the store keeps it: the conversation through JSON text."""
    assert result.status == "paused"
    assert result.paused is not None
    return result.paused.pause, json.loads(json.dumps(result.paused.conversation))


async def test_direct_mode_pauses_before_a_mutating_call_and_an_approval_makes_it_once() -> None:
    """The read-only call runs; the delete waits; after approval it is made once and the
    model answers from its result; the records hold the whole run."""
    script = [
        ToolCalls(("get_object", {"name": "web-1"}), ("delete_object", {"name": "web-1"})),
        "Deleted web-1.",
    ]
    tools = direct_tools()
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, model="m", tool_mode="direct")
        backend = OpenAiCompatibleBackend(
            params, tools, gate=ask_for_mutating, backoff=RecordingBackoff()
        )
        try:
            paused = await backend.run(REQUEST)
            assert [name for name, _ in tools.calls] == ["get_object"]
            pause, conversation = roundtrip(paused)
            assert pause.snapshot is None
            assert pause.calls == (
                PendingCall(0, "delete_object", None, {"name": "web-1"}, "destructive"),
            )
            assert len(fake.requests) == 1
            decisions = {0: Decision(True, "alice", waited_ms=5.0)}
            done = await backend.resume(REQUEST, conversation, pause, decisions)
        finally:
            await backend.aclose()
    assert done.status == "done"
    assert done.reply == "Deleted web-1."
    assert [name for name, _ in tools.calls] == ["get_object", "delete_object"]
    tool_messages = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["web-1 exists", "deleted web-1"]
    assert [r.type for r in done.records] == ["user", "assistant", "user", "user", "assistant"]
    assert done.metrics.rounds == 2


async def test_a_denied_call_is_never_made_and_the_model_reads_why() -> None:
    """Denial: PermissionError with who and why is the call's result; the reply names the
    refusal, whatever the model said (no call returned data)."""
    script = [ToolCalls(("delete_object", {"name": "web-1"})), "Deleted web-1 and 3 more."]
    tools = direct_tools()
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, model="m", tool_mode="direct")
        backend = OpenAiCompatibleBackend(params, tools, gate=ask_for_mutating)
        try:
            pause, conversation = roundtrip(await backend.run(REQUEST))
            decision = Decision(False, "bob", "not on a friday", kind="denied")
            done = await backend.resume(REQUEST, conversation, pause, {0: decision})
        finally:
            await backend.aclose()
    assert tools.calls == []
    assert "Deleted" not in done.reply
    assert f"- delete_object was refused: {DENIED_BY_BOB}" in done.reply
    (tool_message,) = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == DENIED_BY_BOB


DENIED_BY_BOB = "PermissionError: denied by bob: not on a friday"


async def test_an_approved_call_whose_name_now_reaches_another_server_is_not_made() -> None:
    """Direct mode: the request showed staging.delete_object; after a restart prod owns the
    name. The approval makes no call; the model reads a PermissionError that says why."""
    script = [ToolCalls(("delete_object", {"name": "web-1"})), "It was not made."]
    staging, prod = FakeToolExecutor(), FakeToolExecutor()
    for tools, server in ((staging, "staging"), (prod, "prod")):

        @tools.tool(destructive=True, server=server)
        async def delete_object(name: str) -> str:
            return f"deleted {name}"

    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, model="m", tool_mode="direct")
        before = OpenAiCompatibleBackend(params, staging, gate=ask_for_mutating)
        after = OpenAiCompatibleBackend(params, prod, gate=ask_for_mutating)  # the restart
        try:
            pause, conversation = roundtrip(await before.run(REQUEST))
            assert pause.calls[0].server == "staging"
            decisions = {0: Decision(True, "alice")}
            done = await after.resume(REQUEST, conversation, pause, decisions)
        finally:
            await before.aclose()
            await after.aclose()
    assert staging.calls == []
    assert prod.calls == []
    assert "- delete_object was refused: PermissionError: the approved call was not made" in (
        done.reply
    )
    (tool_message,) = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == (
        "PermissionError: the approved call was not made: staging.delete_object was "
        "approved, but delete_object now reaches prod.delete_object"
    )


async def test_a_refusing_policy_answers_at_once_without_a_pause() -> None:
    """A deny verdict is an error result, not a pause."""
    script = [ToolCalls(("delete_object", {"name": "x"})), "Refused."]
    tools = direct_tools()
    refuse = lambda d, a: Verdict("deny", "kcp.delete_object is refused")  # noqa: E731
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, model="m", tool_mode="direct")
        backend = OpenAiCompatibleBackend(params, tools, gate=refuse)
        try:
            result = await backend.run(REQUEST)
        finally:
            await backend.aclose()
    assert result.status == "done"
    assert tools.calls == []
    (tool_message,) = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == "PermissionError: kcp.delete_object is refused"


RUN_CODE = ToolDefinition(
    "run_code", "Run Python.", {"type": "object", "properties": {"code": {"type": "string"}}}
)


class PausingRunCode(BaseToolExecutor):
    """run_code that pauses at its first call, like code mode at a mutating call,
    and finishes on resume with the decision in its result."""

    def __init__(self) -> None:
        self.resumed: list[tuple[str | None, Pause, dict[int, Decision]]] = []
        self.calls = 0

    def definitions(self) -> list[ToolDefinition]:
        """Exactly run_code."""
        return [RUN_CODE]

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """The first call pauses; later ones answer at once."""
        self.calls += 1
        if self.calls > 1:
            return ToolCallOutput("later", False)
        pending = PendingCall(3, "delete_object", "kcp", {"name": "web-1"}, "destructive")
        return ToolCallOutput("paused", False, pause=Pause((pending,), b"snapshot", {"n": 1}))

    async def resume(
        self, thread_id: str | None, pause: Pause, decisions: Mapping[int, Decision]
    ) -> ToolCallOutput:
        """The snippet's value after the decision."""
        self.resumed.append((thread_id, pause, dict(decisions)))
        word = "deleted" if decisions[3].approved else "denied"
        return ToolCallOutput(f'"{word}"', False, audit={"nested_calls": []})


async def test_code_mode_resumes_the_snippet_through_the_executor() -> None:
    """The snapshot and decisions go to the executor's resume; its output is the
    run_code result the model then reads."""
    script = [ToolCalls(("run_code", {"code": "await delete_object(name='web-1')"})), "Done."]
    executor = PausingRunCode()
    async with FakeOpenAI(script) as fake:
        backend = OpenAiCompatibleBackend(ModelConfig(base_url=fake.base_url, model="m"), executor)
        try:
            pause, conversation = roundtrip(await backend.run(REQUEST))
            assert pause.snapshot == b"snapshot"
            decisions = {3: Decision(True, "alice")}
            done = await backend.resume(REQUEST, conversation, pause, decisions)
        finally:
            await backend.aclose()
    assert done.reply == "Done."
    assert executor.resumed == [(None, pause, decisions)]
    (tool_message,) = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == '"deleted"'


async def test_the_small_model_loop_pauses_and_goes_on_from_its_block() -> None:
    """The code-block protocol: the paused block's result is answered as usual."""
    script = ["```python\nawait delete_object(name='web-1')\n```", "It is deleted."]
    executor = PausingRunCode()
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, model="m", harness=True, answer_samples=1)
        backend = OpenAiCompatibleBackend(params, executor)
        try:
            pause, conversation = roundtrip(await backend.run(REQUEST))
            done = await backend.resume(REQUEST, conversation, pause, {3: Decision(True, "a")})
        finally:
            await backend.aclose()
    assert done.status == "done"
    assert done.reply == "It is deleted."
    last = fake.requests[1]["messages"][-1]
    assert last["role"] == "user"
    assert "deleted" in last["content"]


async def test_a_damaged_conversation_fails_the_run_clearly() -> None:
    """A stored state this version cannot read is a failed run with the reason."""
    async with FakeOpenAI([]) as fake:
        backend = OpenAiCompatibleBackend(
            ModelConfig(base_url=fake.base_url, model="m"), PausingRunCode()
        )
        try:
            result = await backend.resume(REQUEST, {"version": 99}, Pause(()), {})
        finally:
            await backend.aclose()
    assert result.status == "failed"
    assert result.error is not None
    assert "cannot be resumed" in result.error
    assert "format 99" in result.error


async def test_warm_up_sends_the_start_of_every_run_with_a_one_token_answer() -> None:
    """warm_up: the same system prompt and tools a run sends, max_tokens 1, so a
    llama.cpp prompt cache holds them; then a run's request starts with the same
    bytes. A failing endpoint is logged, not raised."""
    script = [Reply("x"), "Hello."]
    executor = PausingRunCode()
    async with FakeOpenAI(script) as fake:
        backend = OpenAiCompatibleBackend(ModelConfig(base_url=fake.base_url, model="m"), executor)
        try:
            seconds = await backend.warm_up()
            await backend.run(REQUEST)
        finally:
            await backend.aclose()
    assert seconds >= 0
    warm, real = fake.requests
    assert warm["max_tokens"] == 1
    assert warm["messages"][0] == real["messages"][0]  # the system prompt, byte for byte
    assert warm["tools"] == real["tools"]
    async with FakeOpenAI([]) as gone:
        url = gone.base_url
    backend = OpenAiCompatibleBackend(
        ModelConfig(base_url=url, model="m", retries=0), executor, backoff=RecordingBackoff()
    )
    try:
        assert await backend.warm_up() >= 0  # nobody listens: logged, not raised
    finally:
        await backend.aclose()
