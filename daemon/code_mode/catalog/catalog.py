"""The catalog: inner tools as typed ``async def`` functions of the sandbox.

Pure code, no I/O: the engine builds one ``Catalog`` from the inner
executor's definitions and uses it three ways.

- ``catalog.lookup(py_name)`` → ``CatalogEntry`` or None (→ NameError);
- ``catalog.validate(entry, args, kwargs)`` → the MCP arguments dict, or
  raises ``CallRejected(exc_type, message)``, which the engine raises in the
  sandbox (spec A3, word for word);
- ``catalog.render()`` → the stubs for the run_code description (spec
  "Python stubs" and A1); ``catalog.type_stubs()`` → the same signatures
  without docstrings, for Monty's type checker.

Parameters are keyword-only, required first, each group in the schema's
property order. Tool and parameter names that are not Python identifiers are
sanitized (``[^A-Za-z0-9_]`` → ``_``, a leading digit gets ``_``, a keyword
gets a trailing ``_``, collisions get a numeric suffix ``_2``, ``_3``…);
``validate`` maps them back to the MCP names.

Return annotations and ``Returns:`` sketches come from
:mod:`daemon.code_mode.catalog.schema` (JSON schema → Python, with its table).
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from daemon.code_mode.catalog.schema import (
    Resolver,
    python_literal,
    schema_annotation,
    shape_sketch,
    split_union,
    unwrap_result,
)
from daemon.tools import ToolDefinition

__all__ = [
    "CallRejected",
    "Catalog",
    "CatalogEntry",
    "CatalogSource",
    "ObservedShapes",
    "Param",
    "python_name",
    "render_stub",
]


class _Keywords:
    """An entry's parameters by Python name and by MCP name, and the required ones."""

    def __init__(self, entry: CatalogEntry):
        self.entry = entry
        self.by_py = {p.py_name: p for p in entry.params}
        self.by_mcp = {p.name: p for p in entry.params}
        self.required = tuple(p for p in entry.params if p.required)


class CallRejected(Exception):
    """A nested call failed validation; raised in the sandbox as ``exc_type(message)``."""

    def __init__(self, exc_type: str, message: str):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


@dataclass(frozen=True)
class Param:
    """One keyword-only parameter of a stub."""

    py_name: str  # the keyword the sandbox passes
    name: str  # the MCP argument name
    annotation: str  # without the optional ``| None``
    required: bool
    nullable: bool  # the schema allows null
    description: str | None = None
    default: Any = None  # the schema's default, shown in the docstring

    def render(self) -> str:
        """``name: T``, ``name: T | None`` or ``name: T | None = None``."""
        if self.required:
            return f"{self.py_name}: {self.annotation}"
        if self.annotation == "Any" or self.nullable:
            return f"{self.py_name}: {self.annotation} = None"
        return f"{self.py_name}: {self.annotation} | None = None"


@dataclass(frozen=True)
class CatalogEntry:
    """One tool as a sandbox function."""

    py_name: str
    definition: ToolDefinition
    required: tuple[str, ...]  # MCP argument names
    optional: tuple[str, ...]  # MCP argument names
    params: tuple[Param, ...] = ()
    extra_keywords: bool = False  # the input schema admits unlisted arguments
    returns: str = "Any"  # the return annotation
    sketch: str | None = None  # the ``Returns:`` shape, when there is an output schema
    observed: bool = False  # the shape was learned from results, not declared (issue 19)
    # the learned shape (a JSON schema) the sketch shows, when ``observed``: the
    # harness renders it again as a typed example
    shape: Mapping[str, Any] | None = None

    @property
    def tool_name(self) -> str:
        """The MCP name the call is sent as."""
        return self.definition.name

    def stub(self) -> str:
        """The ``async def`` stub with its docstring, as the model reads it."""
        return render_stub(self)


