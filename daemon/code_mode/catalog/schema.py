"""JSON schema → Python: the annotations and return sketches of the catalog's stubs.

Pure functions of a schema (and its root, for ``$ref``), no I/O.

Stub rules (spec table, plus what real MCP servers emit):

=====================================  =====================================
JSON schema                            Python
=====================================  =====================================
``string`` / ``integer`` / ``number``  ``str`` / ``int`` / ``float``
``boolean`` / ``null``                 ``bool`` / ``None``
``array`` of T                         ``list[T]``
``object``                             ``dict[str, Any]``
absent type, ``true``, ``{}``          ``Any``
``enum`` / ``const``                   ``Literal[...]``
type list, ``anyOf``, ``oneOf``        ``A | B``
``$ref`` to ``$defs``/``definitions``  the referenced schema (``Any`` past
                                       :data:`REF_BUDGET` nodes through them)
optional property                      ``T | None = None``
required property that allows null     ``T | None`` (still required)
=====================================  =====================================

A tool with an output schema gets that return annotation and a ``Returns:``
shape sketch in its docstring, at most :data:`SKETCH_MAX_DEPTH` containers
deep and :data:`SKETCH_MAX_PROPERTIES` properties per object, then ``...``.
mcp's ``MCPServer`` wraps a primitive or generic result as
``{"result": T}`` (schema title ``<tool>Output``) while its text content is
the bare value, which is what the sandbox receives, so such a schema is
unwrapped to ``T`` (except a list, which arrives as one text block per
element: that stub says ``Any``). Without an output schema a stub returns
``Any``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "REF_BUDGET",
    "SKETCH_MAX_DEPTH",
    "SKETCH_MAX_PROPERTIES",
    "Resolver",
    "python_literal",
    "return_sketch",
    "schema_annotation",
    "schema_type",
    "shape_sketch",
    "split_union",
    "unwrap_result",
]

SKETCH_MAX_DEPTH = 4
#: Schema nodes reached through ``$ref`` pointers that one walk of a tool's input
#: schema, or of its output schema, may visit before the rest reads as ``Any``
#: (see :class:`Resolver`); a real model's ``$defs`` take a few hundred.
REF_BUDGET = 20_000
SKETCH_MAX_PROPERTIES = 12
# Enum values shown in a sketch before ``| ...``; Literal[...] in a stub shows all.
_SKETCH_MAX_ENUM = 12

_PRIMITIVES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


class Resolver:
    """Follows ``$ref`` pointers inside one root schema, within a budget.

    Recursion is stopped by the callers (a ``$ref`` already on the path is
    ``Any``), but references without a cycle can still multiply: definitions
    that each refer to the next one twice are a few hundred bytes on the wire
    and 2 ** n paths when expanded. Every schema node reached through a
    pointer spends one of :data:`REF_BUDGET`; past it, the rest reads as ``Any``.
    """

    def __init__(self, root: Any):
        self.root = root
        self.budget = REF_BUDGET

    def resolve(self, ref: str) -> Any:
        """The schema a local ``#/...`` pointer names, or None."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                return None
        return node

    def spend(self) -> bool:
        """Take one node reached through a pointer from the budget; False once it is spent."""
        self.budget -= 1
        return self.budget >= 0


def python_literal(value: Any) -> str | None:
    """A JSON scalar as a Python literal, or None for lists and objects."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    return None


def _union(parts: Iterable[str]) -> str:
    """``A | B``, deduplicated, ``None`` last, ``Any`` absorbing everything."""
    seen: list[str] = []
    for part in parts:
        for p in split_union(part):
            if p not in seen:
                seen.append(p)
    if not seen or "Any" in seen:
        return "Any"
    if "None" in seen:
        seen = [p for p in seen if p != "None"] + ["None"]
    return " | ".join(seen)


def split_union(annotation: str) -> list[str]:
    """The top-level members of ``A | B[C | D]``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    parts.append(annotation[start:].strip())
    return [p for p in parts if p]


def schema_type(schema: Any, root: Any = None) -> str:
    """The Python annotation for a JSON schema (see the module docstring's table)."""
    return schema_annotation(schema, Resolver(schema if root is None else root), ())


