"""Property tests: values into and out of the sandbox (daemon.code_mode.convert).

Any JSON-like value (deep nesting, huge ints, NaN and infinities, lone
surrogates, keys that are not strings) converts to a value or raises the
clear ``ConversionError``, never anything else; what comes out is strict
JSON that encodes to UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.code_mode.convert import (
    MAX_DEPTH,
    ConversionError,
    _loads,
    _to_json,
    dumps_compact,
    log_content,
    nested_value,
    result_bytes,
    to_json_value,
)
from daemon.tools import ToolCallOutput

SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udbff\udc00x", "\\ud800"])
TEXT = st.text(max_size=20) | SURROGATES
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(4000, 6000).map(lambda digits: 10**digits)  # past int-to-text's limit
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
KEYS = TEXT | st.integers() | st.floats() | st.none() | st.tuples(st.integers(), TEXT)


def nest(depth: int, kind: str) -> Any:
    """A list or dict nested ``depth`` levels (``depth`` containers)."""
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


DEEP = st.builds(nest, st.integers(0, 3 * MAX_DEPTH), st.sampled_from(["list", "dict"]))
VALUES = st.recursive(
    SCALARS | DEEP,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers() | TEXT, max_size=3)
        | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=12,
)


def _strict_json(value: Any) -> None:
    """Plain JSON with no NaN and no lone surrogate: what the model may be sent."""
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_out_of_the_sandbox_a_value_or_a_clear_error(value):
    """to_json_value and dumps_compact give strict UTF-8 JSON, or raise ConversionError."""
    try:
        converted = to_json_value(value)
    except ConversionError:
        return  # the clear error: its text is pinned in test_the_depth_limit_is_exact
    _strict_json(converted)
    dumps_compact(value).encode("utf-8")


class _Flag(int):
    """An int subclass, like a sandbox enum: converts to a plain int."""


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, SCALARS | st.integers().map(_Flag), max_size=5))
def test_flat_arguments_convert_as_the_walk_converts_them(value):
    """The shortcut for one level of scalars (tool arguments) gives what the walk gives:
    the same dict, surrogates replaced, NaN as text, plain ints, or the same error."""
    try:
        walked: Any = _to_json(value, 0)
    except ConversionError as exc:
        with pytest.raises(ConversionError, match=re.escape(str(exc))):
            to_json_value(value)
        return
    converted = to_json_value(value)
    assert converted is not value
    assert json.dumps(converted) == json.dumps(walked)
    assert [type(v) for v in converted.values()] == [type(v) for v in walked.values()]


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans())
def test_into_the_sandbox_a_value_or_a_clear_error(value, as_structured):
    """A tool result (text or structured) becomes a sandbox value, or raises ConversionError.

    The value holds no lone surrogate; counting and logging it never raises.
    """
    if as_structured:
        output = ToolCallOutput("", False, structured={"v": value})
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            text = f"not JSON: a {type(value).__name__}"  # keys or ints JSON cannot write
        output = ToolCallOutput(text, False)
    assert result_bytes(output) >= 0
    log_content(output)
    try:
        got = nested_value(output)
    except ConversionError:
        return  # the clear error: its text is pinned in test_the_depth_limit_is_exact
    json.dumps(got, ensure_ascii=False).encode("utf-8")


@given(st.text() | SURROGATES)
def test_any_tool_text_is_a_value_or_a_clear_error(text):
    """Arbitrary tool text (JSON or not) never raises anything but ConversionError."""
    output = ToolCallOutput(text, False)
    log_content(output)
    try:
        got = nested_value(output)
    except ConversionError:
        return
    json.dumps(got, ensure_ascii=False).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    ),
    st.sampled_from(["", " ", "\n", "\t", "\ufeff", "x", "]", "\u00a0"]),
    st.sampled_from(["", " ", "\r\n", "x", "}", ",", "\u00a0"]),
)
def test_tool_text_parses_as_json_loads_parses_it(value, before, after):
    """The scanner's shortcut gives json.loads's value, or json.loads's error."""
    text = before + json.dumps(value) + after
    try:
        expected = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            _loads(text)
        return
    assert json.dumps(_loads(text)) == json.dumps(expected)


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_the_depth_limit_is_exact(kind):
    """MAX_DEPTH containers cross both ways; one more is a ConversionError both ways."""
    assert to_json_value(nest(MAX_DEPTH, kind)) is not None
    with pytest.raises(ConversionError, match=f"nested more than {MAX_DEPTH} levels"):
        to_json_value(nest(MAX_DEPTH + 1, kind))
    ok = ToolCallOutput(json.dumps(nest(MAX_DEPTH, kind)), False)
    assert nested_value(ok) == nest(MAX_DEPTH, kind)
    with pytest.raises(ConversionError):
        nested_value(ToolCallOutput(json.dumps(nest(MAX_DEPTH + 1, kind)), False))
    with pytest.raises(ConversionError):
        nested_value(ToolCallOutput("[" * 10_000 + "]" * 10_000, False))


PY_ATOMS = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.text()
PY_ROWS = st.lists(st.dictionaries(st.text(), PY_ATOMS | st.tuples(PY_ATOMS, PY_ATOMS)), max_size=5)


@given(PY_ROWS)
def test_python_literal_text_arrives_as_the_value_it_writes(rows):
    """str() of rows (dicts, tuples, None, True, any text) arrives as the rows, tuples as
    lists, as their JSON would."""
    output = ToolCallOutput(repr(rows), False)
    assert nested_value(output) == to_json_value(rows)


@pytest.mark.parametrize(
    "text",
    [
        "[INFO] started",
        "{not: valid}",
        "(1 + 2)",
        "(3)",
        "'quoted'",
        "[x for x in y]",
        "[__import__('os')]",
        "{'a': 1}\n{'b': 2}",
        "None",
        "[1, 2] and more",
    ],
)
def test_other_text_stays_text(text):
    """Text that is no Python container literal (a log line, code, a name, one value,
    two literals) arrives as the str it is: literal_eval builds no names or calls."""
    assert nested_value(ToolCallOutput(text, False)) == text
