"""A function's result as a small typed example (``daemon.model.harness.shapes``), and
which functions a question is about before any snippet ran (``topics.asked_functions``):
pure, without I/O. Rule ``shape-first``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.code_mode.catalog import Catalog
from daemon.code_mode.catalog.shapes import infer_shape, merge
from daemon.model.harness import catalog_topics
from daemon.model.harness.rules import Switches, active
from daemon.model.harness.shapes import (
    MAX_EXAMPLE_CHARS,
    SHAPES_HEADER,
    result_example,
    shapes_first,
    typed_example,
)
from daemon.model.harness.topics import asked_functions
from daemon.tools import ToolDefinition

OFF = Switches(off=frozenset({"shape-first"}))
STR = {"type": "string"}
INT = {"type": "integer"}


@pytest.mark.parametrize(
    ("schema", "example"),
    [
        (STR, "str"),
        ({"type": "number"}, "float"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"anyOf": [{"type": "null"}, INT]}, "int | None"),
        ({}, "Any"),
        ({"enum": ["Running", "Failed"]}, "'Running' | 'Failed'"),
        ({"enum": list("abcdef")}, "'a' | 'b' | 'c' | 'd' | ..."),
        ({"const": 3}, "3"),
        ({"type": "array"}, "list"),
        ({"type": "object"}, "dict"),
        ({"type": "object", "additionalProperties": STR}, "{str: str}"),
        (
            {"type": "array", "items": {"type": "object", "properties": {"n": INT}}},
            "[{'n': int}]",
        ),
        (  # a required list: the other keys may be missing
            {"type": "object", "properties": {"a": INT, "b": STR}, "required": ["a"]},
            "{'a': int, 'b'?: str}",
        ),
        (  # no required list says nothing of which keys are missing
            {"type": "object", "properties": {"a": INT}},
            "{'a': int}",
        ),
        (
            {"type": "object", "properties": {"a": INT}, "additionalProperties": True},
            "{'a': int, ...}",
        ),
        (  # $ref resolved; a recursive one shown one level
            {
                "$defs": {
                    "Node": {
                        "type": "object",
                        "properties": {
                            "name": STR,
                            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                        },
                    }
                },
                "$ref": "#/$defs/Node",
            },
            "{'name': str, 'children': [{...}]}",
        ),
    ],
)
def test_a_schema_is_one_typed_value(schema: dict[str, Any], example: str) -> None:
    """Types as leaves, one item of each list, a ``?`` after a key a required list leaves
    out, ``...`` for keys the schema does not list."""
    assert typed_example(schema) == example


def test_a_learned_shape_marks_a_key_only_some_items_hold() -> None:
    """A shape learned from items where one lacked a key (a count left out when zero)
    shows that key as one that may be missing."""
    shape = infer_shape(
        {"items": [{"name": "a", "ready": 2}, {"name": "b"}], "kind": "List"},
    )
    assert typed_example(shape) == "{'items': [{'name': str, 'ready'?: int}], 'kind': str}"
    shape = merge(shape, infer_shape({"items": [], "kind": "List", "next": None}))
    assert typed_example(shape) == (
        "{'items': [{'name': str, 'ready'?: int}], 'kind': str, 'next'?: None}"
    )


def _wide(depth: int) -> dict[str, Any]:
    """An object with 15 keys, each holding a list of the same one level shallower."""
    if depth == 0:
        return STR
    item = _wide(depth - 1)
    return {
        "type": "object",
        "properties": {f"key_{i}": {"type": "array", "items": item} for i in range(15)},
    }


def test_a_large_result_loses_late_keys_then_depth_to_fit() -> None:
    """Too long whole: fewer keys per object first (the first ones kept), then less depth;
    never over the limit."""
    text = typed_example(_wide(6))
    assert len(text) <= MAX_EXAMPLE_CHARS
    assert text.startswith("{'key_0': [{'key_0': [")
    assert "..." in text
    short = typed_example(_wide(6), limit=40)
    assert len(short) <= 40


_SCHEMA_KEYS = st.sampled_from(
    ["type", "properties", "items", "required", "anyOf", "enum", "const", "$ref",
     "additionalProperties", "allOf"]
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.sampled_from(["object", "array", "string", "integer", "#/x", "#"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(_SCHEMA_KEYS | st.text(max_size=6), inner, max_size=5),
    max_leaves=40,
)  # fmt: skip


@given(schema=_JSON, limit=st.integers(min_value=0, max_value=500))
def test_any_schema_gives_an_example_within_the_limit(schema: Any, limit: int) -> None:
    """Whatever the schema (junk included), the example is text of at most ``limit``
    characters, never an exception."""
    text = typed_example(schema, limit=limit)
    assert isinstance(text, str)
    assert len(text) <= max(limit, 1)


def _tool(name: str, description: str, output_schema: dict | None = None, **props: Any):
    return ToolDefinition(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": props, "required": list(props)},
        output_schema=output_schema,
    )


PODS = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "metadata": {"type": "object", "properties": {"name": STR}},
                    "status": {"type": "object", "properties": {"phase": STR}},
                },
            },
        }
    },
    "required": ["items"],
}
RESPONSE = {
    "type": "object",
    "properties": {"status": INT, "body": STR, "json": {}},
    "required": ["status", "body"],
}
LEARNED = infer_shape({"timezone": "UTC", "datetime": "2026-01-01T00:00:00", "is_dst": False})


def catalog() -> Catalog:
    """A declared schema, a learned shape, a wrapped list (sent as text) and a text tool."""
    wrapped = {
        "type": "object",
        "properties": {"result": {"type": "array", "items": STR}},
        "title": "list_namesOutput",
    }
    return Catalog(
        [
            _tool("list_pods", "List the pods of a namespace.", PODS, namespace=STR),
            _tool("http_get", "Fetch a URL.", RESPONSE, url=STR),
            _tool("get_current_time", "The current time in a time zone.", timezone=STR),
            _tool("list_names", "List the names.", wrapped),
            _tool("git_log", "The commit log of a git repository, as text.", repo_path=STR),
        ],
        observed=lambda d: LEARNED if d.name == "get_current_time" else None,
    )


def test_each_function_with_a_schema_or_a_learned_shape_has_an_example() -> None:
    """A declared schema and a learned shape give ``name(...) returns ...``; a result the
    sandbox gets as text (no schema, or a wrapped list) gives none."""
    entries = catalog().entries
    assert result_example(entries["list_pods"]) == (
        "list_pods(...) returns {'items': [{'metadata': {'name': str}, 'status': {'phase': str}}]}"
    )
    assert result_example(entries["get_current_time"]) == (
        "get_current_time(...) returns {'timezone': str, 'datetime': str, 'is_dst': bool}"
    )
    assert result_example(entries["git_log"]) is None
    assert result_example(entries["list_names"]) is None
    assert len(result_example(entries["list_pods"], limit=40) or "") <= 40


def test_the_shapes_are_shown_unless_the_rule_is_off() -> None:
    """On (the default): the header, one line per function that has an example, and the
    note on ``?`` only when a line marks a key. Off: nothing."""
    cat = catalog()
    assert shapes_first(["list_pods", "git_log"], cat) == "\n".join(
        [SHAPES_HEADER, result_example(cat.entries["list_pods"]) or ""]
    )
    shown = shapes_first(["http_get"], cat).splitlines()
    assert shown[1] == "http_get(...) returns {'status': int, 'body': str, 'json'?: Any}"
    assert shown[2].startswith("A key marked ? may be missing")
    assert shapes_first(["git_log", "list_names", "no_such"], cat) == ""
    with active(OFF):
        assert shapes_first(["list_pods"], cat) == ""


def test_the_functions_a_question_is_about() -> None:
    """A URL in the question: the functions that fetch one. Else those whose stub covers
    at least two of its words, at most two, none two words short of the best; a one-word
    match is noise."""
    cat = catalog()
    topics = catalog_topics(cat)
    fetchers = ["http_get"]
    assert asked_functions("How many items at http://h/x.json?", topics, fetchers) == ["http_get"]
    assert asked_functions("which pods of namespace prod are failing?", topics, fetchers) == [
        "list_pods"
    ]
    assert asked_functions("which pods are failing?", topics, fetchers) == []
    assert asked_functions("the sum of the first 10 primes", topics, fetchers) == []
    both = asked_functions("the git log of the repository at the current time", topics)
    assert both == ["git_log", "get_current_time"]
    far = asked_functions("the commit log of the git repository at the current time", topics)
    assert far == ["git_log"]
    assert asked_functions("the commit log of the git repository", topics, limit=1) == ["git_log"]
