"""Large JSON tool results go into the sandbox as text and are parsed there (issue 17)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.convert import too_deep_message
from daemon.code_mode.helpers import HELPERS_SOURCE
from daemon.code_mode.lazy import (
    DIRECT_MARKER,
    TEXT_MIN,
    public_name,
    scope_source,
    snapshot_wrappers_source,
    text_marker,
)
from daemon.code_mode.sandbox.nested import NestedCalls
from daemon.tools import ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

# every expectation holds on both paths a snippet can take (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("engine_path")

MESSAGE_TAIL = f"returned a value the sandbox cannot take: {too_deep_message()}"
TEST_LIMITS = {"max_feed_duration": 5.0, "max_wall": 20.0, "tool_timeout": 10.0}

ROWS = [
    {
        "id": i,
        "name": f'öbject-{i} \u2603 "q" \\ \n',
        "size": i * 1.5,
        "big": 10**30 + i,
        "tags": ["x", None, True, False, {"k": [i, -i, 1e-7]}],
    }
    for i in range(60)
]
BIG = json.dumps(ROWS)
assert len(BIG) >= TEXT_MIN
DEEP = "[" * 201 + "]" * 201
NOT_JSON = "[" + "x" * TEXT_MIN  # starts like JSON, is not
TEXTS = {
    "rows": BIG,
    "deep_big": DEEP + " " * TEXT_MIN,
    "deep_small": DEEP,
    "not_json": NOT_JSON,
    "nan_big": json.dumps([float("nan"), *ROWS]),
    "surrogate_big": '["\\ud800", ' + BIG[1:],
    # what a Python server's str(rows) sends (the reference mcp-server-sqlite)
    "py_rows_big": repr(ROWS),
    "py_rows_small": repr(ROWS[:2]),
    "py_tuples": repr([(r["id"], r["name"]) for r in ROWS[:3]]),
}


@pytest.fixture
async def executor(monty_pool) -> AsyncIterator[CodeModeToolExecutor]:
    """An executor whose tools return the texts above, by name."""
    fake = FakeToolExecutor()

    def tool(name: str) -> Callable:
        async def fn() -> ToolCallOutput:
            return ToolCallOutput(TEXTS[name], False)

        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"The {name} text."
        return fn

    for name in TEXTS:
        fake.tool(read_only=True)(tool(name))
    ex = CodeModeToolExecutor(fake, CodeModeLimits(**TEST_LIMITS), pool=monty_pool)
    yield ex
    await ex.aclose()


async def run(scope, code: str) -> str:
    out = await scope.call_tool("run_code", {"code": code})
    assert not out.is_error, out.content
    return out.content


def test_only_long_json_containers_that_parse_alike_go_as_text():
    """Short text, scalars, NaN/Infinity and surrogates stay with the host's parser."""
    assert text_marker(ToolCallOutput(BIG, False), "t") == (
        BIG,
        f"tool t returned a value the sandbox cannot take: {too_deep_message()}",
    )
    assert text_marker(ToolCallOutput("  \n" + BIG, False), "t") is not None
    for refused in (
        '{"a": 1}',  # short
        '"' + "x" * TEXT_MIN + '"',  # a JSON string, not a container
        TEXTS["nan_big"],
        TEXTS["surrogate_big"],
        "[\ud800]" + " " * TEXT_MIN,  # a raw lone surrogate
        json.dumps([float("inf"), *ROWS]),
    ):
        assert text_marker(ToolCallOutput(refused, False), "t") is None


