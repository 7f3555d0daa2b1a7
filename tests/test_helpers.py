"""Built-in helpers (spec A8, A11), run in a real Monty worker, and the reserved-name check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_monty import AsyncMonty, AsyncMontySession, MontyRuntimeError

from daemon.code_mode.bindings import module_bindings
from daemon.code_mode.helpers import (
    HELPERS_SOURCE,
    RESERVED_NAMES,
    check_reserved,
    prelude,
    reserved_bindings,
)

POD = {
    "metadata": {"name": "web-1", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
    "spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80}]}, {"name": "side"}]},
    "status": {"phase": "Running", "podIP": None},
}
PODS = {
    "kind": "PodList",
    "items": [
        POD,
        {"metadata": {"name": "web-2"}, "status": {"phase": "Pending"}},
        {"metadata": {"name": "db-1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "job-1"}, "status": {}},
    ],
}


@pytest.fixture
async def scope(monty_pool: AsyncMonty) -> AsyncIterator[AsyncMontySession]:
    """A fresh REPL scope with the helpers fed, as the engine feeds every new scope."""
    async with monty_pool.checkout() as session:
        for code in prelude():
            await session.feed_run(code)
        yield session


async def run(scope: AsyncMontySession, code: str) -> Any:
    """Run ``code`` in the scope with POD and PODS bound."""
    return await scope.feed_run(code, inputs={"pod": POD, "pods": PODS})


async def error(scope: AsyncMontySession, code: str) -> str:
    """The 'Type: message' line of the exception ``code`` raises."""
    with pytest.raises(MontyRuntimeError) as info:
        await run(scope, code)
    return info.value.display("type-msg")


# pre-imports ---------------------------------------------------------------------------------


async def test_modules_preimported(scope: AsyncMontySession) -> None:
    """asyncio, json and re are usable without an import."""
    code = 'await asyncio.gather(asyncio.sleep(0)), json.loads("[1]"), re.sub("a", "b", "aa")'
    assert await run(scope, code) == ([None], [1], "bb")


async def test_helpers_survive_rebinding_json(scope: AsyncMontySession) -> None:
    """to_json keeps working after a snippet rebinds json (private alias)."""
    assert await run(scope, 'json = {"a": 1}\nto_json(json)') == '{"a": 1}'


# items / names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("items([1, 2])", [1, 2]),
        ("items((1, 2))", [1, 2]),
        ("items(None)", []),
        ('items({"items": [1]})', [1]),
        ('items({"items": None})', []),
        ('items({"workspaces": ["a", "b"], "count": 2})', ["a", "b"]),
        ('items({"a": 1})', [{"a": 1}]),
        ("len(items(pods))", 4),
    ],
)
async def test_items(scope: AsyncMontySession, code: str, expected: Any) -> None:
    """items() finds the list: itself, "items", the only list value, [x], [] for None."""
    assert await run(scope, code) == expected


async def test_items_rejects_ambiguous_and_scalars(scope: AsyncMontySession) -> None:
    """Several lists, or a non-container, raise TypeError naming what to do."""
    assert await error(scope, 'items({"kcps": [], "errors": []})') == (
        "TypeError: items(): this dict holds several lists; pick one: kcps, errors"
    )
    assert (
        await error(scope, 'items("text")') == "TypeError: items() needs a list or a dict, got str"
    )


async def test_names(scope: AsyncMontySession) -> None:
    """names(): metadata.name, else name, else id, a str item itself, else None."""
    assert await run(scope, "names(pods)") == ["web-1", "web-2", "db-1", "job-1"]
    code = 'names([{"name": "n"}, {"id": 7}, "s", 3, {"metadata": {}}])'
    assert await run(scope, code) == ["n", 7, "s", None, None]


# dig -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('dig(pod, "metadata.name")', "web-1"),
        ('dig(pod, "metadata", "name")', "web-1"),
        ('dig(pod, "spec.containers.0.name")', "app"),
        ('dig(pod, "spec", "containers", 1, "name")', "side"),
        ('dig(pod, "spec.containers", -1, "name")', "side"),
        ('dig(pod, "spec.containers.-1.name")', "side"),
        ('dig(pod, "spec.containers.0.ports.0.containerPort")', 80),
        ('dig(pods, "items", 2, "metadata.name")', "db-1"),
        # a dotted key is found whole when the dict has it
        ('dig(pod, "metadata.labels", "app.kubernetes.io/name")', "web"),
        ('dig(pod, "metadata.labels.app.kubernetes.io/name")', "web"),
        # missing steps and None give the default
        ('dig(pod, "status.reason")', None),
        ('dig(pod, "status.podIP", default="none")', "none"),
        ('dig(pod, "spec.containers.7.name", default="?")', "?"),
        ('dig(pod, "spec.containers.x")', None),
        ('dig(pod, "metadata.name.first")', None),
        ('dig(None, "a")', None),
        ("dig(pod)", POD),
        # a trailing non-str/int argument is the default
        ('dig(pod, "spec.volumes", [])', []),
        ('dig(pod, "status.reason", {})', {}),
        ('dig(pod, "status", "ready", False)', False),
        ('dig(pod, "a.b", 1.5)', 1.5),
        ('dig(pod, "a", None)', None),
        # ...but a trailing str or int is a segment
        ('dig(pod, "spec.containers", 0)', {"name": "app", "ports": [{"containerPort": 80}]}),
        ('dig(pod, "metadata", "nope")', None),
    ],
)
async def test_dig(scope: AsyncMontySession, code: str, expected: Any) -> None:
    """dig() walks dotted or split segments, indexes lists, and applies the default rules."""
    assert await run(scope, code) == expected


# count_by ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('count_by(pods, "status.phase")', {"Running": 2, "Pending": 1, None: 1}),
        ('count_by(pods, "status", "phase")', {"Running": 2, "Pending": 1, None: 1}),
        ('count_by(pods["items"], "status.phase", False)', {"Running": 2, "Pending": 1, False: 1}),
        ('count_by(["a", "b", "a"])', {"a": 2, "b": 1}),
        ('count_by([{"k": [1]}, {"k": [1]}, {"k": {"x": 1}}], "k")', {"[1]": 2, '{"x": 1}': 1}),
        ('count_by([], "a")', {}),
        ('list(count_by(["b", "a", "a", "c", "b"]))', ["b", "a", "c"]),
    ],
)
async def test_count_by(scope: AsyncMontySession, code: str, expected: Any) -> None:
    """count_by() counts dig(x, *path), most common first (ties in first-seen order)."""
    assert await run(scope, code) == expected


# to_json -------------------------------------------------------------------------------------


async def test_to_json(scope: AsyncMontySession) -> None:
    """to_json(): json.dumps with str() for unknown types, sets as sorted lists, indent."""
    code = (
        "import datetime\n"
        'to_json({"d": datetime.date(2024, 1, 2), "s": {3, 1, 2}, (1, 2): "t", "n": None, '
        '"t": (1, "a"), "f": 1.5, "b": True})'
    )
    assert await run(scope, code) == (
        '{"d": "2024-01-02", "s": [1, 2, 3], "(1, 2)": "t", "n": null, "t": [1, "a"], '
        '"f": 1.5, "b": true}'
    )
    assert await run(scope, 'to_json({"a": [1]}, indent=2)') == '{\n  "a": [\n    1\n  ]\n}'
    assert await run(scope, 'to_json({1, "a"})') in ('[1, "a"]', '["a", 1]')


async def test_to_json_where_json_dumps_fails(scope: AsyncMontySession) -> None:
    """The gap to_json exists for: Monty's json.dumps has no default=."""
    msg = await error(scope, "json.dumps({1}, default=str)")
    assert msg == "TypeError: JSONEncoder.__init__() got an unexpected keyword argument 'default'"
    assert await run(scope, "to_json({1})") == "[1]"


