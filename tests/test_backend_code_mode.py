"""The backend over the real code-mode executor: run_code runs in Monty workers.

The inner tools are in memory (``tests/fakes/executor.py``); the sandbox, the
engine, the audit and the logs are real. One Monty pool serves the session
(``monty_pool`` in conftest).
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.logging import configure_logging, reset_logging
from daemon.model import OpenAiCompatibleBackend
from daemon.runtime.runs import Prompt, RunRequest, current_tool_use
from daemon.tools import AuditEntry
from tests.fakes.executor import FakeToolExecutor, code_mode_over
from tests.fakes.fake_openai import FakeOpenAI, ToolCalls

PODS = [
    {"metadata": {"name": f"pod-{i}"}, "status": {"phase": "Failed" if i % 25 == 0 else "Running"}}
    for i in range(200)
]
FILTER = "pods = await list_pods(namespace='prod')\n[p['metadata']['name'] for p in pods if p['status']['phase'] != 'Running']"  # noqa: E501 -- one snippet as the model sends it


def inner_tools() -> FakeToolExecutor:
    """A read-only list tool with a large result and an unannotated (so mutating) delete."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_pods(*, namespace: str) -> list:
        """List the pods of a namespace."""
        return PODS

    @fake.tool()
    async def delete_pod(*, namespace: str, name: str) -> str:
        """Delete one pod."""
        return f"deleted {name}"

    return fake


@pytest.fixture
async def code_mode(
    monty_pool: Any,
) -> AsyncIterator[tuple[CodeModeToolExecutor, FakeToolExecutor, list]]:
    """CodeModeToolExecutor over the fake tools on the shared pool; observed audit entries."""
    inner = inner_tools()
    seen: list[tuple[str | None, AuditEntry, Any]] = []

    def observer(thread_id: str | None, entry: AuditEntry) -> None:
        seen.append((thread_id, entry, current_tool_use.get()))

    async with code_mode_over(inner, monty_pool, observer=observer) as ex:
        yield ex, inner, seen


def request(text: str, thread: str = "T1", run: str = "R1") -> RunRequest:
    """One prompt in ``thread``."""
    return RunRequest(run, "#ops", thread, [], [Prompt("m1", "alice", text)])


async def run_script(executor: Any, script: list, *requests: RunRequest) -> tuple[FakeOpenAI, list]:
    """Serve ``script`` and run ``requests`` one after another; (fake, results)."""
    async with FakeOpenAI(script) as fake:
        params = ModelConfig(base_url=fake.base_url, api_key="k", model="fake-model")
        backend = OpenAiCompatibleBackend(params, executor)
        try:
            results = [await backend.run(r) for r in requests]
        finally:
            await backend.aclose()
    return fake, results


# the verbose events of spec 0004 (Logging, A9); other lifecycle events may come and go
SPEC_EVENTS = {
    "model.tool_call",
    "model.tool_result",
    "mcp.tool_call",
    "mcp.tool_result",
    "model.turn_summary",
}


async def test_run_code_filters_in_the_sandbox_and_only_the_answer_reaches_the_model(code_mode):
    """The tools are [run_code]; 200 pods stay in the sandbox, the model gets 8 names."""
    ex, inner, seen = code_mode
    script = [ToolCalls(("run_code", {"code": FILTER})), "8 pods are failing."]
    fake, (result,) = await run_script(ex, script, request("which pods are failing?"))
    assert [t["function"]["name"] for t in fake.requests[0]["tools"]] == ["run_code"]
    tool_message = fake.requests[1]["messages"][-1]
    assert json.loads(tool_message["content"]) == [f"pod-{i}" for i in range(0, 200, 25)]
    assert inner.calls == [("list_pods", {"namespace": "prod"})]
    assert result.reply == "8 pods are failing."
    m = result.metrics
    assert (m.rounds, m.run_code_calls, m.nested_calls) == (2, 1, 1)
    assert m.bytes_in == len(json.dumps(PODS).encode())
    assert m.bytes_out == len(tool_message["content"].encode())
    assert m.bytes_in > 50 * m.bytes_out  # the context saving code mode buys
    audit = result.records[2].tool_use_result
    assert [(c["tool"], c["mutating"]) for c in audit["nested_calls"]] == [("list_pods", False)]
    # the observer could attribute the nested call to the run and the assistant record
    (_, started, _), (thread, entry, ctx) = seen  # as the call starts, and as it ends
    assert (started.outcome, entry.outcome, started.key) == ("started", "ok", entry.key)
    assert (thread, entry.tool) == ("T1", "list_pods")
    assert (ctx.run_id, ctx.thread_id, ctx.record_uuid) == ("R1", "T1", result.records[1].uuid)


