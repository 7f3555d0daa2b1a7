"""The catalog: typed stubs from JSON schemas (spec "Python stubs", A1) and call validation (A3)."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from daemon.code_mode.catalog.catalog import CallRejected, Catalog, python_name
from daemon.code_mode.catalog.schema import (
    SKETCH_MAX_DEPTH,
    SKETCH_MAX_PROPERTIES,
    return_sketch,
    schema_type,
)
from daemon.tools import ToolDefinition

# The schema behind the spec's example stub (0004, "Python stubs"). The
# bundled kcp server's own signature differs (A8 makes kcp optional); this is
# what the spec's example must render from.
LIST_OBJECTS_SCHEMA = {
    "type": "object",
    "properties": {
        "kcp": {"type": "string"},
        "workspace": {"type": "string"},
        "resource": {"type": "string"},
        "namespace": {"type": "string"},
        "selector": {"type": "string"},
    },
    "required": ["kcp", "workspace", "resource"],
}
# Verbatim from the spec, so the long line stays one line.
LIST_OBJECTS_STUB = '''\
async def list_objects(*, kcp: str, workspace: str, resource: str, namespace: str | None = None, selector: str | None = None) -> Any:
    """List objects of one resource type in a workspace."""'''  # noqa: E501

# A1's example, with the item's further fields left open.
LIST_KCPS_OUTPUT = {
    "type": "object",
    "properties": {
        "kcps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "kubeconfig": {"type": "string"},
                    "server": {"type": "string"},
                    "running": {"type": "boolean"},
                },
                "additionalProperties": True,
            },
        },
        "errors": {"type": "array", "items": {"type": "string"}},
    },
}
LIST_KCPS_STUB = '''\
async def list_kcps(*, refresh: bool | None = None) -> dict[str, Any]:
    """
    Discover running socialweb-computer kcp servers...
    Returns: {"kcps": [{"id": str, "kubeconfig": str, "server": str, "running": bool, ...}], "errors": [str]}
    """'''  # noqa: E501 (verbatim from the spec)


def tool(
    name: str,
    properties: dict | None = None,
    required: list[str] | None = None,
    *,
    description: str = "A tool.",
    output: dict | None = None,
    **schema: Any,
) -> ToolDefinition:
    """A ToolDefinition with an object input schema."""
    input_schema: dict[str, Any] = {"type": "object", "properties": properties or {}, **schema}
    if required is not None:
        input_schema["required"] = required
    return ToolDefinition(name, description, input_schema, output)


def stub_of(d: ToolDefinition) -> str:
    """The rendered stub of one tool."""
    return Catalog([d]).render()


def signature_of(d: ToolDefinition) -> str:
    """The first line of the rendered stub of one tool."""
    return stub_of(d).splitlines()[0]


# Stub rendering ---------------------------------------------------------------------------


def test_spec_list_objects_example_verbatim() -> None:
    """The spec's list_objects stub comes out of its schema byte for byte."""
    d = ToolDefinition(
        "list_objects", "List objects of one resource type in a workspace.", LIST_OBJECTS_SCHEMA
    )
    assert stub_of(d) == LIST_OBJECTS_STUB


def test_a1_list_kcps_example_verbatim() -> None:
    """A1's list_kcps stub: return annotation from the output schema and a Returns: sketch."""
    d = tool(
        "list_kcps",
        {"refresh": {"type": "boolean"}},
        description="Discover running socialweb-computer kcp servers...",
        output=LIST_KCPS_OUTPUT,
    )
    assert stub_of(d) == LIST_KCPS_STUB


def test_required_first_in_property_order() -> None:
    """Required parameters come first; each group keeps the schema's property order."""
    d = tool(
        "f",
        {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "number"}},
        ["c", "a"],
    )
    assert signature_of(d) == "async def f(*, a: str, c: float, b: int | None = None) -> Any:"


