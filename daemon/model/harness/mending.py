"""The harness's mending of a small model's calls: a ``run_code`` call whose
arguments or code are broken, repaired in place (:func:`mend_call`), and calls
the model wrote as text instead of sending them (:func:`text_calls`).

Log events (logger ``asyncai.backend``): ``harness.repaired`` (info).
"""

from __future__ import annotations

import json

import structlog

from daemon.model.calls import ToolCall, made_up_call
from daemon.model.harness.parsing import recover_arguments, text_tool_calls
from daemon.model.harness.repair import repair_code
from daemon.model.harness.rules import on
from daemon.model.records import RunState

__all__ = ["mend_call", "text_calls"]

log = structlog.get_logger("asyncai.backend")


def text_calls(content: str, names: dict[str, str], state: RunState) -> list[ToolCall]:
    """Tool calls the model wrote in its text, as :class:`ToolCall` with made-up ids
    (none with rule ``text-calls`` off)."""
    if not on("text-calls"):
        return []
    calls = [
        made_up_call(name, arguments, state) for name, arguments in text_tool_calls(content, names)
    ]
    if calls:
        state.metrics.text_tool_calls += len(calls)
    return calls


def mend_call(call: ToolCall, state: RunState) -> None:
    """The harness's repairs of one run_code call, in place: arguments that are not
    valid JSON (rule ``recover-arguments``), then the code (a trailing assignment, a
    variable named like a helper: :func:`~daemon.model.harness.repair.repair_code`)."""
    if call.name != "run_code":
        return
    fixes: list[str] = []
    if call.error is not None:
        if not on("recover-arguments"):
            return
        recovered, how = recover_arguments(call.raw)
        if recovered is None:
            return  # the model is told its arguments did not parse
        call.arguments, call.error = recovered, None
        fixes.append(f"arguments: {how}")
    code = call.arguments.get("code")
    if isinstance(code, str):
        mended, repairs = repair_code(code)
        if repairs:
            call.arguments = {**call.arguments, "code": mended}
            fixes += repairs
    if fixes:
        # replayed (and recorded) as what ran, in valid JSON
        call.raw = json.dumps(call.arguments)
        state.metrics.harness_repairs += len(fixes)
        log.info(
            "harness.repaired",
            run_id=state.request.run_id,
            thread_id=state.request.thread_id,
            tool_use_id=call.id,
            repairs=fixes,
        )