@given(st.text())
def test_text_marker_takes_any_text(text):
    """Any result text gives None or the text itself, never an exception."""
    marker = text_marker(ToolCallOutput(text * (TEXT_MIN // max(len(text), 1) + 1), False), "t")
    assert marker is None or isinstance(marker[0], str)


def test_public_names_map_wrapper_calls_back_to_tools():
    """The wrapper's host function names the tool; other names are the tool's own."""
    assert public_name("_asyncai_tool_get_rows") == ("get_rows", True)
    assert public_name("get_rows") == ("get_rows", False)


def test_no_wrapper_hides_a_helper_builtin_or_preamble_name():
    """A tool called like a helper, a builtin or a name the preamble binds gets no wrapper."""
    preamble = HELPERS_SOURCE + "\nmine = 1\n"
    source = scope_source(preamble, ("items", "len", "json", "mine", "get_rows"))
    assert source.startswith(preamble)
    added = source[len(preamble) :].splitlines()
    defined = [line.split("(")[0] for line in added if "def " in line and "_asyncai" not in line]
    assert defined == ["async def get_rows"]
    assert scope_source(preamble, ("items",)) == f"{preamble}\n{DIRECT_MARKER} = True\n"
    # leaving the direct path: no helper or builtin name; `mine` only if its wrapper is there
    swap = snapshot_wrappers_source(("items", "len", "json", "mine", "get_rows"))
    assert [line.strip().split("(")[0] for line in swap.splitlines() if "def " in line] == [
        "def mine",
        "def get_rows",
    ]


async def test_a_wrapped_call_answers_a_long_json_result_with_its_text():
    """NestedCalls.run(text=True) sends long JSON as the text marker, short JSON parsed."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def rows() -> ToolCallOutput:
        """Rows."""
        return ToolCallOutput(BIG, False)

    @fake.tool(read_only=True)
    async def small() -> dict:
        """Small."""
        return {"a": 1}

    catalog = Catalog(fake.definitions())
    calls = NestedCalls(fake, CodeModeLimits(), thread_id=None)
    rows_entry, small_entry = catalog.lookup("rows"), catalog.lookup("small")
    assert rows_entry is not None
    assert small_entry is not None
    marked = await calls.run(rows_entry, {}, text=True)
    assert marked == {"return_value": (BIG, f"tool rows {MESSAGE_TAIL}")}
    assert await calls.run(rows_entry, {}) == {"return_value": ROWS}
    assert await calls.run(small_entry, {}, text=True) == {"return_value": {"a": 1}}
    assert [e.bytes for e in calls.entries] == [len(BIG.encode())] * 2 + [8]


async def test_the_snippet_sees_the_same_values_as_from_the_host(executor):
    """Rows parsed in the sandbox equal CPython's json.loads, types included."""
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    assert json.loads(await run(scope, "await rows()")) == ROWS
    types = await run(
        scope,
        "v = await rows()\n"
        '[type(v).__name__, type(v[1]["size"]).__name__, type(v[1]["big"]).__name__, '
        'v[2]["tags"][1:4], v[3]["big"] - 10**30]',
    )
    assert json.loads(types) == ["list", "float", "int", [None, True, False], 3]
    both = await run(scope, "a, b = await asyncio.gather(rows(), rows())\na == b and len(a)")
    assert both == "60"


async def test_unparsable_text_arrives_as_str_and_deep_json_raises_the_hosts_error(executor):
    """Text that is not JSON is a str; JSON past 200 levels raises the same RuntimeError
    whether the sandbox (long text) or the host (short text) found it."""
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    got = await run(scope, "v = await not_json()\n[type(v).__name__, len(v)]")
    assert json.loads(got) == ["str", len(NOT_JSON)]
    catch = "try:\n    await {}()\nexcept RuntimeError as e:\n    r = str(e)\nr"
    long, short = (
        await run(scope, catch.format("deep_big")),
        await run(scope, catch.format("deep_small")),
    )
    assert long.replace("deep_big", "X") == short.replace("deep_small", "X")
    assert "nested more than 200 levels" in long


async def test_python_literal_rows_arrive_as_the_rows_they_write(executor):
    """A list of dicts or tuples written as Python (str(rows)) arrives as that list,
    long or short, the same as its JSON would; tuples as lists."""
    assert text_marker(ToolCallOutput(TEXTS["py_rows_big"], False), "t") is None
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    assert json.loads(await run(scope, "await py_rows_big()")) == ROWS
    assert json.loads(await run(scope, "await py_rows_small()")) == ROWS[:2]
    got = await run(scope, "v = await py_tuples()\n[type(v[0]).__name__, v[2]]")
    assert json.loads(got) == ["list", [2, ROWS[2]["name"]]]


async def test_constants_and_surrogates_keep_the_hosts_reading(executor):
    """NaN stays a float NaN; an escaped lone surrogate arrives as U+FFFD."""
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    got = await run(scope, "v = await nan_big()\n[v[0] != v[0], len(v)]")
    assert json.loads(got) == [True, 61]
    assert await run(scope, "(await surrogate_big())[0]") == "\ufffd"


async def test_tracebacks_show_the_snippets_frames_not_the_wrappers(executor):
    """A call rejected or failing through a wrapper reads as if the snippet called the tool."""
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    out = await scope.call_tool("run_code", {"code": "x = 1\nawait rows(limit=1)"})
    assert out.is_error
    assert "_asyncai" not in out.content
    frame, line, marker, error = out.content.splitlines()[1:5]
    # the snapshot path's first snippet comes after the feed that changed the wrappers
    assert re.fullmatch(r'  File "<python-input-[12]>", line 2, in <module>', frame)
    assert line == "    await rows(limit=1)"
    # the direct path's wrapper makes the call where the snippet awaits it
    assert marker in ("          ~~~~~~~~~~~~~", "    ~~~~~~~~~~~~~~~~~~~")
    assert error == "TypeError: rows() got an unexpected keyword argument 'limit'; accepted: (none)"
    out = await scope.call_tool("run_code", {"code": "await deep_big()"})
    assert "_asyncai" not in out.content
    assert f"RuntimeError: tool deep_big {MESSAGE_TAIL}" in out.content.splitlines()
