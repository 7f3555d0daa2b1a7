"""Code mode's pure parts: value conversion, the return contract, limits, description, sizing.

No pool and no workers: these are functions of their inputs.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

import daemon.code_mode
from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.catalog.description import RUN_CODE_SCHEMA, run_code_definition
from daemon.code_mode.contract import (
    NO_OUTPUT,
    RESET_NOTE,
    STARTED_HEAD,
    RunCodeText,
    StartedCall,
    is_unawaited_awaitable,
    render_error,
    render_result,
    started_calls_report,
    with_started_calls,
)
from daemon.code_mode.convert import (
    dumps_compact,
    log_content,
    nested_value,
    result_bytes,
    to_json_value,
)
from daemon.code_mode.helpers import HELPERS_SOURCE
from daemon.code_mode.repl.hooks import scope_preamble
from daemon.code_mode.report import audit_json
from daemon.code_mode.sandbox.nested import _entry, _utc
from daemon.code_mode.sandbox.pool import checkout_limits, pool_options
from daemon.code_mode.sandbox.prints import PrintSink
from daemon.limits import CodeModeLimits
from daemon.tools import AuditEntry, CallOutcome, ToolCallOutput, ToolDefinition

# every expectation holds on both paths a snippet can take (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("engine_path")


def test_package_exports_only_the_executor_and_limits():
    """daemon.code_mode re-exports its two public names and nothing else."""
    assert sorted(daemon.code_mode.__all__) == ["CodeModeLimits", "CodeModeToolExecutor"]


# -- value conversion --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (7, 7),
        (2**70, 2**70),
        (1.5, 1.5),
        ("s", "s"),
        ([1, [2]], [1, [2]]),
        ((1, "a"), [1, "a"]),
        ({3, 1, 2}, [1, 2, 3]),
        (frozenset({"b", "a"}), ["a", "b"]),
        ({"k": (1,)}, {"k": [1]}),
        ({1: "a", (1, 2): "b", None: "c"}, {"1": "a", "(1, 2)": "b", "None": "c"}),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (b"\x00", "b'\\x00'"),
        (range(3), "range(0, 3)"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_python_to_json_follows_the_conversion_table(value, expected):
    """Tuples and sets become arrays, non-str keys their repr, NaN/inf strings, the rest repr."""
    assert to_json_value(value) == expected


def test_mixed_set_without_an_order_still_converts():
    """A set whose items cannot be sorted keeps them all."""
    assert sorted(map(str, to_json_value({1, "a"}))) == ["1", "a"]


@pytest.mark.parametrize(
    "document",
    [None, True, 0, -(2**63), 2**63 - 1, 3.25, "", "é", [], {}, {"a": [1, {"b": None}]}],
    ids=repr,
)
def test_json_round_trips_through_python(document):
    """JSON → Python (nested result) → JSON (snippet result) is the identity."""
    text = json.dumps(document)
    value = nested_value(ToolCallOutput(text, False))
    assert value == document
    assert json.loads(dumps_compact(value)) == document


def test_compact_json_has_no_spaces_and_keeps_unicode():
    """Results are compact JSON, not ASCII-escaped."""
    assert dumps_compact({"a": [1, 2], "é": "ü"}) == '{"a":[1,2],"é":"ü"}'


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (ToolCallOutput('{"a": 1}', False), {"a": 1}),
        (ToolCallOutput("[1, 2]", False, structured={"ignored": True}), [1, 2]),
        (ToolCallOutput("", False, structured={"s": 1}), {"s": 1}),
        (ToolCallOutput("plain text", False), "plain text"),
        (ToolCallOutput("{not json", False), "{not json"),
        (ToolCallOutput("", False), ""),
    ],
    ids=["json-text", "text-wins", "structured", "text", "broken-json", "empty"],
)
def test_nested_results_map_per_the_table(output, expected):
    """JSON text parses; structured is used only without text; other text stays str."""
    assert nested_value(output) == expected


def test_result_bytes_and_log_content():
    """Audit bytes count UTF-8; logs decode JSON and truncate long text."""
    assert result_bytes(ToolCallOutput("é", False)) == 2
    assert result_bytes(ToolCallOutput("", False, structured={"a": 1})) == len('{"a":1}')
    assert log_content(ToolCallOutput('{"a": 1}', False)) == {"a": 1}
    long = log_content(ToolCallOutput("x" * 5000, False))
    assert long.startswith("x" * 100)
    assert long.endswith("[5000 chars]")


# -- the return contract --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "prints", "text"),
    [
        ({"a": 1}, "", '{"a":1}'),
        ("as is", "", "as is"),
        (0, "", "0"),
        (False, "", "false"),
        (None, "", NO_OUTPUT),
        (None, "hi\n", '{"output":"hi\\n"}'),
        ([1], "hi\n", '{"output":"hi\\n","result":[1]}'),
        ([], "", "(empty result: the last expression was an empty list)"),
        ({}, "", "(empty result: the last expression was an empty dict)"),
        ("", "", "(empty result: the last expression was an empty string)"),
        ((), "", "(empty result: the last expression was an empty tuple)"),
        (set(), "", "(empty result: the last expression was an empty set)"),
        ([], "p\n", '{"output":"p\\n","result":[]}'),
    ],
)
def test_return_contract_table(value, prints, text):
    """Each row of the return contract: value, prints, both, neither, empty."""
    assert render_result(value, prints) == RunCodeText(text, False)


@pytest.mark.parametrize(
    "value", ["<coroutine external_future(0)>", "<gather(4)>", "<coroutine object f>"]
)
def test_unawaited_awaitables_are_errors(value):
    """A coroutine or gather as the result is an error asking for await."""
    assert is_unawaited_awaitable(value)
    out = render_result(value, "")
    assert out.is_error
    assert "Add `await`" in out.text
    assert value in out.text


def test_strings_that_merely_look_like_awaitables_inside_text_pass():
    """Only a whole-value match is an awaitable; text that mentions one is a result."""
    assert not is_unawaited_awaitable("see <gather(4)> here")
    assert render_result("see <gather(4)> here", "").is_error is False


def test_calls_never_awaited_are_errors_naming_them():
    """A snippet that completed with un-awaited calls says which and that they never ran."""
    out = render_result("done", "", unawaited=["list_objects", "list_objects", "get_events"])
    assert out.is_error
    assert "list_objects(), get_events() were called without `await`" in out.text
    assert "they never ran" in out.text


def test_result_guard_refuses_oversized_results_with_a_preview():
    """Over max_result_chars: an error with the size, a 2 000-char preview and the advice."""
    assert render_result("x" * 20_000, "").is_error is False
    out = render_result("y" * 20_001, "")
    assert out.is_error
    assert "20,001 characters" in out.text
    assert "assign it to a variable and return a filtered subset" in out.text
    assert "y" * 2_000 in out.text
    assert "y" * 2_001 not in out.text
    assert render_result(list(range(10_000)), "", max_result_chars=100).is_error


def test_error_results_carry_hints_notes_reset_and_the_tail_of_prints():
    """An error result: traceback, Hint lines, the await note, the reset note, then prints."""
    out = render_error(
        "Traceback ...\nKeyError: b",
        prints="p" * 3_000 + "END",
        hints=["use .get()"],
        unawaited=["f"],
        reset=True,
    )
    assert out.is_error
    lines = out.text.splitlines()
    assert lines[:3] == ["Traceback ...", "KeyError: b", "Hint: use .get()"]
    assert lines[3].startswith("Note: f() was called without `await`")
    assert lines[4] == RESET_NOTE
    assert "last 2,000 of 3,003 characters" in out.text
    assert out.text.endswith("END")


def test_huge_error_messages_are_cut_in_the_middle():
    """An exception carrying a whole tool result stays under the result limit."""
    out = render_error("A" * 50_000 + "TAIL", max_result_chars=20_000)
    assert len(out.text) < 20_000
    assert out.text.endswith("TAIL")


def test_print_sink_caps_output_and_flags_the_overflow():
    """The collector counts bytes; past its cap it drops output and flags the breach.

    It does not raise there (a raise in the flush before a host call would end
    the checkout); only a runaway loop, far past the cap, gets a MemoryError.
    """
    sink = PrintSink(10)
    sink("stdout", "12345")
    sink("stderr", "é")
    sink("stdout", "123456")
    assert sink.overflowed
    assert sink.text == "12345é"
    sink("stdout", "1")  # after the breach, nothing more is kept
    assert sink.text == "12345é"
    with pytest.raises(MemoryError, match="10-byte cap"):
        sink("stdout", "x" * (PrintSink.RUNAWAY_BYTES + 1))


# -- limits, sizing, description ------------------------------------------------


def test_limit_defaults_follow_the_spec():
    """30 s, 10 000 suspensions, 100 calls, 1 MiB prints, 4 GiB heap, 120 s, 300 s, 20 000, 8."""
    limits = CodeModeLimits()
    assert (
        limits.max_feed_duration,
        limits.max_suspensions,
        limits.max_nested_calls,
        limits.max_print_bytes,
        limits.max_memory,
        limits.tool_timeout,
        limits.max_wall,
        limits.max_result_chars,
        limits.max_scopes,
        limits.preamble,
    ) == (30.0, 10_000, 100, 1024**2, 4 * 1024**3, 120.0, 300.0, 20_000, 8, "")
    assert limits.request_timeout == 40.0


@pytest.mark.parametrize("field", ["max_feed_duration", "max_scopes", "tool_timeout"])
@pytest.mark.parametrize("bad", [0, -1, True, "5"])
def test_limits_reject_non_positive_values(field, bad):
    """A limit must be a positive number; the error names the field."""
    with pytest.raises(ValueError, match=field):
        CodeModeLimits(**{field: bad})


def test_pool_is_sized_above_the_scopes_with_finite_waits():
    """max_processes = max_scopes + 3 (private, overshoot, spare); waits are finite."""
    options = pool_options(CodeModeLimits(max_scopes=8, max_feed_duration=30))
    assert options["max_processes"] == 11
    assert options["request_timeout"] == 40.0
    assert 0 < options["checkout_timeout"] < math.inf
    limits = checkout_limits(CodeModeLimits(max_memory=123, max_suspensions=5))
    assert limits["max_memory"] == 123
    assert limits["max_suspensions"] > 10**12  # the host counts per snippet instead


def test_preamble_imports_asyncio_json_re_then_the_operators_code():
    """Every new scope gets the imports and helpers, then limits.preamble."""
    assert scope_preamble(CodeModeLimits()) == HELPERS_SOURCE
    assert HELPERS_SOURCE.startswith("import asyncio\nimport json\nimport re\n")
    assert scope_preamble(CodeModeLimits(preamble="X = 1")) == f"{HELPERS_SOURCE}\nX = 1"


def test_run_code_definition_has_the_schema_rules_contract_and_catalog():
    """The description carries the sandbox rules, the return contract and the catalog."""
    catalog = Catalog(
        [ToolDefinition("list-pods", "List pods in a namespace.", {"type": "object"})]
    )
    definition = run_code_definition(catalog, CodeModeLimits(max_nested_calls=7))
    assert definition.name == "run_code"
    assert definition.input_schema == RUN_CODE_SCHEMA
    assert definition.input_schema is not RUN_CODE_SCHEMA
    text = definition.description
    assert "Sandbox rules:" in text
    assert "Return contract:" in text
    assert NO_OUTPUT in text
    assert "7 function calls" in text
    assert text.endswith(catalog.render())
    assert "list_pods" in text


# ---- the calls a failed snippet started (issue 13) ---------------------------------


def _call(
    tool: str, outcome: CallOutcome = "ok", *, mutating: bool = False, **arguments: Any
) -> StartedCall:
    """A started call as NestedCalls keeps it."""
    return StartedCall(f"k-{tool}", tool, arguments, mutating, outcome)


def test_an_error_ends_with_the_calls_it_started_in_order():
    """A failed snippet's result ends with its calls, Python-call shaped, the mutating
    ones marked, each with how it ended; a call never seen to end is 'unknown'."""
    rendered = with_started_calls(
        render_error("ValueError: boom"),
        [
            _call("delete_object", mutating=True, name="x"),
            _call("get_logs", "cancelled", pod="web-1", tail=50),
            _call("scale", "started", mutating=True, replicas=3),
        ],
    )
    assert rendered.is_error
    assert rendered.text == (
        "ValueError: boom\n"
        f"{STARTED_HEAD}\n"
        "- delete_object(name='x') [mutating]: ok\n"
        "- get_logs(pod='web-1', tail=50): cancelled\n"
        "- scale(replicas=3) [mutating]: unknown\n"
        "A mutating call that was cancelled or whose outcome is unknown may have taken "
        "effect: check its result before calling it again."
    )


def test_no_report_without_calls_or_without_an_error():
    """A result that is not an error, or an error with no calls started, is unchanged."""
    ok = render_result([1, 2])
    assert with_started_calls(ok, [_call("get")]) is ok
    error = render_error("ValueError: boom")
    assert with_started_calls(error, []) is error


def test_long_arguments_are_shortened_on_one_line():
    """Each argument's repr is cut at 40 characters and the line at 200: one line per call."""
    report = started_calls_report([_call("apply", mutating=True, manifest="x\n" * 500)])
    line = report.splitlines()[1]
    assert line.startswith("- apply(manifest='x\\nx\\n")
    assert "…" in line
    assert len(line) < 80