def python_name(name: str) -> str:
    """A tool or argument name made a Python identifier (no collision handling)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    if keyword.iskeyword(ident) or ident in {"Any", "Literal"}:
        ident += "_"
    return ident


class _Names:
    """Python names handed out so far: ``base``, then ``base_2``, ``base_3``...

    Each base remembers its next suffix, so that many names that sanitize alike
    (a server's tools named in CJK are all ``_``s) take linear time, not quadratic.
    """

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}

    def unique(self, base: str) -> str:
        name, n = base, self._next.get(base, 2)
        if name in self._taken:
            name = f"{base}_{n}"
            while name in self._taken:
                n += 1
                name = f"{base}_{n}"
            self._next[base] = n + 1
        self._taken.add(name)
        return name


# Stubs ------------------------------------------------------------------------------------


def _docstring_lines(entry: CatalogEntry) -> list[str]:
    lines = [ln.rstrip() for ln in entry.definition.description.strip().splitlines()]
    args = []
    for p in entry.params:
        text = " ".join((p.description or "").split())
        if p.default is not None:
            shown = python_literal(p.default) or json.dumps(p.default)
            text = f"{text} (default {shown})" if text else f"default {shown}"
        if text:
            args.append(f"    {p.py_name}: {text}")
    if args:
        lines += ["Args:", *args]
    if entry.sketch is not None:
        label = "Returns (observed)" if entry.observed else "Returns"
        lines.append(f"{label}: {entry.sketch}")
    # Three quotes would end the docstring early.
    return [ln.replace('"""', "'''") for ln in lines]


def _signature(entry: CatalogEntry) -> str:
    params = [p.render() for p in entry.params]
    if entry.extra_keywords:
        params.append("**kwargs: Any")
    inner = ", ".join(params)
    if entry.params:
        inner = "*, " + inner
    return f"async def {entry.py_name}({inner}) -> {entry.returns}:"


def render_stub(entry: CatalogEntry) -> str:
    """The stub of one entry: signature, then a docstring.

    A one-line description with no ``Args:`` or ``Returns:`` stays on one
    line (the spec's ``list_objects`` example); anything longer puts the
    quotes on their own lines (the A1 ``list_kcps`` example).
    """
    lines = _docstring_lines(entry)
    sig = _signature(entry)
    if not lines or lines == [""]:
        return f"{sig}\n    ..."
    if len(lines) == 1:
        return f'{sig}\n    """{lines[0]}"""'
    body = "\n".join(f"    {ln}" if ln else "" for ln in lines)
    return f'{sig}\n    """\n{body}\n    """'


# The catalog ----------------------------------------------------------------------------


def _params(schema: Any, resolver: Resolver) -> tuple[tuple[Param, ...], bool]:
    if not isinstance(schema, Mapping):
        return (), False
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required_list = [r for r in schema.get("required") or () if isinstance(r, str)]
    required = set(required_list)
    names = list(props) + [r for r in dict.fromkeys(required_list) if r not in props]
    taken = _Names()
    built = []
    for name in names:
        prop = props.get(name, {})
        annotation = schema_annotation(prop, resolver, ())
        nullable = "None" in split_union(annotation)
        description = prop.get("description") if isinstance(prop, Mapping) else None
        default = prop.get("default") if isinstance(prop, Mapping) else None
        built.append(
            Param(
                py_name=taken.unique(python_name(name)),
                name=name,
                annotation=annotation,
                required=name in required,
                nullable=nullable,
                description=description if isinstance(description, str) else None,
                default=default,
            )
        )
    ordered = tuple(p for p in built if p.required) + tuple(p for p in built if not p.required)
    extra = schema.get("additionalProperties")
    return ordered, extra is True or (isinstance(extra, Mapping) and bool(extra))


def _entry(py_name: str, d: ToolDefinition, learned: Mapping[str, Any] | None) -> CatalogEntry:
    input_schema = d.input_schema or {}
    params, extra = _params(input_schema, Resolver(input_schema))
    returns, sketch, observed, shape = "Any", None, False, None
    if not isinstance(d.output_schema, Mapping) and learned is not None:
        # a learned shape is our own schema, never wrapped (issue 19)
        resolver = Resolver(learned)
        returns = schema_annotation(learned, resolver, ())
        sketch, observed, shape = shape_sketch(learned, resolver, (), 0), True, learned
    elif isinstance(d.output_schema, Mapping):
        root = d.output_schema
        shape = unwrap_result(root, d.name)
        resolver = Resolver(root)
        returns = schema_annotation(shape, resolver, ())
        sketch = shape_sketch(shape, resolver, (), 0)
        if shape is not root and returns.startswith("list["):
            # mcp sends a wrapped list as one text block per element: the
            # sandbox gets newline-joined JSON texts, not a list. Promise nothing.
            returns, sketch = "Any", None
    return CatalogEntry(
        py_name=py_name,
        definition=d,
        required=tuple(p.name for p in params if p.required),
        optional=tuple(p.name for p in params if not p.required),
        params=params,
        extra_keywords=extra,
        returns=returns,
        sketch=sketch,
        observed=observed,
        shape=shape,
    )


ObservedShapes = Callable[[ToolDefinition], "Mapping[str, Any] | None"]
"""The learned shape (a JSON schema) of a tool without an output schema, or None."""


class Catalog:
    """Inner tools by their Python names, in the order the executor listed them.

    ``observed`` gives the learned return shape of a tool that declares none
    (issue 19; a declared output schema always wins). ``budget``: when the
    rendered stubs are longer than this many characters the catalog is
    :attr:`searchable`: the description lists names and one line each, and
    the sandbox gets ``search_tools`` and ``describe`` (:mod:`~daemon.code_mode.catalog.search`).
    """

    def __init__(
        self,
        definitions: Iterable[ToolDefinition],
        *,
        observed: ObservedShapes | None = None,
        budget: int | None = None,
    ):
        self.entries: dict[str, CatalogEntry] = {}
        taken = _Names()
        for d in definitions:
            py = taken.unique(python_name(d.name))
            self.entries[py] = _entry(py, d, observed(d) if observed is not None else None)
        self._stubs = "\n\n".join(e.stub() for e in self.entries.values())
        # each entry's keywords, made once instead of per call (validate)
        self._keywords: dict[str, _Keywords] = {}
        self.budget = budget
        self.searchable = budget is not None and len(self._stubs) > budget

    def lookup(self, py_name: str) -> CatalogEntry | None:
        """The entry called ``py_name`` in the sandbox, or None."""
        return self.entries.get(py_name)

    def validate(self, entry: CatalogEntry, args: tuple, kwargs: Mapping[str, Any]) -> dict:
        """The MCP arguments for a sandbox call, or :class:`CallRejected` (spec A3).

        Checks in this order: positional arguments, unknown keywords (with the
        accepted list), missing required keywords. Optional keywords passed as
        None are dropped, matching the stub default. A keyword may be given by
        its Python name or by its MCP name (``**{"from": x}``).
        """
        f = entry.py_name
        if args:
            raise CallRejected("TypeError", f"{f}() takes keyword arguments only")
        keywords = self._keywords.get(f)
        if keywords is None or keywords.entry is not entry:
            keywords = self._keywords[f] = _Keywords(entry)
        by_py, by_mcp = keywords.by_py, keywords.by_mcp
        out: dict[str, Any] = {}
        for key, value in kwargs.items():
            param = by_py.get(key) or by_mcp.get(key)
            if param is None:
                if entry.extra_keywords:
                    out[key] = value
                    continue
                accepted = ", ".join(by_py) or "(none)"
                raise CallRejected(
                    "TypeError",
                    f"{f}() got an unexpected keyword argument '{key}'; accepted: {accepted}",
                )
            if value is None and not param.required:
                continue
            out[param.name] = value
        for p in keywords.required:
            if p.name not in out:
                raise CallRejected(
                    "TypeError", f"{f}() missing required keyword argument '{p.py_name}'"
                )
        return out

    def render(self) -> str:
        """The stubs of every tool, blank-line separated: the catalog part of the description.

        Rendered once, as the catalog is built (its size decides :attr:`searchable`).
        """
        return self._stubs

    def type_stubs(self) -> str:
        """Docstring-free stubs for Monty's type checker (``type_check_stubs``)."""
        out = ["from typing import Any, Literal", ""]
        for e in self.entries.values():
            out += [_signature(e), "    ...", ""]
        return "\n".join(out)


@runtime_checkable
class CatalogSource(Protocol):
    """An executor that can show the :class:`Catalog` behind its ``run_code`` tool.

    Code mode is one (and the restart-note wrapper around it); the small-model
    harness builds its prompt and its repairs from the catalog, never from the
    rendered description.
    """

    @property
    def catalog(self) -> Catalog | None:
        """The catalog, or None while the tools are not listed yet (or not code mode):
        with the shapes learned outside any thread."""
        ...

    def channel_catalog(self, channel: str) -> Catalog | None:
        """:attr:`catalog` with the return shapes learned in ``channel``'s runs only (issue
        29): what a run of that channel is shown."""
        ...
