"""Honest failure (``daemon.model.nodata``): which runs got no data from their calls, and
the reply that says so. Pure: records in, failures and text out."""

from __future__ import annotations

from typing import Any

from daemon.model.nodata import CallFailure, no_data_reply, unanswered_calls
from daemon.model.records import user_record
from sessions.model import Record

DENIED = "PermissionError: denied by bob: not on a friday"


def _use(*calls: tuple[str, str]) -> Record:
    """An assistant record with the ``tool_use`` blocks ``(id, name)``."""
    blocks = [{"type": "tool_use", "id": i, "name": n, "input": {}} for i, n in calls]
    record = user_record(blocks)
    record.message["role"] = "assistant"
    return record


def _result(call_id: str, text: str, is_error: bool, audit: Any = None) -> Record:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}
    return user_record([block], tool_use_result=audit)


def _nested(tool: str, *, is_error: bool = False, outcome: str = "ok") -> dict[str, Any]:
    return {"tool": tool, "is_error": is_error, "outcome": outcome, "bytes": 10}


def test_a_run_without_tool_calls_is_not_affected() -> None:
    """No tool result at all (arithmetic in words): None."""
    assert unanswered_calls([user_record([{"type": "text", "text": "2 + 2?"}])]) is None


def test_direct_calls_all_refused_or_failed_are_named_with_their_reasons() -> None:
    """Each failed direct call is named with its exception line; the same tool and
    reason twice is named once; a PermissionError is a refusal."""
    records = [
        _use(("c1", "get_orders"), ("c2", "get_user")),
        _result("c1", DENIED, True),
        _result("c2", "Traceback ...\nRuntimeError: server gone\nHint: try later", True),
        _use(("c3", "get_orders")),
        _result("c3", DENIED, True),
    ]
    assert unanswered_calls(records) == [
        CallFailure("get_orders", DENIED, refused=True),
        CallFailure("get_user", "RuntimeError: server gone"),
    ]


def test_one_call_with_data_makes_the_run_answerable() -> None:
    """A refused call and one that returned data (an empty result is data too)."""
    records = [
        _use(("c1", "get_orders"), ("c2", "get_user")),
        _result("c1", DENIED, True),
        _result("c2", "(empty result)", False),
    ]
    assert unanswered_calls(records) is None


def test_code_mode_counts_the_nested_calls() -> None:
    """run_code: data when a nested call ended well; refused nested calls are named with
    the snippet's PermissionError; a snippet that called no tool is left out."""
    refused = {"nested_calls": [], "denied_calls": [{"tool": "append_line", "decision": "denied"}]}
    records = [
        _use(("r1", "run_code")),
        _result("r1", "SyntaxError: invalid syntax", True, {"nested_calls": []}),
        _use(("r2", "run_code")),
        _result("r2", f"Traceback ...\n{DENIED}", True, refused),
        _use(("r3", "run_code")),
        _result("r3", '"John Doe"', False, {"nested_calls": [_nested("get_user", is_error=True)]}),
    ]
    assert unanswered_calls(records) == [
        CallFailure("append_line", DENIED, refused=True),
        CallFailure("get_user", "it returned an error"),
    ]
    ok = {"nested_calls": [_nested("get_user")]}
    assert (
        unanswered_calls([*records, _use(("r4", "run_code")), _result("r4", "3", False, ok)])
        is None
    )
    # arithmetic in code, or a snippet that failed before any call: no data was asked for
    assert unanswered_calls(records[:2]) is None
    assert (
        unanswered_calls([_use(("r", "run_code")), _result("r", "4", False, {"nested_calls": []})])
        is None
    )
    # a refusal the snippet caught: the decision is the reason
    caught = {
        "nested_calls": [],
        "denied_calls": [{"tool": "t", "decision": "expired", "decided_by": "x"}],
    }
    assert unanswered_calls([_use(("r", "run_code")), _result("r", "None", False, caught)]) == [
        CallFailure("t", "expired by x", refused=True)
    ]


def test_the_reply_names_each_tool_and_why_and_states_no_data() -> None:
    """What could not be done, each tool with its reason, at most six, no data."""
    failures = [CallFailure("get_orders", DENIED, refused=True), CallFailure("get_user", "boom")]
    reply = no_data_reply(failures)
    assert reply.startswith("I could not find this out: no tool call returned any data")
    assert f"- get_orders was refused: {DENIED}" in reply
    assert "- get_user failed: boom" in reply
    many = no_data_reply([CallFailure(f"t{i}", "x") for i in range(9)])
    assert many.endswith("- and 3 more")
    assert "t6" not in many