@pytest.mark.parametrize(
    ("schema", "annotation"),
    [
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({"type": "array", "items": {"type": "string"}}, "list[str]"),
        (
            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "list[list[int]]",
        ),
        ({"type": "array"}, "list[Any]"),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, "dict[str, Any]"),
        ({"type": "object"}, "dict[str, Any]"),
        ({}, "Any"),
        (True, "Any"),
        (False, "Any"),
        ({"description": "no type"}, "Any"),
        ({"enum": ["a", "b"]}, 'Literal["a", "b"]'),
        ({"type": "string", "enum": ["Running", "Pending"]}, 'Literal["Running", "Pending"]'),
        ({"enum": [1, 2]}, "Literal[1, 2]"),
        ({"enum": ["a", None]}, 'Literal["a"] | None'),
        ({"const": "fixed"}, 'Literal["fixed"]'),
        ({"const": True}, "Literal[True]"),
        ({"const": None}, "None"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"type": ["null", "integer", "string"]}, "int | str | None"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "str | None"),
        (
            {"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]},
            "int | list[str]",
        ),
        ({"anyOf": [{"type": "string"}, {}]}, "Any"),
        ({"anyOf": [{"type": "string"}, {"type": "string"}]}, "str"),
        ({"allOf": [{"type": "integer"}]}, "int"),
        ({"items": {"type": "string"}}, "list[str]"),
        ({"properties": {"a": {}}}, "dict[str, Any]"),
    ],
)
def test_schema_type_table(schema: Any, annotation: str) -> None:
    """Each JSON-schema form maps to the annotation of the spec's table."""
    assert schema_type(schema) == annotation


def test_enum_parameter() -> None:
    """An enum property renders as Literal[...], optional with | None = None."""
    d = tool("f", {"phase": {"type": "string", "enum": ["Running", "Failed"]}})
    assert (
        signature_of(d)
        == 'async def f(*, phase: Literal["Running", "Failed"] | None = None) -> Any:'
    )


def test_array_parameter() -> None:
    """An array property renders as list[T]."""
    d = tool("f", {"ids": {"type": "array", "items": {"type": "integer"}}}, ["ids"])
    assert signature_of(d) == "async def f(*, ids: list[int]) -> Any:"


def test_nullable_type_list() -> None:
    """A type list with null: optional → one | None = None; required stays required."""
    d = tool(
        "f",
        {"a": {"type": ["string", "null"]}, "b": {"type": ["integer", "null"]}},
        ["b"],
    )
    assert signature_of(d) == "async def f(*, b: int | None, a: str | None = None) -> Any:"


def test_boolean_schema_and_absent_type() -> None:
    """A property given as `true`, or without a type, is Any; optional Any defaults to None."""
    d = tool("f", {"x": True, "y": {}}, ["x"])
    assert signature_of(d) == "async def f(*, x: Any, y: Any = None) -> Any:"


