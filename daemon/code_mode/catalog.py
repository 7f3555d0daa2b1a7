"""The catalog: inner tools as Python functions of the sandbox.

This first version renders names and descriptions and maps Python names back
to tool names; typed ``async def`` stubs and full call validation (spec A1,
A3) extend it without changing this interface:

- ``Catalog(definitions)``: build from the inner executor's definitions;
- ``catalog.lookup(py_name)`` → ``CatalogEntry`` or None (→ NameError);
- ``catalog.validate(entry, args, kwargs)`` → the MCP arguments dict, or raises
  ``CallRejected(exc_type, message)``, which the engine raises in the sandbox;
- ``catalog.render()`` → the catalog section of the run_code description.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.tools import ToolDefinition

__all__ = ["CallRejected", "Catalog", "CatalogEntry", "python_name"]


class CallRejected(Exception):
    """A nested call failed validation; raised in the sandbox as ``exc_type(message)``."""

    def __init__(self, exc_type: str, message: str):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


@dataclass(frozen=True)
class CatalogEntry:
    """One tool as a sandbox function."""

    py_name: str
    definition: ToolDefinition
    required: tuple[str, ...]
    optional: tuple[str, ...]

    @property
    def tool_name(self) -> str:
        """The MCP name the call is sent as."""
        return self.definition.name


def python_name(name: str) -> str:
    """A tool name made a Python identifier (no collision handling)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    return ident


class Catalog:
    """Inner tools by their Python names."""

    def __init__(self, definitions: Iterable[ToolDefinition]):
        self.entries: dict[str, CatalogEntry] = {}
        for d in definitions:
            props = (d.input_schema or {}).get("properties") or {}
            required = tuple((d.input_schema or {}).get("required") or ())
            optional = tuple(p for p in props if p not in required)
            base = python_name(d.name)
            py, n = base, 2
            while py in self.entries:
                py, n = f"{base}_{n}", n + 1
            self.entries[py] = CatalogEntry(py, d, required, optional)

    def lookup(self, py_name: str) -> CatalogEntry | None:
        """The entry called ``py_name`` in the sandbox, or None."""
        return self.entries.get(py_name)

    def validate(self, entry: CatalogEntry, args: tuple, kwargs: dict) -> dict:
        """The arguments to send, or CallRejected."""
        if args:
            raise CallRejected("TypeError", f"{entry.py_name}() takes keyword arguments only")
        return {k: v for k, v in kwargs.items() if not (v is None and k in entry.optional)}

    def render(self) -> str:
        """The catalog section of the run_code description."""
        lines = []
        for e in self.entries.values():
            params = ", ".join([*e.required, *(f"{p}=None" for p in e.optional)])
            sig = f"async def {e.py_name}(*, {params})" if params else f"async def {e.py_name}()"
            lines.append(f"{sig}:\n    {e.definition.description.strip()!r}")
        return "\n".join(lines)
