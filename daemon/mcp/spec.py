"""How to start one MCP server: the keys of the common ``mcpServers`` JSON.

An entry is ``{"command": ..., "args": [...], "env": {...}}`` (``cwd`` is
accepted too, and ``"type": "stdio"`` so entries pasted from other clients'
files work; ``max_concurrent``, asyncai's own, bounds the server's calls in
flight). :func:`parse_server_entry` is the one place an entry is checked,
wherever it was written: a ``[mcp_servers.NAME]`` table of the TOML config, an
``mcp_json`` file, or a mapping handed to ``McpToolExecutor``. A pydantic model
checks the keys; every failure is a :class:`daemon.errors.ConfigError` in the
config's words, naming the dotted key and where it was written. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic_core import ErrorDetails

from daemon.errors import ConfigError

__all__ = ["ServerSpec", "parse_server_entry"]


@dataclass(frozen=True)
class ServerSpec:
    """A stdio MCP server: the program, its arguments, and what its environment
    gets beyond the minimal one (see ``daemon.mcp.stdio.BASE_ENV_VARS``)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    max_concurrent: int | None = None  # calls in flight at once; None: unlimited

    @classmethod
    def from_entry(
        cls,
        name: str,
        entry: ServerSpec | Mapping[str, Any],
        *,
        where: str = "the mcpServers entries",
    ) -> ServerSpec:
        """A spec from an ``mcpServers`` entry (``mcpServers.NAME`` in messages); a spec as is."""
        if isinstance(entry, ServerSpec):
            return entry
        return parse_server_entry(entry, f"mcpServers.{name}", where)


_Text = Annotated[str, Strict()]  # strict: TOML and JSON give the type as written
_NonEmpty = Annotated[str, Strict(), Field(min_length=1)]
_Positive = Annotated[int, Strict(), Field(ge=1)]


class _Entry(BaseModel):
    """The keys of one entry; ``type`` is checked before, for its own message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: _NonEmpty
    args: list[_Text] = Field(default_factory=list)
    env: dict[str, _Text] = Field(default_factory=dict)
    cwd: _NonEmpty | None = None
    max_concurrent: _Positive | None = None
    type: Literal["stdio"] = "stdio"


# what each key must be, in the words of the config's other messages
_EXPECTED = {
    "command": "a string",
    "args": "a list of strings",
    "env": "a table of strings",
    "cwd": "a path",
    "max_concurrent": "a positive integer",
    "type": "'stdio'",
}
_HIDDEN = {"env"}  # server environments carry tokens: never echoed
# which error is reported when there are several: as the keys were checked before pydantic
_RANK = {"extra_forbidden": 0, "missing": 1, "string_too_short": 3}


def parse_server_entry(entry: object, key: str, where: str) -> ServerSpec:
    """Check one ``mcpServers`` entry written at ``key`` in ``where`` (a file, usually).

    ``key`` is the entry's dotted key (``mcp_servers.NAME``, ``mcpServers.NAME``),
    used in every message. A relative ``cwd`` is returned as written: what it is
    relative to is the caller's business. Raises :class:`ConfigError`.
    """
    if not isinstance(entry, Mapping):
        raise ConfigError(f"key '{key}' in {where} must be a table with 'command', 'args', 'env'")
    kind = entry.get("type", "stdio")
    if kind != "stdio":
        raise ConfigError(f"'{key}' in {where} has type {kind!r}: only stdio servers are supported")
    if "url" in entry and "command" not in entry:
        raise ConfigError(
            f"'{key}' in {where} has a 'url': only stdio MCP servers ('command') are supported"
        )
    try:
        parsed = _Entry.model_validate(dict(entry))
    except ValidationError as exc:
        raise ConfigError(_message(exc, entry, key, where)) from exc
    return ServerSpec(
        command=parsed.command,
        args=tuple(parsed.args),
        env=dict(parsed.env),
        cwd=parsed.cwd,
        max_concurrent=parsed.max_concurrent,
    )


def _message(exc: ValidationError, entry: Mapping[Any, Any], key: str, where: str) -> str:
    """The first of pydantic's errors, in key order, as the operator reads it."""
    order = [str(k) for k in entry]

    def rank(error: ErrorDetails) -> tuple[int, int]:
        name = _name(error)
        return _RANK.get(error["type"], 2), order.index(name) if name in order else len(order)

    error = min(exc.errors(include_url=False), key=rank)
    name = _name(error)
    full = f"{key}.{name}"
    if error["type"] == "extra_forbidden":
        known = list(_Entry.model_fields)
        close = difflib.get_close_matches(name, known, n=1)
        guess = f" (did you mean '{key}.{close[0]}'?)" if close else ""
        return f"unknown key '{full}' in {where}{guess}"
    if error["type"] == "missing":
        return f"missing key '{full}' in {where}"
    if error["type"] == "string_too_short":
        return f"key '{full}' in {where} is empty"
    value = entry.get(name, error["input"])
    shown = "(hidden)" if name in _HIDDEN else repr(value)
    expected = _EXPECTED.get(name, "valid")
    return f"key '{full}' in {where} must be {expected}, not {type(value).__name__} {shown}"


def _name(error: ErrorDetails) -> str:
    """The entry's key an error is about (the first step of its location)."""
    return str(error["loc"][0]) if error["loc"] else ""