def test_the_report_survives_a_result_at_the_size_limit():
    """When the error text and the report pass max_result_chars, the error text is cut
    (its start and end kept) and the report stays whole."""
    error = "Traceback: start\n" + "y" * 5_000 + "\nRuntimeError: the end"
    calls = [_call("delete_object", mutating=True, name=f"n{i}") for i in range(5)]
    failed = render_error(error, prints="p" * 3_000, max_result_chars=2_000)
    assert len(failed.text) > 2_000  # the prints' tail alone is 2 000 characters
    rendered = with_started_calls(failed, calls, 2_000)
    assert len(rendered.text) <= 2_000
    assert rendered.text.startswith("Traceback: start")
    assert rendered.text.endswith(started_calls_report(calls, 1_000))
    assert "characters of the error cut" in rendered.text


def test_many_calls_fold_read_only_ones_first_and_keep_the_mutating_ones():
    """Past its bound, the report counts read-only calls instead of listing them, so the
    mutating calls stay listed; past that too it is cut with a note."""
    calls = [_call("get", pod=f"p{i}") for i in range(60)]
    calls.insert(30, _call("delete_object", mutating=True, name="keep-me"))
    report = started_calls_report(calls, 200)
    assert report.splitlines() == [
        STARTED_HEAD,
        "- (30 read-only calls)",
        "- delete_object(name='keep-me') [mutating]: ok",
        "- (30 read-only calls)",
    ]
    cut = started_calls_report(calls * 10, 300)
    assert len(cut) <= 300
    assert cut.endswith("calls cut)")


