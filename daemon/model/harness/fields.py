"""The fields a ``Returns:`` sketch cuts short, spelled out as access paths (pure).

Code mode's stubs sketch a tool's output schema at most
:data:`~daemon.code_mode.catalog.schema.SKETCH_MAX_DEPTH` containers deep; deeper
parts show as ``[...]`` or ``{...}``. A pod's restart count sits five levels
down a list (``items`` → pod → ``status`` → ``containerStatuses`` → entry), so
the sketch hid exactly the field a small model then guessed
(``containerRestartCount``). :func:`hidden_fields` lists those leaves as the
paths a snippet writes, ``x["items"][i]["status"]["containerStatuses"][j]
["restartCount"]: int``, once per group of functions that share them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from daemon.code_mode.catalog import (
    SKETCH_MAX_DEPTH,
    Catalog,
    CatalogEntry,
    schema_type,
    unwrap_result,
)

__all__ = ["entry_hidden_paths", "hidden_fields", "hidden_paths"]

_INDEXES = "ijklmn"
_MAX_PATHS = 24  # per group of functions: the section stays a few hundred tokens


def hidden_paths(schema: Any) -> list[str]:
    """The leaves of ``schema`` that its sketch elides, as ``x[...]`` paths with their types."""
    found: list[str] = []
    _walk(schema, "x", 0, False, 0, found)
    return found


def _walk(schema: Any, path: str, depth: int, elided: bool, lists: int, out: list[str]) -> None:
    if not isinstance(schema, Mapping) or len(out) >= _MAX_PATHS:
        return
    kind = schema.get("type")
    props = schema.get("properties")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        index = _INDEXES[min(lists, len(_INDEXES) - 1)]
        cut = elided or depth >= SKETCH_MAX_DEPTH
        _walk(schema["items"], f"{path}[{index}]", depth + 1, cut, lists + 1, out)
        return
    if (kind == "object" or kind is None) and isinstance(props, Mapping) and props:
        cut = elided or depth >= SKETCH_MAX_DEPTH
        for key, sub in props.items():
            _walk(sub, f"{path}[{json.dumps(key)}]", depth + 1, cut, lists, out)
        return
    if elided or (kind in ("object", "array") and depth >= SKETCH_MAX_DEPTH):
        out.append(f"{path}: {schema_type(schema)}")


def entry_hidden_paths(entry: CatalogEntry) -> list[str]:
    """The result fields ``entry``'s ``Returns:`` sketch cuts short (:func:`hidden_paths`);
    none without a sketch of a declared schema."""
    schema = entry.definition.output_schema
    if entry.sketch is None or not isinstance(schema, Mapping):
        return []
    return hidden_paths(unwrap_result(schema, entry.definition.name))


def hidden_fields(catalog: Catalog) -> str:
    """A section naming, per function, the result fields its ``Returns:`` line cut short;
    empty when every sketch is whole."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, entry in catalog.entries.items():
        paths = tuple(entry_hidden_paths(entry))
        if paths:
            groups.setdefault(paths, []).append(name)
    if not groups:
        return ""
    lines = ["Fields the Returns: lines above shorten (x is the function's result):"]
    for paths, names in groups.items():
        lines.append(f"- {', '.join(names)}: " + "; ".join(paths))
    return "\n".join(lines)