async def test_the_variables_note_reaches_the_next_run_and_the_tools_stay_identical(code_mode):
    """The engine's note goes on the next run's user message; run_code's description stays."""
    ex, inner, _ = code_mode
    script = [ToolCalls(("run_code", {"code": FILTER})), "8 failing.", "pod-0 first.", "yes."]
    fake, _ = await run_script(
        ex,
        script,
        request("which fail?"),
        request("which failed first?", run="R2"),
        request("sure?", run="R3"),
    )
    first, _, second, third = fake.requests
    # list_pods declares no output schema: the first run taught its shape, which its
    # stub shows from the next run on (issue 19); then run_code stays byte-identical
    assert "Returns (observed)" not in json.dumps(first["tools"])
    assert "Returns (observed)" in json.dumps(second["tools"])
    assert json.dumps(second["tools"]) == json.dumps(third["tools"])
    assert first["messages"][0] == second["messages"][0]  # system prompt
    note = second["messages"][-1]["content"]
    assert note.startswith("which failed first?\n\n")
    shape, variables = note.split("\n\n", 1)[1].split("\n")
    assert shape.startswith("[run_code: the result shape of list_pods (it declares none)")
    assert variables.startswith("[run_code variables still in scope: pods: list[200]")
    assert third["messages"][-1]["content"].split("\n\n", 1)[1] == variables  # said once
    assert len(inner.calls) == 1  # nothing fetched again


async def test_mutating_nested_calls_warn_without_verbose(code_mode):
    """A6: each mutating nested call is a warning line with mutating=true; read-only ones quiet."""
    ex, _, _ = code_mode
    stream = io.StringIO()
    configure_logging(False, stream)
    try:
        code = "await list_pods(namespace='prod')\nawait delete_pod(namespace='prod', name='pod-0')"
        script = [ToolCalls(("run_code", {"code": code})), "deleted"]
        await run_script(ex, script, request("delete pod-0"))
    finally:
        reset_logging()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["level"], e["event"], e["tool"], e["mutating"], e["via"]) for e in lines] == [
        ("warning", "mcp.tool_call", "delete_pod", True, "code_mode"),
        ("warning", "mcp.tool_result", "delete_pod", True, "code_mode"),
    ]
    assert lines[0]["arguments"] == {"namespace": "prod", "name": "pod-0"}


async def test_verbose_logs_model_and_mcp_events_in_order(code_mode):
    """--verbose: model.tool_call, mcp.tool_call/result (via code_mode), tool_result, summary."""
    ex, _, _ = code_mode
    stream = io.StringIO()
    configure_logging(True, stream)
    try:
        script = [ToolCalls(("run_code", {"code": FILTER})), "8 failing."]
        await run_script(ex, script, request("which fail?"))
    finally:
        reset_logging()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    events = [e for e in lines if e["event"] in SPEC_EVENTS]
    assert [e["event"] for e in events] == [
        "model.tool_call",
        "mcp.tool_call",
        "mcp.tool_result",
        "model.tool_result",
        "model.turn_summary",
    ]
    mcp_result = events[2]
    assert (mcp_result["via"], mcp_result["tool"], mcp_result["is_error"]) == (
        "code_mode",
        "list_pods",
        False,
    )
    assert mcp_result["bytes"] == len(json.dumps(PODS).encode())
    assert events[3]["content"] == [f"pod-{i}" for i in range(0, 200, 25)]  # JSON-decoded
    summary = events[4]
    assert (summary["nested_calls"], summary["bytes_in"]) == (1, mcp_result["bytes"])