def test_nested_audit_entries_are_the_dataclasss_own():
    """The entries NestedCalls fills in directly are AuditEntry's own, field by field, and
    the audit JSON of one is its as_json()."""
    call = StartedCall("k", "list_objects", {"kcp": "a"}, True)
    call.queue_ms = 1.5
    made = _entry(call, "2026-01-01T00:00:00.000Z", 2.5, "error", True, 7)
    assert made == AuditEntry(
        tool="list_objects",
        arguments={"kcp": "a"},
        is_error=True,
        bytes=7,
        mutating=True,
        started="2026-01-01T00:00:00.000Z",
        duration_ms=2.5,
        outcome="error",
        key="k",
        queue_ms=1.5,
    )
    assert list(vars(made)) == [f.name for f in fields(AuditEntry)]
    assert audit_json([made]) == {"nested_calls": [made.as_json()]}
    assert _entry(call, "t", 0.0, "started").as_json()["is_error"] is False


@pytest.mark.parametrize("ms", [0, 1, 42, 500, 998, 999])
@pytest.mark.parametrize("whole", [0, 1_764_514_000, 4_102_444_799])
def test_audit_times_are_iso_8601_in_utc_to_the_millisecond(whole, ms):
    """An audit entry's start reads as datetime's own ISO 8601 of the moment, in ms, Z."""
    moment = whole + ms / 1000 + 0.0004
    expected = datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds")
    assert _utc(moment) == expected.replace("+00:00", "Z")


def test_a_coroutine_read_as_its_result_gets_the_await_first_note():
    """A coroutine indexed, or read by attribute, before it was awaited (``await
    f()['k']`` binds the subscript first): the note says so and shows the parenthesised
    form; any other error with pending calls keeps the missing-await note."""
    for error in (
        "TypeError: 'coroutine' object is not subscriptable",
        "AttributeError: 'coroutine' object has no attribute 'get'",
    ):
        out = render_error(f"Traceback ...\n{error}", unawaited=["f", "g"])
        note = out.text.splitlines()[2]
        assert note.startswith("Note: f(), g() were read before they were awaited, so they")
        assert "(await f(...))['key']" in note
    out = render_error("Traceback ...\nKeyError: b", unawaited=["f"])
    assert out.text.splitlines()[2].startswith("Note: f() was called without `await`")
    # a source line of the traceback that quotes the message is not the exception
    quoted = "Traceback ...\n    x = \"'coroutine' object is not subscriptable\"\nKeyError: b"
    note = render_error(quoted, unawaited=["f"]).text.splitlines()[3]
    assert note.startswith("Note: f() was called without `await`")