# parse_records -----------------------------------------------------------------------------------

GIT_LOG = (
    "Commit history:\n"
    "Commit: ecbbd8a\nAuthor: Ana Lind\nDate: 2025-07-02 10:49:00+09:00\n"
    "Message: fix(metrics): avoid a crash\n\n\n"
    "Commit: 9647bc5\nAuthor: Yu Tan\nDate: 2025-07-01 12:19:00+01:00\n"
    "Message: docs(render): settings\nthe body's second line\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # "Key: value" blocks; a heading before them, a continuation line, blank lines
            GIT_LOG,
            [
                {
                    "Commit": "ecbbd8a",
                    "Author": "Ana Lind",
                    "Date": "2025-07-02 10:49:00+09:00",
                    "Message": "fix(metrics): avoid a crash",
                },
                {
                    "Commit": "9647bc5",
                    "Author": "Yu Tan",
                    "Date": "2025-07-01 12:19:00+01:00",
                    "Message": "docs(render): settings\nthe body's second line",
                },
            ],
        ),
        (  # a repeated key starts the next record, with no blank line between
            "name: a\nsize: 1\nname: b\nsize: 2",
            [{"name": "a", "size": 1}, {"name": "b", "size": 2}],
        ),
        (  # CSV: a quoted comma, an empty cell, numbers; a row of another width is left out
            'region,product,units\nnorth,"Maple, Teapot",3\nsouth,Mug,\neast,Cup,4.5\nbad,row\n',
            [
                {"region": "north", "product": "Maple, Teapot", "units": 3},
                {"region": "south", "product": "Mug", "units": ""},
                {"region": "east", "product": "Cup", "units": 4.5},
            ],
        ),
        (  # tab-separated; a leading zero is not a number
            "id\tzip\n7\t01234\n",
            [{"id": 7, "zip": "01234"}],
        ),
        (  # a markdown table after prose (a page as markdown)
            "Releases\n\n| Version | Codename | Downloads |\n|---|:---:|---|\n"
            "| 2.2.0 | Basalt | 1200 |\n| 2.1.0 | Onyx | -3 |\n",
            [
                {"Version": "2.2.0", "Codename": "Basalt", "Downloads": 1200},
                {"Version": "2.1.0", "Codename": "Onyx", "Downloads": -3},
            ],
        ),
        (  # an HTML table on one line, tags inside cells, header cells
            "<html><table><tr><th>Name</th><th>Price</th></tr><tr><td><b>Cedar</b>  Rug</td>"
            "<td>100.61</td></tr><TR><td>Mug</td><td>3</td></TR></table></html>",
            [{"Name": "Cedar Rug", "Price": 100.61}, {"Name": "Mug", "Price": 3}],
        ),
        (  # entities, and a number with thousands separators
            "<table><tr><th>Item</th><th>Downloads</th></tr>"
            "<tr><td>Salt &amp; Pepper</td><td>12,345</td></tr></table>",
            [{"Item": "Salt & Pepper", "Downloads": 12345}],
        ),
        ('[{"a": 1}, {"a": 2}]', [{"a": 1}, {"a": 2}]),  # a JSON list is that list
        ("  \n", []),
    ],
)
async def test_parse_records(scope: AsyncMontySession, text: str, expected: Any) -> None:
    """parse_records() reads the common layouts of a tool's text as a list of dicts."""
    assert await scope.feed_run("parse_records(t)", inputs={"t": text}) == expected


