"""Issue 19, pure: learned shapes (infer, merge, fit), the searchable catalog, search and describe.

No sandbox and no server: the catalog, the description and the two helpers
are functions of tool definitions; shapes are functions of JSON values.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.code_mode.catalog.catalog import CallRejected, Catalog
from daemon.code_mode.catalog.description import run_code_description
from daemon.code_mode.catalog.learned import LearnedShape, ShapeBook, shape_notice
from daemon.code_mode.catalog.schema import return_sketch
from daemon.code_mode.catalog.search import (
    call_helper,
    describe,
    helper_result,
    index_lines,
    is_helper,
    search,
    words,
)
from daemon.code_mode.catalog.shapes import (
    MAX_NODES,
    dump_shape,
    fits,
    infer_shape,
    load_shape,
    merge,
)
from daemon.code_mode.helpers import check_reserved
from daemon.tools import ToolCallOutput, ToolDefinition

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


def tool(
    name: str, description: str, params: dict[str, Any] | None = None, **extra: Any
) -> ToolDefinition:
    """A tool definition with string parameters (all required)."""
    params = params or {}
    schema = {"type": "object", "properties": params, "required": list(params)}
    return ToolDefinition(name=name, description=description, input_schema=schema, **extra)


def big_catalog(n: int = 40, budget: int | None = 6000) -> Catalog:
    """``n`` tools with long descriptions: their stubs are over 6 000 characters."""
    defs = [
        tool(
            f"get_thing_{i}",
            f"Fetch thing number {i} by its id.\nIt has a long explanation that goes on " * 2,
            {"id": {"type": "string", "description": "the id of the thing, e.g. thing-3"}},
        )
        for i in range(n)
    ]
    return Catalog(defs, budget=budget)


# shapes -------------------------------------------------------------------------------------


def test_a_value_gives_the_same_sketch_form_as_a_declared_schema() -> None:
    """A result's shape renders like a declared output schema's Returns: sketch."""
    value = {"items": [{"name": "a", "n": 1}, {"name": "b", "n": 2.5, "x": None}], "total": 2}
    shape = infer_shape(value)
    assert return_sketch(shape) == '{"items": [{"name": str, "n": float, "x": None}], "total": int}'
    assert load_shape(dump_shape(shape)) == shape


def test_shapes_stop_at_4_levels_and_12_properties() -> None:
    """The sketch's bounds: containers 4 deep show as {...}/[...], a 13th key as ..."""
    deep = {"a": {"b": {"c": {"d": {"e": 1}}}}}
    assert return_sketch(infer_shape(deep)) == '{"a": {"b": {"c": {"d": {...}}}}}'
    wide = {f"k{i:02}": i for i in range(13)}
    sketch = return_sketch(infer_shape(wide))
    assert sketch.endswith('"k11": int, ...}')
    assert "k12" not in sketch


def test_fit_needs_the_required_keys_and_the_kinds() -> None:
    """A missing key or another kind does not fit; an extra key does."""
    shape = infer_shape({"id": "a", "n": 1, "tags": ["x"]})
    assert fits({"id": "b", "n": 2, "tags": [], "more": True}, shape)
    assert not fits({"id": "b", "tags": []}, shape)
    assert not fits({"id": "b", "n": "2", "tags": []}, shape)
    assert not fits([{"id": "b"}], shape)
    assert fits(
        {"id": "b", "n": 2.5, "tags": []},
        merge(shape, infer_shape({"id": "c", "n": 0.5, "tags": []})),
    )


def test_merge_keeps_keys_of_both_and_requires_only_the_common_ones() -> None:
    """A tool with two kinds of result settles on one shape that both fit."""
    a, b = {"ok": True, "items": [1]}, {"ok": False, "error": "boom"}
    shape = merge(infer_shape(a), infer_shape(b))
    assert return_sketch(shape) == '{"ok": bool, "items": [int], "error": str}'
    assert shape["required"] == ["ok"]
    assert fits(a, shape)
    assert fits(b, shape)
    assert merge(infer_shape(1), infer_shape("x")) == {
        "anyOf": [{"type": "string"}, {"type": "integer"}]
    }


