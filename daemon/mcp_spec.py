"""How to start one MCP server: the keys of the common ``mcpServers`` JSON.

An entry is ``{"command": ..., "args": [...], "env": {...}}`` (``cwd`` is
accepted too, and ``"type": "stdio"`` so entries pasted from other clients'
files work). Parsing is pure and raises :class:`daemon.errors.ConfigError`
naming the server and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import ConfigError

__all__ = ["ServerSpec"]

_KEYS = {"command", "args", "env", "cwd", "type"}


@dataclass(frozen=True)
class ServerSpec:
    """A stdio MCP server: the program, its arguments, and what its environment
    gets beyond the minimal one (see ``daemon.mcp_stdio.BASE_ENV_VARS``)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @classmethod
    def from_entry(cls, name: str, entry: ServerSpec | Mapping[str, Any]) -> ServerSpec:
        """Build a spec from an ``mcpServers`` entry, checking every key."""
        if isinstance(entry, ServerSpec):
            return entry
        if not isinstance(entry, Mapping):
            raise ConfigError(f"mcp server {name!r}: expected a table, got {type(entry).__name__}")
        for key in entry:
            if key not in _KEYS:
                raise ConfigError(
                    f"mcp server {name!r}: unknown key {key!r} (expected command, args, env, cwd)"
                )
        kind = entry.get("type", "stdio")
        if kind != "stdio":
            raise ConfigError(f"mcp server {name!r}: type {kind!r} is not supported (only stdio)")
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise ConfigError(f"mcp server {name!r}: 'command' must be a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"mcp server {name!r}: 'args' must be a list of strings")
        env = entry.get("env", {})
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError(f"mcp server {name!r}: 'env' must map strings to strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"mcp server {name!r}: 'cwd' must be a string")
        return cls(command=command, args=tuple(args), env=dict(env), cwd=cwd)
