"""Learned return shapes (issue 19): what a tool without an output schema was seen to return.

Pure functions of JSON values, no I/O. A shape is a small JSON schema, so
the stubs render it with the declared path (:func:`~daemon.code_mode.catalog.schema.shape_sketch`,
the same 4 levels / 12 properties form) and it is stored as JSON text:

=====================  ==================================================
value                  shape
=====================  ==================================================
``None``               ``{"type": "null"}``
``True``               ``{"type": "boolean"}``
``3`` / ``3.5``        ``{"type": "integer"}`` / ``{"type": "number"}``
``"x"``                ``{"type": "string"}``
a list                 ``{"type": "array", "items": <its items merged>}``
                       (an empty list: no ``items``)
a dict                 ``{"type": "object", "properties": {...},
                       "required": [...]}``: its first 12 keys;
                       more keys add ``"additionalProperties": true``
a container 4 deep     ``{"type": "object"}`` / ``{"type": "array"}``
values of two kinds    ``{"anyOf": [...]}``, one member per kind, null last
=====================  ==================================================

Large values are sampled, so learning costs little: the first
:data:`SAMPLE_ITEMS` items of each list, and at most :data:`MAX_NODES`
values in all (past that, a value's shape is ``{}``, Any).

:func:`merge` joins two shapes: properties of both (required only when
both require them), ``integer`` and ``number`` as ``number``, other kinds
side by side. :func:`fits` says whether a value still matches a shape: the
kinds agree where the shape says something (the same samples), and every
required key is there; a key the shape does not list never breaks the fit.
A result that does not fit is merged into the shape, so a tool that returns
two kinds of result settles on one shape instead of flapping between them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from daemon.code_mode.catalog.schema import SKETCH_MAX_DEPTH, SKETCH_MAX_PROPERTIES

__all__ = [
    "MAX_NODES",
    "SAMPLE_ITEMS",
    "dump_shape",
    "fits",
    "infer_shape",
    "learnable",
    "load_shape",
    "merge",
]

SAMPLE_ITEMS = 20
MAX_NODES = 4000

# the kinds of a shape, in the order a union lists them (null last, as the sketches do)
_KINDS = ("object", "array", "string", "number", "integer", "boolean", "null")


class _Budget:
    """How many more values one inference or fit check may look at."""

    def __init__(self) -> None:
        self.left = MAX_NODES

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


def learnable(value: Any) -> bool:
    """Whether a result teaches a shape: a parsed JSON object or array (not text)."""
    return isinstance(value, (dict, list))


def infer_shape(value: Any) -> dict[str, Any]:
    """The shape of one JSON value (see the module's table)."""
    return _infer(value, 0, _Budget())


def _infer(value: Any, depth: int, budget: _Budget) -> dict[str, Any]:
    if not budget.take():
        return {}
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, (list, tuple)):
        if depth >= SKETCH_MAX_DEPTH:
            return {"type": "array"}
        shape: dict[str, Any] = {"type": "array"}
        items: dict[str, Any] | None = None
        for item in value[:SAMPLE_ITEMS]:
            one = _infer(item, depth + 1, budget)
            items = one if items is None else merge(items, one)
        if items is not None:
            shape["items"] = items
        return shape
    if isinstance(value, Mapping):
        if depth >= SKETCH_MAX_DEPTH:
            return {"type": "object"}
        keys = [k for k in value if isinstance(k, str)]
        props = {k: _infer(value[k], depth + 1, budget) for k in keys[:SKETCH_MAX_PROPERTIES]}
        shape = {"type": "object", "properties": props, "required": list(props)}
        if len(keys) > SKETCH_MAX_PROPERTIES:
            shape["additionalProperties"] = True
        return shape
    return {}  # not a JSON value: nothing to say


def _members(shape: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    members = shape.get("anyOf")
    if isinstance(members, list):
        return [m for m in members if isinstance(m, Mapping)]
    return [shape]


def _kind(shape: Mapping[str, Any]) -> str | None:
    kind = shape.get("type")
    return kind if isinstance(kind, str) and kind in _KINDS else None


def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """One shape that both ``a`` and ``b`` fit (see the module docstring)."""
    if a == b:
        return dict(a)
    by_kind: dict[str, dict[str, Any]] = {}
    for member in [*_members(a), *_members(b)]:
        kind = _kind(member)
        if kind is None:
            return {}  # Any absorbs everything
        if kind == "integer" and "number" in by_kind:
            continue
        if kind == "number" and "integer" in by_kind:
            del by_kind["integer"]
        known = by_kind.get(kind)
        by_kind[kind] = dict(member) if known is None else _merge_same(known, member)
    merged = [by_kind[k] for k in _KINDS if k in by_kind]
    if len(merged) == 1:
        return merged[0]
    return {"anyOf": merged}


def _merge_same(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two shapes of the same kind as one."""
    kind = a["type"]
    if kind == "array":
        out: dict[str, Any] = {"type": "array"}
        ia, ib = a.get("items"), b.get("items")
        if isinstance(ia, Mapping) and isinstance(ib, Mapping):
            out["items"] = merge(ia, ib)
        elif isinstance(ia, Mapping):
            out["items"] = dict(ia)
        elif isinstance(ib, Mapping):
            out["items"] = dict(ib)
        return out
    if kind != "object":
        return dict(a)
    pa, pb = a.get("properties"), b.get("properties")
    if not isinstance(pa, Mapping) or not isinstance(pb, Mapping):
        return {"type": "object"}  # one side was past the depth: say no more than it
    props: dict[str, Any] = {}
    for key in [*pa, *(k for k in pb if k not in pa)]:
        if key in pa and key in pb:
            props[key] = merge(pa[key], pb[key])
        else:
            props[key] = pa[key] if key in pa else pb[key]
    required = [k for k in a.get("required", ()) if k in set(b.get("required", ()))]
    out = {"type": "object", "properties": dict(list(props.items())[:SKETCH_MAX_PROPERTIES])}
    out["required"] = [k for k in required if k in out["properties"]]
    if (
        len(props) > SKETCH_MAX_PROPERTIES
        or a.get("additionalProperties")
        or b.get("additionalProperties")
    ):
        out["additionalProperties"] = True
    return out


def fits(value: Any, shape: Mapping[str, Any]) -> bool:
    """Whether ``value`` matches ``shape`` (see the module docstring)."""
    return _fits(value, shape, _Budget())


def _fits(value: Any, shape: Mapping[str, Any], budget: _Budget) -> bool:
    if not budget.take():
        return True  # not looked at: no evidence against it
    members = _members(shape)
    if len(members) > 1:
        return any(_fits(value, m, budget) for m in members)
    kind = _kind(shape)
    if kind is None:
        return True  # Any
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            return False
        items = shape.get("items")
        if not isinstance(items, Mapping):
            return True
        return all(_fits(item, items, budget) for item in value[:SAMPLE_ITEMS])
    if not isinstance(value, Mapping):
        return False
    props = shape.get("properties")
    if not isinstance(props, Mapping):
        return True
    if any(key not in value for key in shape.get("required", ())):
        return False
    return all(_fits(value[k], sub, budget) for k, sub in props.items() if k in value)


def dump_shape(shape: Mapping[str, Any]) -> str:
    """A shape as the JSON text stored (compact, keys in their order: the same bytes each time)."""
    return json.dumps(shape, separators=(",", ":"), ensure_ascii=False)


def load_shape(text: str) -> dict[str, Any] | None:
    """A stored shape, or None when the text is not a JSON object."""
    try:
        shape = json.loads(text)
    except ValueError:
        return None
    return shape if isinstance(shape, dict) else None