def test_ref_to_defs() -> None:
    """$ref into $defs (pydantic) and definitions resolves to the referenced schema."""
    d = tool(
        "f",
        {
            "mode": {"$ref": "#/$defs/Mode"},
            "spec": {"$ref": "#/definitions/Spec"},
            "ghost": {"$ref": "#/$defs/Missing"},
        },
        ["mode"],
        **{
            "$defs": {"Mode": {"type": "string", "enum": ["fast", "safe"]}},
            "definitions": {"Spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
        },
    )
    assert signature_of(d) == (
        'async def f(*, mode: Literal["fast", "safe"], spec: dict[str, Any] | None = None, '
        "ghost: Any = None) -> Any:"
    )


def test_recursive_ref_terminates() -> None:
    """A self-referencing $ref renders once and stops."""
    schema = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert schema_type(schema) == "dict[str, Any]"
    assert return_sketch(schema) == '{"name": str, "children": [{...}]}'


def test_any_of_optional_pydantic_style() -> None:
    """pydantic's `X | None = None` field (anyOf with null and a default) → `X | None = None`."""
    d = tool("f", {"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}})
    assert signature_of(d) == "async def f(*, limit: int | None = None) -> Any:"


def test_const_parameter() -> None:
    """A const property renders as a one-value Literal."""
    d = tool("f", {"kind": {"const": "Pod"}}, ["kind"])
    assert signature_of(d) == 'async def f(*, kind: Literal["Pod"]) -> Any:'


def test_no_parameters() -> None:
    """A tool without properties takes no arguments."""
    assert signature_of(tool("ping")) == "async def ping() -> Any:"


def test_additional_properties_take_kwargs() -> None:
    """An input schema that admits unlisted arguments gets **kwargs."""
    d = tool("f", {"a": {"type": "string"}}, additionalProperties=True)
    assert signature_of(d) == "async def f(*, a: str | None = None, **kwargs: Any) -> Any:"
    assert signature_of(tool("g", additionalProperties={"type": "string"})) == (
        "async def g(**kwargs: Any) -> Any:"
    )


def test_required_name_missing_from_properties() -> None:
    """A required argument the properties do not describe is still a parameter (Any)."""
    d = tool("f", {"a": {"type": "string"}}, ["a", "b"])
    assert signature_of(d) == "async def f(*, a: str, b: Any) -> Any:"


def test_docstring_args_and_defaults() -> None:
    """Parameter descriptions and non-null defaults become Args: lines."""
    d = tool(
        "f",
        {
            "ns": {"type": "string", "description": "the namespace\n  (all when omitted)"},
            "limit": {"type": "integer", "default": 50},
            "raw": {"type": "boolean"},
        },
        description="Do it.",
    )
    assert stub_of(d) == (
        "async def f(*, ns: str | None = None, limit: int | None = None, "
        "raw: bool | None = None) -> Any:\n"
        '    """\n'
        "    Do it.\n"
        "    Args:\n"
        "        ns: the namespace (all when omitted)\n"
        "        limit: default 50\n"
        '    """'
    )


def test_multiline_description_and_triple_quotes() -> None:
    """A multi-line description keeps its lines; triple quotes cannot end the docstring early."""
    d = tool("f", description='First line.\n\nExample: await f()\nSays """hi"""')
    stub = stub_of(d)
    assert stub == (
        "async def f() -> Any:\n"
        '    """\n'
        "    First line.\n"
        "\n"
        "    Example: await f()\n"
        "    Says '''hi'''\n"
        '    """'
    )
    ast.parse(stub)


def test_empty_description() -> None:
    """A tool without a description still renders a valid stub."""
    stub = stub_of(tool("f", description="  "))
    assert stub == "async def f() -> Any:\n    ..."
    ast.parse(stub)


def test_rendered_catalog_parses_as_python() -> None:
    """The whole rendered catalog is valid Python (with typing names imported)."""
    c = Catalog(
        [
            ToolDefinition("list_objects", "List objects.", LIST_OBJECTS_SCHEMA),
            tool("list_kcps", {"refresh": {"type": "boolean"}}, output=LIST_KCPS_OUTPUT),
            tool("get-thing", {"from": {"type": "string"}, "x-y": {"enum": ["a", 1]}}, ["from"]),
        ]
    )
    tree = ast.parse("from typing import Any, Literal\n\n" + c.render())
    assert [n.name for n in tree.body if isinstance(n, ast.AsyncFunctionDef)] == [
        "list_objects",
        "list_kcps",
        "get_thing",
    ]
    ast.parse(c.type_stubs())
    assert '"""' not in c.type_stubs()


# Names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "py"),
    [
        ("list_objects", "list_objects"),
        ("get-object", "get_object"),
        ("kcp.list objects", "kcp_list_objects"),
        ("9lives", "_9lives"),
        ("", "_"),
        ("import", "import_"),
        ("class", "class_"),
        ("Any", "Any_"),
        ("naïve", "na_ve"),
    ],
)
def test_python_name(name: str, py: str) -> None:
    """Non-identifiers are sanitized; a leading digit gets _; keywords get a trailing _."""
    assert python_name(name) == py


def test_collision_suffixes_and_mapping_back() -> None:
    """Colliding sanitized names get _2, _3…, and each maps back to its MCP name."""
    c = Catalog([tool("get-obj"), tool("get.obj"), tool("get_obj"), tool("get obj")])
    assert list(c.entries) == ["get_obj", "get_obj_2", "get_obj_3", "get_obj_4"]
    assert [c.lookup(p).tool_name for p in c.entries] == [
        "get-obj",
        "get.obj",
        "get_obj",
        "get obj",
    ]
    assert c.lookup("nope") is None


def test_entry_interface() -> None:
    """The engine's interface: py_name, tool_name, definition, required/optional MCP names."""
    d = ToolDefinition("list-objects", "L.", LIST_OBJECTS_SCHEMA)
    e = Catalog([d]).lookup("list_objects")
    assert e is not None
    assert (e.py_name, e.tool_name, e.definition) == ("list_objects", "list-objects", d)
    assert e.required == ("kcp", "workspace", "resource")
    assert e.optional == ("namespace", "selector")


def test_parameter_names_sanitized() -> None:
    """Argument names that are not identifiers are sanitized in the stub, de-duplicated."""
    d = tool(
        "f",
        {"from": {"type": "string"}, "api-version": {"type": "string"}, "api_version": {}},
        ["from"],
    )
    assert signature_of(d) == (
        "async def f(*, from_: str, api_version: str | None = None, "
        "api_version_2: Any = None) -> Any:"
    )


# Returns: sketch ---------------------------------------------------------------------------


def test_return_annotation_from_output_schema() -> None:
    """The return annotation follows the output schema; without one it is Any."""
    out = {
        "type": "object",
        "properties": {"status": {"type": "integer"}, "body": {"type": "string"}},
    }
    stub = stub_of(
        tool("http_get", {"url": {"type": "string"}}, ["url"], description="GET.", output=out)
    )
    assert stub.splitlines()[0] == "async def http_get(*, url: str) -> dict[str, Any]:"
    assert '    Returns: {"status": int, "body": str}' in stub.splitlines()
    assert "Returns:" not in stub_of(tool("g"))


@pytest.mark.parametrize("junk", [[[]], [{}], [None, "string"], [["integer"]], 7])
def test_junk_type_in_a_schema_reads_as_any(junk: Any) -> None:
    """A server's schema whose "type" holds lists, objects or numbers (not JSON Schema)
    renders as Any: one bad tool must not stop the catalog being built."""
    bad = {"type": junk}
    assert "Any" in schema_type(bad)
    assert "Any" in return_sketch({"type": "object", "properties": {"x": bad}})
    stub = stub_of(tool("odd", {"x": bad}, ["x"], description="Odd.", output=bad))
    assert stub.startswith("async def odd(*, x: ")


def test_mcp_wrapped_result_is_unwrapped() -> None:
    """mcp's {"result": T} wrapping (title <tool>Output) renders as T: the sandbox gets the text."""
    wrapped = {
        "type": "object",
        "properties": {"result": {"type": "string", "title": "Result"}},
        "required": ["result"],
        "title": "get_logsOutput",
    }
    stub = stub_of(tool("get_logs", output=wrapped, description="Logs."))
    assert stub.splitlines()[0] == "async def get_logs() -> str:"
    assert "    Returns: str" in stub.splitlines()
    # A wrapped list arrives as one text block per element, not as a list: no promise.
    wrapped_list = {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "string"}}},
        "required": ["result"],
        "title": "tagsOutput",
    }
    stub = stub_of(tool("tags", output=wrapped_list, description="Tags."))
    assert stub == 'async def tags() -> Any:\n    """Tags."""'
    # A real object that happens to have one "result" property is left alone.
    plain = {"type": "object", "properties": {"result": {"type": "string"}}, "title": "Outcome"}
    assert signature_of(tool("get_logs", output=plain)) == "async def get_logs() -> dict[str, Any]:"