def test_large_values_are_sampled() -> None:
    """Learning and checking look at a bounded number of values, whatever the size."""
    rows = [{"id": i, "name": f"n{i}"} for i in range(MAX_NODES * 5)]
    shape = infer_shape(rows)
    assert return_sketch(shape) == '[{"id": int, "name": str}]'
    assert fits(rows, shape)


@given(json_values)
def test_every_value_fits_its_own_shape(value: Any) -> None:
    """Property: a value always fits the shape learned from it."""
    assert fits(value, infer_shape(value))


@given(json_values, json_values)
def test_both_values_fit_their_merged_shape(a: Any, b: Any) -> None:
    """Property: merging two shapes never rejects either value they came from."""
    shape = merge(infer_shape(a), infer_shape(b))
    assert fits(a, shape)
    assert fits(b, shape)
    assert load_shape(dump_shape(shape)) == shape


def test_the_book_learns_once_refreshes_on_a_misfit_and_leaves_declared_schemas_alone() -> None:
    """First result: learned; a fitting one: nothing; a misfit: merged; declared: never."""
    book = ShapeBook().channel("#ops")
    d = tool("get_x", "Get x.", server="srv", server_version="1.0")
    out = ToolCallOutput("", False)
    first = book.observe(d, "get_x", out, {"id": "a"})
    assert first is not None
    assert (first.channel, first.server, first.tool, first.server_version, first.refreshed) == (
        "#ops",
        "srv",
        "get_x",
        "1.0",
        False,
    )
    assert book.observe(d, "get_x", out, {"id": "b"}) is None
    assert book.version == 1
    again = book.observe(d, "get_x", out, {"id": "c", "extra": 1, "n": None})
    assert again is None  # extra keys still fit
    changed = book.observe(d, "get_x", out, {"name": "d"})
    assert changed is not None
    assert changed.refreshed
    assert changed.sketch == '{"id": str, "name": str}'
    assert book.shape_for(d) == changed.shape
    # another server version does not see it; a declared schema never learns
    assert book.shape_for(tool("get_x", "Get x.", server="srv", server_version="2.0")) is None
    declared = tool("get_y", "Get y.", output_schema={"type": "object"})
    assert book.observe(declared, "get_y", out, {"a": 1}) is None
    assert book.observe(tool("t", "text"), "t", out, "plain text") is None


def test_a_text_result_teaches_a_first_shape_but_is_not_checked_again() -> None:
    """A result that went in as text is parsed here only to learn a first shape."""
    book = ShapeBook().channel("#ops")
    d = tool("big", "Big.")
    assert book.observe(d, "big", ToolCallOutput('{"rows": [1]}', False), None) is not None
    assert book.observe(d, "big", ToolCallOutput('{"other": "x"}', False), None) is None
    assert (
        book.observe(tool("bad", "Bad."), "bad", ToolCallOutput("[not json", False), None) is None
    )


def test_a_shape_is_its_channels_alone() -> None:
    """What #ops's result taught is #ops's: #help's view of the same book has no shape (its
    catalog's version does not move), and learns its own from its own result."""
    book = ShapeBook()
    ops, help_ = book.channel("#ops"), book.channel("#help")
    d = tool("get_x", "Get x.", server="srv", server_version="1.0")
    out = ToolCallOutput("", False)
    assert ops.observe(d, "get_x", out, {"alice@corp.example": {"role": "admin"}}) is not None
    assert ops.shape_for(d) is not None
    assert help_.shape_for(d) is None
    assert (ops.version, help_.version) == (1, 0)
    mine = help_.observe(d, "get_x", out, {"id": "a"})
    assert mine is not None
    assert mine.channel == "#help"
    assert mine.sketch == '{"id": str}'
    assert "alice" in str(ops.shape_for(d))
    assert book.shape_for(d, channel="") is None  # outside any thread: nothing learned