async def test_parse_records_reads_json_and_http_results(scope: AsyncMontySession) -> None:
    """An HTTP result is read by its json when it has one (items() of it), else by its
    body; JSON text and other values give what items() gives (a small model calls the
    helper on whatever a tool returned)."""
    csv = {"status": 200, "content_type": "text/csv", "body": "a,b\n1,x\n", "json": None}
    api = {"status": 200, "body": '{"data": [{"id": 1}]}', "json": {"data": [{"id": 1}]}}
    cases = [
        (csv, [{"a": 1, "b": "x"}]),
        (api, [{"id": 1}]),
        ('{"items": [{"id": 2}], "kind": "List"}', [{"id": 2}]),
        ({"items": [{"id": 3}]}, [{"id": 3}]),
        ([{"id": 4}], [{"id": 4}]),
    ]
    for value, rows in cases:
        assert await scope.feed_run("parse_records(p)", inputs={"p": value}) == rows, value


async def test_parse_records_survives_a_rebound_module(scope: AsyncMontySession) -> None:
    """A snippet that rebinds ``re`` or ``csv`` does not break the helper (it reads its
    modules through private aliases, as to_json reads json)."""
    await scope.feed_run("re = None\ncsv = None\njson = None")
    assert await scope.feed_run("parse_records('a,b\\n1,2')") == [{"a": 1, "b": 2}]