def test_sketch_forms() -> None:
    """Enums, nullables, maps, untyped arrays and unions in the sketch."""
    schema = {
        "type": "object",
        "properties": {
            "phase": {"enum": ["Running", "Failed"]},
            "ip": {"type": ["string", "null"]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "raw": {"type": "object"},
            "list": {"type": "array"},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "any": {},
            "ref": {"$ref": "#/$defs/P"},
        },
        "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}},
    }
    assert return_sketch(schema) == (
        '{"phase": "Running" | "Failed", "ip": str | None, "labels": {str: str}, "raw": dict, '
        '"list": list, "either": int | str, "any": Any, "ref": {"x": float}}'
    )


def test_sketch_property_bound() -> None:
    """At most 12 properties per object are shown, then ..."""
    props = {f"p{i:02}": {"type": "integer"} for i in range(SKETCH_MAX_PROPERTIES + 3)}
    sketch = return_sketch({"type": "object", "properties": props})
    shown = ", ".join(f'"p{i:02}": int' for i in range(SKETCH_MAX_PROPERTIES))
    assert sketch == "{" + shown + ", ...}"
    exact = {f"p{i:02}": {"type": "integer"} for i in range(SKETCH_MAX_PROPERTIES)}
    assert "..." not in return_sketch({"type": "object", "properties": exact})


def test_sketch_depth_bound() -> None:
    """At most 4 containers deep; a deeper object or array becomes {...} / [...]."""
    assert SKETCH_MAX_DEPTH == 4
    leaf: dict[str, Any] = {"type": "object", "properties": {"deep": {"type": "string"}}}
    schema = leaf
    for _ in range(5):
        schema = {"type": "object", "properties": {"a": schema}}
    assert return_sketch(schema) == '{"a": {"a": {"a": {"a": {...}}}}}'
    arrays = {
        "type": "array",
        "items": {
            "type": "array",
            "items": {
                "type": "array",
                "items": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "integer"}},
                },
            },
        },
    }
    assert return_sketch(arrays) == "[[[[[...]]]]]"
    k8s_list = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "labels": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        }
                    },
                },
            }
        },
    }
    assert return_sketch(k8s_list) == '{"items": [{"metadata": {"name": str, "labels": {...}}}]}'