def test_the_notice_says_what_was_learned_and_is_bounded() -> None:
    """The note's line names the function and the shape; a huge sketch is cut."""
    shape = infer_shape({"id": "a"})
    notice = shape_notice(LearnedShape("s", "get-x", "1", shape, py_name="get_x"))
    assert notice == (
        "[run_code: the result shape of get_x (it declares none) was learned: "
        'Returns (observed): {"id": str}]'
    )
    refreshed = shape_notice(LearnedShape("s", "get-x", "1", shape, "get_x", refreshed=True))
    assert "changed; its stub now says Returns (observed)" in refreshed
    wide = infer_shape(
        {f"key_number_{i}": {f"inner_{j}": [1] for j in range(12)} for i in range(12)}
    )
    assert len(shape_notice(LearnedShape("s", "t", "1", wide))) < 600


# the catalog and the description ------------------------------------------------------------


def test_observed_shapes_show_in_stubs_and_declared_ones_win() -> None:
    """A learned shape is ``Returns (observed):``; a tool with an output schema keeps its own."""
    plain = tool("get_x", "Get x.")
    declared = tool(
        "get_y",
        "Get y.",
        output_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
    )
    shape = infer_shape({"id": "a"})
    catalog = Catalog([plain, declared], observed=lambda d: shape)
    assert catalog.entries["get_x"].stub() == (
        'async def get_x() -> dict[str, Any]:\n    """\n    Get x.\n'
        '    Returns (observed): {"id": str}\n    """'
    )
    assert 'Returns: {"a": int}' in catalog.entries["get_y"].stub()


def test_below_the_budget_nothing_changes() -> None:
    """A catalog whose stubs fit the budget gives the very same description as before."""
    small = [tool("get_x", "Get x.", {"id": {"type": "string"}})]
    assert not Catalog(small, budget=6000).searchable
    assert run_code_description(Catalog(small, budget=6000)) == run_code_description(Catalog(small))
    assert "search_tools" not in run_code_description(Catalog(small, budget=6000))


def test_over_the_budget_the_description_lists_names_and_one_line() -> None:
    """Over the budget: each function by name and one line, and the two helpers explained."""
    full, searchable = big_catalog(budget=None), big_catalog()
    assert searchable.searchable
    assert len(full.render()) > 6000
    text = run_code_description(searchable)
    assert "async def get_thing_0" not in text
    assert "- get_thing_0: Fetch thing number 0 by its id." in text
    assert "search_tools(query, limit=10)" in text
    assert 'print(describe("get_pod"))' in text
    assert len(text) < len(run_code_description(full))
    assert run_code_description(big_catalog()) == text  # byte-stable
    assert index_lines(searchable)[39] == "- get_thing_39: Fetch thing number 39 by its id."


# search and describe ------------------------------------------------------------------------


def test_words_split_names_humps_and_plurals() -> None:
    """Query and tools are cut into the same words."""
    assert words("listPods get_object-names, Status 42") == {
        "list",
        "pod",
        "get",
        "object",
        "name",
        "statu",
        "42",
    }


def test_search_ranks_name_then_arguments_then_description_ties_by_name() -> None:
    """The documented ranking: name 6, argument 4, description 2; prefixes half; ties by name."""
    catalog = Catalog(
        [
            tool("list_orders", "List the orders.", {"region": {"type": "string"}}),
            tool("get_invoice", "Get an invoice of an order.", {"order_id": {"type": "string"}}),
            tool("ship", "Ship it.", {"order": {"type": "string"}}),
            tool("bill", "Bill an ordered thing."),
            tool("zzz", "Nothing to see."),
        ]
    )
    assert search(catalog, "orders") == [
        "list_orders: List the orders.",  # name 6 + description 2
        "get_invoice: Get an invoice of an order.",  # argument 4 + description 2
        "ship: Ship it.",  # argument 4
        "bill: Bill an ordered thing.",  # description prefix 1
    ]
    assert search(catalog, "orders", limit=1) == ["list_orders: List the orders."]
    assert search(catalog, "nothing matches here at all qq") == ["zzz: Nothing to see."]
    assert search(catalog, "qqq") == []