async def test_parse_records_says_what_it_cannot_read(scope: AsyncMontySession) -> None:
    """Prose, or a value that is not text, is a clear error, not an empty list."""
    with pytest.raises(MontyRuntimeError) as info:
        await scope.feed_run("parse_records(t)", inputs={"t": "Just a sentence.\nAnd one more."})
    assert info.value.display("type-msg") == (
        "ValueError: parse_records(): no table, CSV or 'Key: value' lines in this text"
    )
    assert await error(scope, "parse_records(3)") == (
        "TypeError: parse_records() needs text, got int"
    )


# reserved names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "line"),
    [
        ("items = []", "items", 1),
        ("x = 1\nnames = [p for p in pods]", "names", 2),
        ("for dig in range(3):\n    pass", "dig", 1),
        ("def count_by(x):\n    return x", "count_by", 1),
        ("async def to_json(x):\n    return x", "to_json", 1),
        ("import json as to_json", "to_json", 1),
        ("from os import path as items", "items", 1),
        ("[(names := 1) for _ in range(2)]", "names", 1),
        ("if (dig := 3):\n    pass", "dig", 1),
        ("items += [1]", "items", 1),
        ("a, (items, b) = 1, (2, 3)", "items", 1),
        ("first, *names = [1, 2]", "names", 1),
        ("class names:\n    pass", "names", 1),
        ("with open('x') as items:\n    pass", "items", 1),
        ("try:\n    pass\nexcept Exception as dig:\n    pass", "dig", 3),
        ("def f():\n    global items\n    items = 1", "items", 2),
        ("match pods:\n    case {'items': items}:\n        pass", "items", 2),
        ("items: list = []", "items", 1),
        ("_asyncai_dig = None", "_asyncai_dig", 1),
        # PEP 701 f-string: CPython 3.11 cannot parse it, Monty can; the line scan still sees it
        ('d = {"x": 1}\ns = f"{d["x"]}"\nnames = 3', "names", 3),
        ('s = f"{d["x"]}"\nfor i, dig in []:\n    pass', "dig", 2),
    ],
)
def test_rebinding_a_helper_is_rejected(code: str, name: str, line: int) -> None:
    """Every way to rebind a helper at module level is rejected, naming the helper and line."""
    message = check_reserved(code)
    assert message is not None
    assert f"'{name}'" in message
    assert f"line {line} " in message
    if name in RESERVED_NAMES:
        assert f"e.g. '{name}_'" in message


@pytest.mark.parametrize(
    ("code", "name", "line"),
    [
        ("await _asyncai_wrappers['append_line'](line='x')", "_asyncai_wrappers", 1),
        ("x = 1\nf = locals()['_asyncai_tool_append_line']", "_asyncai_tool_append_line", 2),
        ("print(_asyncai_json)", "_asyncai_json", 1),
        ("x = 1  # _asyncai_\n", "_asyncai_", 1),
    ],
)
def test_naming_a_private_name_anywhere_is_rejected(code: str, name: str, line: int) -> None:
    """A private name read, or named in a string or comment, is refused like a binding of one
    (issue 26: the scope's _asyncai_wrappers held every tool); a longer name is not one."""
    assert check_reserved(code) == (
        f"run_code rejected this snippet before running it: line {line} uses the name "
        f"'{name}'; names starting with '_asyncai_' are reserved for asyncai. Use another name."
    )
    assert check_reserved("my_asyncai_x = 1\nx_asyncai_ = 2") is None