def test_sketch_enum_bound() -> None:
    """A long enum shows its first 12 values, then | ..."""
    sketch = return_sketch({"enum": list(range(20))})
    assert sketch == " | ".join(str(i) for i in range(12)) + " | ..."


# Validation (A3) ---------------------------------------------------------------------------


@pytest.fixture
def catalog() -> Catalog:
    """A catalog with list_objects (spec schema) and a tool with a sanitized argument."""
    return Catalog(
        [
            ToolDefinition("list_objects", "List objects.", LIST_OBJECTS_SCHEMA),
            tool(
                "get",
                {"from": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
                ["from", "limit"],
            ),
            tool("ping"),
            tool("loose", {"a": {"type": "string"}}, additionalProperties=True),
        ]
    )


def reject(catalog: Catalog, name: str, args: tuple, kwargs: dict) -> CallRejected:
    """The CallRejected that validating this call raises."""
    entry = catalog.lookup(name)
    assert entry is not None
    with pytest.raises(CallRejected) as info:
        catalog.validate(entry, args, kwargs)
    return info.value


def test_positional_arguments_rejected(catalog: Catalog) -> None:
    """Positional arguments: `TypeError: f() takes keyword arguments only`."""
    err = reject(catalog, "list_objects", ("a",), {})
    assert (err.exc_type, err.message) == (
        "TypeError",
        "list_objects() takes keyword arguments only",
    )


def test_unknown_keyword_rejected(catalog: Catalog) -> None:
    """Unknown keyword: the spec's message with the accepted list, required first."""
    err = reject(
        catalog, "list_objects", (), {"kcp": "k", "workspace": "w", "resource": "r", "bucket": "x"}
    )
    assert (err.exc_type, err.message) == (
        "TypeError",
        "list_objects() got an unexpected keyword argument 'bucket'; "
        "accepted: kcp, workspace, resource, namespace, selector",
    )
    err = reject(catalog, "ping", (), {"x": 1})
    assert err.message == "ping() got an unexpected keyword argument 'x'; accepted: (none)"


def test_missing_required_rejected(catalog: Catalog) -> None:
    """Missing required keyword: `TypeError: f() missing required keyword argument 'x'`."""
    err = reject(catalog, "list_objects", (), {"kcp": "k", "resource": "r"})
    assert (err.exc_type, err.message) == (
        "TypeError",
        "list_objects() missing required keyword argument 'workspace'",
    )


def test_check_order(catalog: Catalog) -> None:
    """Positional beats unknown, unknown beats missing."""
    assert "keyword arguments only" in reject(catalog, "list_objects", (1,), {"zzz": 1}).message
    assert (
        "unexpected keyword argument 'zzz'"
        in reject(catalog, "list_objects", (), {"zzz": 1}).message
    )


def test_optional_none_dropped(catalog: Catalog) -> None:
    """Optional keywords passed as None are dropped; the rest pass through unchanged."""
    entry = catalog.lookup("list_objects")
    assert entry is not None
    args = catalog.validate(
        entry,
        (),
        {"kcp": "k", "workspace": "w", "resource": "pods", "namespace": None, "selector": "app=x"},
    )
    assert args == {"kcp": "k", "workspace": "w", "resource": "pods", "selector": "app=x"}


def test_required_nullable_none_kept(catalog: Catalog) -> None:
    """A required nullable argument passed as None is sent as null."""
    entry = catalog.lookup("get")
    assert entry is not None
    assert catalog.validate(entry, (), {"from_": "a", "limit": None}) == {
        "from": "a",
        "limit": None,
    }


def test_sanitized_keyword_maps_back(catalog: Catalog) -> None:
    """A sanitized argument name maps back to the MCP name; the MCP name itself is accepted too."""
    entry = catalog.lookup("get")
    assert entry is not None
    assert catalog.validate(entry, (), {"from_": "x", "limit": 1}) == {"from": "x", "limit": 1}
    assert catalog.validate(entry, (), {"from": "x", "limit": 1}) == {"from": "x", "limit": 1}
    assert (
        reject(catalog, "get", (), {"limit": 1}).message
        == "get() missing required keyword argument 'from_'"
    )


def test_extra_keywords_pass_when_schema_allows(catalog: Catalog) -> None:
    """additionalProperties lets unlisted keywords through."""
    entry = catalog.lookup("loose")
    assert entry is not None
    assert catalog.validate(entry, (), {"a": "1", "zz": 2}) == {"a": "1", "zz": 2}