def test_describe_gives_the_full_stub_and_names_close_ones_when_unknown() -> None:
    """describe(name), of a search line, of the MCP name; an unknown name says what exists."""
    catalog = Catalog([tool("get-object", "Get one object.", {"name": {"type": "string"}})])
    stub = catalog.entries["get_object"].stub()
    assert describe(catalog, "get_object") == stub
    assert describe(catalog, "get_object: Get one object.") == stub
    assert describe(catalog, "get-object") == stub
    with pytest.raises(CallRejected) as info:
        describe(catalog, "get_objects")
    assert info.value.exc_type == "NameError"
    assert "no function named 'get_objects'; did you mean get_object?" in info.value.message


@pytest.mark.parametrize(
    ("helper", "args", "kwargs", "message"),
    [
        ("search_tools", (), {}, "search_tools() missing required argument 'query'"),
        ("search_tools", (3,), {}, "search_tools() needs a str query"),
        ("search_tools", ("x",), {"limit": 0}, "search_tools() limit must be a positive int"),
        (
            "search_tools",
            ("x",),
            {"top": 2},
            "unexpected keyword argument 'top'; accepted: query, limit",
        ),
        ("search_tools", ("  ",), {}, "search_tools() needs words to look for"),
        ("describe", ("a", "b"), {}, "describe() takes at most 1 arguments (2 given)"),
        ("describe", (), {"name": 1}, "describe() needs a function name as a str"),
        ("describe", ("a",), {"name": "a"}, "describe() got multiple values for 'name'"),
    ],
)
def test_helpers_reject_bad_arguments_clearly(
    helper: str, args: tuple, kwargs: dict, message: str
) -> None:
    """Bad input to the helpers is a clear error in the sandbox, never a crash."""
    catalog = big_catalog()
    with pytest.raises(CallRejected) as info:
        call_helper(catalog, helper, args, kwargs)
    assert message in info.value.message
    answer: dict[str, Any] = dict(helper_result(catalog, helper, args, kwargs))
    assert "exc_type" in answer
    assert message in answer["message"]


def test_the_helpers_exist_only_in_a_searchable_catalog_and_a_tool_of_that_name_wins() -> None:
    """search_tools/describe are answered only over the budget, and never over a tool's name."""
    assert is_helper(big_catalog(), "describe")
    assert not is_helper(big_catalog(budget=None), "describe")
    defs = [tool("describe", "A tool called describe. " * 400)]
    assert not is_helper(Catalog(defs, budget=10), "describe")
    assert is_helper(Catalog(defs, budget=10), "search_tools")


@given(st.text(max_size=40), st.integers(min_value=-3, max_value=50))
def test_any_query_gives_ranked_lines_or_a_clear_error(query: str, limit: int) -> None:
    """Property: search_tools and describe answer any text with a value or a CallRejected."""
    catalog = big_catalog()
    for helper, args in (("search_tools", (query, limit)), ("describe", (query,))):
        answer: dict[str, Any] = dict(helper_result(catalog, helper, args, {}))
        if "exc_type" in answer:
            assert answer["exc_type"] in {"TypeError", "ValueError", "NameError"}
            continue
        value = answer["return_value"]
        if helper == "search_tools":
            assert isinstance(value, list)
            assert len(value) <= limit
            assert all(line.split(": ", 1)[0] in catalog.entries for line in value)
        else:
            assert value.startswith("async def ")


def test_the_search_helpers_are_reserved_only_when_given() -> None:
    """Rebinding describe is refused over the budget (extra names), allowed below it."""
    assert check_reserved("describe = 1") is None
    assert check_reserved("def search_tools(q):\n    return q", ("search_tools", "describe")) == (
        "run_code rejected this snippet before running it: line 1 defines a function named "
        "'search_tools', which is a built-in helper (search_tools, describe); rebinding it would "
        "break later snippets. Use another name, e.g. 'search_tools_'."
    )
    # the built-in helpers keep their message, word for word
    assert "built-in helper (items, names, dig, count_by, to_json, parse_records)" in (
        check_reserved("names = []", ("search_tools", "describe")) or ""
    )
