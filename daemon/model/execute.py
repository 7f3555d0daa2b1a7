"""Running one tool call the model made: its log events, its own timeout, and the
error results the model can act on (arguments that did not parse, a tool that does
not exist, a tool that timed out or whose transport failed).

Log events (logger ``asyncai.backend``, info): ``model.tool_call`` (tool,
arguments) and ``model.tool_result`` (tool, is_error, bytes, content
JSON-decoded when possible).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from daemon.approvals import ApprovalGate, Decision, Pause, PendingCall
from daemon.errors import ToolTransportError
from daemon.logging import log_content
from daemon.model.calls import ToolCall
from daemon.model.prompts import INVALID_ARGUMENTS
from daemon.model.records import RunState
from daemon.runtime.progress import tool_call_started
from daemon.runtime.runs import ToolUseContext, current_tool_use
from daemon.runtime.timing import SpanKind, snippet_attribute, timed
from daemon.tools import ToolCallOutput, ToolDefinition, ToolExecutor

__all__ = ["decided_call", "run_call"]

log = structlog.get_logger("asyncai.backend")


async def run_call(
    caller: ToolExecutor,
    names: dict[str, str],
    call: ToolCall,
    record_uuid: str,
    state: RunState,
    limit: float,
    *,
    gate: ApprovalGate | None = None,
    definitions: dict[str, ToolDefinition] | None = None,
) -> ToolCallOutput:
    """Run ``call`` on ``caller`` (``names`` maps the model's tool names to the real
    ones) within ``limit`` seconds; every failure is a result, never an exception.

    With a ``gate`` (direct mode: the model calls MCP tools itself), a call of a
    mutating tool is first put to it: refused, it is an error result; to be
    asked, it is not made and the result carries a :class:`~daemon.approvals.Pause`.
    """
    request = state.request
    ids = {"run_id": request.run_id, "thread_id": request.thread_id, "tool_use_id": call.id}
    shown = call.arguments if call.error is None else log_content(call.raw)
    log.info("model.tool_call", tool=call.name, arguments=shown, **ids)
    if call.error is not None:
        text = INVALID_ARGUMENTS.format(tool=call.name, error=call.error)
        output = ToolCallOutput(text, is_error=True)
    elif call.name not in names:
        offered = ", ".join(sorted(names)) or "none"
        text = f"Error: there is no tool named {call.name!r}; the tools are: {offered}."
        output = ToolCallOutput(text, is_error=True)
    else:
        definition = (definitions or {}).get(names[call.name])
        output = await _execute(
            caller,
            names[call.name],
            call.arguments,
            call.id,
            record_uuid,
            state,
            limit=limit,
            gate=gate if definition is not None and definition.mutating else None,
            definition=definition,
        )
    log.info(
        "model.tool_result",
        tool=call.name,
        is_error=output.is_error,
        bytes=len(output.content.encode()),
        content=log_content(output.content),
        **ids,
    )
    return output


async def _execute(
    caller: ToolExecutor,
    name: str,
    arguments: dict,
    tool_use_id: str,
    record_uuid: str,
    state: RunState,
    *,
    limit: float,
    gate: ApprovalGate | None = None,
    definition: ToolDefinition | None = None,
) -> ToolCallOutput:
    """One tool call under its own timeout, with ``current_tool_use`` set for the audit
    (and for the gate, which learns the run from it)."""
    request = state.request
    token = current_tool_use.set(
        ToolUseContext(request.run_id, request.thread_id, tool_use_id, record_uuid, request.channel)
    )
    try:
        if gate is not None and definition is not None:
            verdict = gate(definition, arguments)
            if verdict.action == "deny":
                return ToolCallOutput(f"PermissionError: {verdict.reason}", is_error=True)
            if verdict.action == "ask":
                pending = PendingCall(
                    0, definition.name, definition.server, arguments, verdict.reason
                )
                return ToolCallOutput(
                    f"{definition.qualified_name} waits for a person's approval",
                    is_error=False,
                    pause=Pause(calls=(pending,)),
                )
        tool_call_started(name)  # the run's progress: "running code"
        kind, attributes = _span_of(name, arguments, definition)
        with timed(kind, **attributes) as span:
            async with asyncio.timeout(limit):
                output = await caller.call_tool(name, arguments)
            if span is not None:
                span.attributes["outcome"] = _outcome(output)
                span.attributes["bytes"] = len(output.content.encode())
            return output
    except TimeoutError:
        return ToolCallOutput(
            f"Error: {name} did not finish within {limit:g} s and was cancelled.", is_error=True
        )
    except ToolTransportError as exc:
        return ToolCallOutput(f"Error: tool error: {exc}", is_error=True)
    finally:
        current_tool_use.reset(token)


def _span_of(
    name: str, arguments: dict, definition: ToolDefinition | None
) -> tuple[SpanKind, dict[str, Any]]:
    """The span of the model's call of ``name``: ``run_code`` (the snippet's size and the
    snippet, capped and redacted), or a direct ``tool_call`` (server, tool, mutating)."""
    if name == "run_code":
        code = arguments.get("code")
        text = code if isinstance(code, str) else ""
        return "run_code", {"snippet_chars": len(text), "snippet": snippet_attribute(text)}
    server = definition.server if definition is not None else None
    mutating = definition.mutating if definition is not None else True
    return "tool_call", {"server": server, "tool": name, "mutating": mutating}


def _outcome(output: ToolCallOutput) -> str:
    """How a call of the model's ended, as its span says: ``paused`` for approval, else
    ``error`` or ``ok``."""
    if output.pause is not None:
        return "paused"
    return "error" if output.is_error else "ok"


async def decided_call(
    caller: ToolExecutor,
    pending: PendingCall,
    decision: Decision,
    tool_use_id: str,
    record_uuid: str,
    state: RunState,
    *,
    limit: float,
) -> ToolCallOutput:
    """A direct-mode call a person decided: made when approved (no second question) and
    its name still reaches the server the request showed, else the ``PermissionError``
    the model reads (issue 26: after a restart another server may own the name)."""
    if not decision.approved:
        reason = f": {decision.reason}" if decision.reason else ""
        return ToolCallOutput(f"PermissionError: denied by {decision.by}{reason}", is_error=True)
    await caller.start()  # its tools are listed once it started (idempotent)
    now = next((d for d in caller.definitions() if d.name == pending.tool), None)
    if now is None or now.server != pending.server:
        shown = f"{pending.server}.{pending.tool}" if pending.server else pending.tool
        reaches = f"now reaches {now.qualified_name}" if now is not None else "is gone"
        log.warning("model.approved_call_changed", tool=pending.tool, shown=shown, now=reaches)
        return ToolCallOutput(
            f"PermissionError: the approved call was not made: {shown} was approved, "
            f"but {pending.tool} {reaches}",
            is_error=True,
        )
    return await _execute(
        caller, pending.tool, pending.arguments, tool_use_id, record_uuid, state, limit=limit
    )