def test_rejection_message_text() -> None:
    """The full message: what happened, which helper, why, and another name."""
    assert check_reserved("x = 1\nnames = []") == (
        "run_code rejected this snippet before running it: line 2 assigns to 'names', which is "
        "a built-in helper (items, names, dig, count_by, to_json, parse_records); rebinding it "
        "would break "
        "later snippets. Use another name, e.g. 'names_'."
    )


@pytest.mark.parametrize(
    "code",
    [
        "items_ = items(pods)",
        "n = names(pods)",
        "def f():\n    items = []\n    return items",
        "def f(names):\n    return names",
        "f = lambda items: items",
        "[items for items in range(3)]",
        "d = {}\nd['items'] = 1\nd.names = 2",
        "x = pods['items']",
        "print('items = 3')",
        "class C:\n    items = 1",
        "import json\nimport asyncio, re",
        "x = await asyncio.gather(f(), g())",
        "async for x in y:\n    pass",
        "",
    ],
)
def test_uses_and_local_bindings_are_allowed(code: str) -> None:
    """Calling helpers, local bindings, attributes, keys, strings and imports pass."""
    assert check_reserved(code) is None


def test_reserved_bindings_lists_all() -> None:
    """reserved_bindings returns every offending binding, in source order."""
    hits = reserved_bindings("items = 1\nx = 2\ndef dig():\n    pass")
    assert [(b.name, b.kind, b.line) for b in hits] == [("items", "assign", 1), ("dig", "def", 3)]


def test_module_bindings_top_level_await() -> None:
    """Top-level await parses (PyCF_ALLOW_TOP_LEVEL_AWAIT): bindings come from the AST."""
    found = module_bindings("r = await f()\nasync with g() as h:\n    x = 1")
    assert [(b.name, b.kind) for b in found] == [("r", "assign"), ("h", "with"), ("x", "assign")]


def test_module_bindings_line_fallback_skips_function_bodies() -> None:
    """The line scan (for snippets CPython cannot parse) skips def bodies but not if/for bodies."""
    code = (
        'label = f"{d["k"]}"\n'
        "def f(a):\n"
        "    local = 1\n"
        "    global g\n"
        "if label:\n"
        "    inner = 2\n"
        "for k, v in d.items():\n"
        "    total += v\n"
        "import json as j, re\n"
        "from m import a, b as c\n"
        "x == 1\n"
    )
    found = [(b.name, b.kind) for b in module_bindings(code)]
    assert found == [
        ("label", "assign"),
        ("f", "def"),
        ("g", "global"),
        ("inner", "assign"),
        ("k", "for"),
        ("v", "for"),
        ("total", "assign"),
        ("j", "import"),
        ("re", "import"),
        ("a", "import"),
        ("c", "import"),
    ]


def test_prelude_order() -> None:
    """Helpers first, then the operator's preamble; a blank preamble adds nothing."""
    assert prelude() == [HELPERS_SOURCE]
    assert prelude("  \n") == [HELPERS_SOURCE]
    assert prelude("KCP = 'root'") == [HELPERS_SOURCE, "KCP = 'root'"]


def test_helpers_source_binds_the_reserved_names() -> None:
    """The helpers source itself binds the reserved names and modules (it is never checked)."""
    bound = {b.name for b in module_bindings(HELPERS_SOURCE)}
    assert set(RESERVED_NAMES) <= bound
    assert {"asyncio", "json", "re"} <= bound
