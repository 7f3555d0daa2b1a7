"""A function's result as a small typed example, shown before the first snippet (pure).

The system message sketches each result in its function's stub (``Returns:``),
among every other function of the catalog and some 4 000 tokens before the
question. A small model's first snippet then reads a key the result does not
have (``r['items']`` of a dict whose list sits under another key), indexes text
as if it were a dict, or reads a key only some items hold as if all did.

Rule ``shape-first``: right after the question (never before the catalog,
which the server's prompt cache holds), for the functions the question is
about (:func:`~daemon.model.harness.topics.asked_functions`, at most two)
whose result has a declared output schema or a learned shape (issue 19), the
result as one typed value: one item of each list, the type of each leaf, a
``?`` after a key the schema does not require, at most
:data:`MAX_EXAMPLE_CHARS` per function::

    http_get(...) returns {'status': int, 'content_type': str | None, 'body': str, 'json'?: Any}

A result too long for that loses the keys late in each object first (schemas
and learned shapes put what matters first), then depth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from daemon.code_mode.catalog import Catalog, CatalogEntry, Resolver, unwrap_result
from daemon.model.harness.rules import on

__all__ = ["MAX_EXAMPLE_CHARS", "SHAPES_HEADER", "result_example", "shapes_first", "typed_example"]

#: The most characters one function's example line takes.
MAX_EXAMPLE_CHARS = 400

SHAPES_HEADER = "What these functions return (one item of each list, the type of each value):"
_OPTIONAL_NOTE = "A key marked ? may be missing: read it with .get()."

_ENUM_SHOWN = 4
_PRIMITIVES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}
# (containers deep, keys per object) tried in turn until the example fits its limit
_FITS = ((8, 12), (8, 8), (6, 6), (5, 5), (4, 4), (4, 3), (3, 3), (2, 3), (1, 2), (0, 0))


class _Render:
    """One rendering of a schema at a depth and width; notes whether a key was optional."""

    def __init__(self, resolver: Resolver, depth: int, width: int) -> None:
        self.resolver = resolver
        self.depth = depth
        self.width = width
        self.optional = False

    def value(self, schema: Any, seen: tuple[str, ...], depth: int) -> str:
        if not isinstance(schema, Mapping):
            return "Any"  # true, or junk
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.resolver.resolve(ref)
            if target is None:
                return "Any"
            if ref in seen:
                return "{...}"  # a recursive type: one level
            return self.value(target, (*seen, ref), depth)
        if "const" in schema:
            return _literal(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            shown = [_literal(v) for v in enum[:_ENUM_SHOWN]]
            return _union([*shown, *(["..."] if len(enum) > _ENUM_SHOWN else [])])
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list) and members:
                return _union(self.value(m, seen, depth) for m in members)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            return self.value(all_of[0], seen, depth) if len(all_of) == 1 else "Any"
        kinds = schema.get("type")
        if isinstance(kinds, str):
            kinds = [kinds]
        if not isinstance(kinds, list) or not kinds:
            if "properties" in schema:
                kinds = ["object"]
            elif "items" in schema:
                kinds = ["array"]
            else:
                return "Any"
        return _union(self.kind(k, schema, seen, depth) for k in kinds)

    def kind(self, kind: Any, schema: Mapping[str, Any], seen: tuple[str, ...], depth: int) -> str:
        if not isinstance(kind, str):
            return "Any"  # junk in a type list
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        if kind == "array":
            items = schema.get("items")
            if not isinstance(items, Mapping):
                return "list"
            if depth >= self.depth:
                return "[...]"
            return f"[{self.value(items, seen, depth + 1)}]"
        if kind == "object":
            return self.object(schema, seen, depth)
        return "Any"

    def object(self, schema: Mapping[str, Any], seen: tuple[str, ...], depth: int) -> str:
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not isinstance(props, Mapping) or not props:
            if isinstance(extra, Mapping) and extra:
                if depth >= self.depth:
                    return "{...}"
                return f"{{str: {self.value(extra, seen, depth + 1)}}}"
            return "dict"
        if depth >= self.depth:
            return "{...}"
        required = schema.get("required")
        # a schema that lists no required keys says nothing of which are missing
        needed = set(required) if isinstance(required, list) else None
        fields = []
        for key, sub in list(props.items())[: self.width]:
            mark = ""
            if needed is not None and key not in needed:
                mark, self.optional = "?", True
            fields.append(f"{key!r}{mark}: {self.value(sub, seen, depth + 1)}")
        if len(props) > self.width or extra:
            fields.append("...")
        return "{" + ", ".join(fields) + "}"


def _literal(value: Any) -> str:
    """A JSON scalar as Python writes it (``'Running'``, ``3``, ``None``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return "Any"  # a list or object constant


def _union(parts: Iterable[str]) -> str:
    """``A | B``, each once, ``None`` last (as the stubs write it)."""
    seen: list[str] = []
    for part in parts:
        if part not in seen:
            seen.append(part)
    if "None" in seen:
        seen = [p for p in seen if p != "None"] + ["None"]
    return " | ".join(seen) or "Any"


def _example(schema: Any, root: Any, limit: int) -> tuple[str, bool]:
    """The example of ``schema`` in at most ``limit`` characters, and whether it marks
    an optional key."""
    resolver = Resolver(schema if root is None else root)
    text, optional = "Any", False
    for depth, width in _FITS:
        render = _Render(resolver, depth, width)
        text, optional = render.value(schema, (), 0), render.optional
        if len(text) <= limit:
            return text, optional
    return text[: max(limit - 1, 0)] + "…", optional


def typed_example(schema: Any, root: Any = None, *, limit: int = MAX_EXAMPLE_CHARS) -> str:
    """A JSON ``schema`` (``$ref`` resolved against ``root``) as one typed value in at
    most ``limit`` characters: ``{'items': [{'name': str, 'ready'?: bool}]}``."""
    return _example(schema, root, limit)[0]


def _result_schema(entry: CatalogEntry) -> tuple[Any, Any] | None:
    """The schema ``entry``'s ``Returns:`` sketch shows, and its root; None without one."""
    if entry.sketch is None:  # no schema, or a wrapped list the sandbox gets as text
        return None
    if entry.observed:
        return (entry.shape, entry.shape) if entry.shape is not None else None
    root = entry.definition.output_schema
    if not isinstance(root, Mapping):
        return None
    return unwrap_result(root, entry.definition.name), root


def _entry_example(entry: CatalogEntry, limit: int) -> tuple[str, bool] | None:
    found = _result_schema(entry)
    if found is None:
        return None
    head = f"{entry.py_name}(...) returns "
    text, optional = _example(*found, max(limit - len(head), 0))
    return head + text, optional


def result_example(entry: CatalogEntry, *, limit: int = MAX_EXAMPLE_CHARS) -> str | None:
    """``name(...) returns <typed example>`` in at most ``limit`` characters, for a function
    whose result has a declared output schema or a learned shape; None for one without."""
    found = _entry_example(entry, limit)
    return found[0] if found is not None else None


def shapes_first(names: Iterable[str], catalog: Catalog) -> str:
    """What the first request shows after the question: the result examples of the
    catalog functions ``names`` (those that have one), or "" when none has. Rule
    ``shape-first``."""
    if not on("shape-first"):
        return ""
    found = [_entry_example(e, MAX_EXAMPLE_CHARS) for e in map(catalog.lookup, names) if e]
    lines = [f for f in found if f is not None]
    if not lines:
        return ""
    note = [_OPTIONAL_NOTE] if any(optional for _, optional in lines) else []
    return "\n".join([SHAPES_HEADER, *(text for text, _ in lines), *note])