def schema_annotation(schema: Any, resolver: Resolver, seen: tuple[str, ...]) -> str:
    if not isinstance(schema, Mapping) or (seen and not resolver.spend()):
        return "Any"  # true, false, junk, or past the budget of references
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = resolver.resolve(ref)
        if target is None or ref in seen:
            return "Any"  # unresolvable, or recursive
        return schema_annotation(target, resolver, (*seen, ref))
    if "const" in schema:
        lit = python_literal(schema["const"])
        if lit is None:
            return "Any"  # a list or object constant
        return "None" if lit == "None" else f"Literal[{lit}]"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        lits = [python_literal(v) for v in enum]
        if None in lits:
            return "Any"  # an enum of objects: no useful literal
        values = [lit for lit in lits if lit is not None and lit != "None"]
        parts = [f"Literal[{', '.join(values)}]"] if values else []
        return _union([*parts, *(["None"] if "None" in lits else [])])
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return _union(schema_annotation(m, resolver, seen) for m in members)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        if len(all_of) == 1:
            return schema_annotation(all_of[0], resolver, seen)
        kinds = {schema_annotation(m, resolver, seen) for m in all_of}
        return kinds.pop() if len(kinds) == 1 else "Any"
    types = schema.get("type")
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not types:
        if "properties" in schema:
            return "dict[str, Any]"
        if "items" in schema:
            types = ["array"]
        else:
            return "Any"
    parts = []
    for t in types:
        if isinstance(t, str) and t in _PRIMITIVES:
            parts.append(_PRIMITIVES[t])
        elif t == "array":
            items = schema.get("items")
            inner = (
                schema_annotation(items, resolver, seen) if isinstance(items, Mapping) else "Any"
            )
            parts.append(f"list[{inner}]")
        elif t == "object":
            parts.append("dict[str, Any]")
        else:
            parts.append("Any")
    return _union(parts)


# Shape sketch ---------------------------------------------------------------------------


def return_sketch(schema: Any, root: Any = None) -> str:
    """A compact JSON-like shape of ``schema``: ``{"kcps": [{"id": str, ...}], "errors": [str]}``.

    At most :data:`SKETCH_MAX_DEPTH` containers deep (deeper ones become
    ``{...}`` / ``[...]``) and :data:`SKETCH_MAX_PROPERTIES` properties per
    object (the rest become ``...``).
    """
    return shape_sketch(schema, Resolver(schema if root is None else root), (), 0)


def shape_sketch(schema: Any, resolver: Resolver, seen: tuple[str, ...], depth: int) -> str:
    if not isinstance(schema, Mapping) or (seen and not resolver.spend()):
        return "Any"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = resolver.resolve(ref)
        if target is None:
            return "Any"
        if ref in seen:
            return "{...}"  # a recursive type: show one level
        return shape_sketch(target, resolver, (*seen, ref), depth)
    if "const" in schema:
        return python_literal(schema["const"]) or "Any"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        lits = [python_literal(v) or "Any" for v in enum]
        shown = " | ".join(lits[:_SKETCH_MAX_ENUM])
        return shown + (" | ..." if len(lits) > _SKETCH_MAX_ENUM else "")
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return _sketch_union(shape_sketch(m, resolver, seen, depth) for m in members)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return shape_sketch(all_of[0], resolver, seen, depth)
    types = schema.get("type")
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not types:
        if "properties" in schema:
            types = ["object"]
        elif "items" in schema:
            types = ["array"]
        else:
            return "Any"
    parts = []
    for t in types:
        if isinstance(t, str) and t in _PRIMITIVES:
            parts.append(_PRIMITIVES[t])
        elif t == "array":
            if depth >= SKETCH_MAX_DEPTH:
                parts.append("[...]")
                continue
            items = schema.get("items")
            parts.append(
                f"[{shape_sketch(items, resolver, seen, depth + 1)}]"
                if isinstance(items, Mapping)
                else "list"
            )
        elif t == "object":
            parts.append(_sketch_object(schema, resolver, seen, depth))
        else:
            parts.append("Any")
    return _sketch_union(parts)


def _sketch_object(schema: Mapping, resolver: Resolver, seen: tuple[str, ...], depth: int) -> str:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if depth >= SKETCH_MAX_DEPTH:
        return "{...}"
    if not isinstance(props, Mapping) or not props:
        if isinstance(extra, Mapping) and extra:
            return f"{{str: {shape_sketch(extra, resolver, seen, depth + 1)}}}"
        return "dict"
    fields = [
        f"{json.dumps(k)}: {shape_sketch(v, resolver, seen, depth + 1)}" for k, v in props.items()
    ]
    more = len(fields) > SKETCH_MAX_PROPERTIES or bool(extra)
    fields = fields[:SKETCH_MAX_PROPERTIES]
    return "{" + ", ".join([*fields, *(["..."] if more else [])]) + "}"


def _sketch_union(parts: Iterable[str]) -> str:
    seen: list[str] = []
    for p in parts:
        if p not in seen:
            seen.append(p)
    if "None" in seen:
        seen = [p for p in seen if p != "None"] + ["None"]
    return " | ".join(seen) if seen else "Any"


def unwrap_result(schema: Mapping, tool: str) -> Any:
    """The ``T`` of mcp's ``{"result": T}`` wrapping, or the schema itself.

    ``$ref``s inside ``T`` still resolve against the root schema.
    """
    props = schema.get("properties")
    if (
        isinstance(props, Mapping)
        and list(props) == ["result"]
        and schema.get("title") == f"{tool}Output"
    ):
        return props["result"]
    return schema


# Stub text ------------------------------------------------------------------------------
