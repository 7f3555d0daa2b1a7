"""Where the MCP servers of a config come from: tables, an ``mcp_json`` file, ``--mcp-stdio``.

Every entry is checked by :func:`daemon.mcp.spec.parse_server_entry`, the one
check of an ``mcpServers`` entry, so the messages are the same wherever it was
written. This module adds what is the config's own: a relative ``cwd`` is
relative to the file that wrote it, ``"disabled": true`` entries of a JSON
file are skipped, and a ``--mcp-stdio`` server is named after its program.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from daemon.config.schema import McpServerConfig
from daemon.config.values import expand_home
from daemon.errors import ConfigError
from daemon.mcp.spec import parse_server_entry

__all__ = ["read_mcp_json", "server_config", "stdio_server", "unique_name"]


def server_config(entry: object, key: str, where: str, base: Path) -> McpServerConfig:
    """One entry written at ``key`` in ``where``; a relative ``cwd`` is relative to ``base``."""
    spec = parse_server_entry(entry, key, where)
    cwd = None if spec.cwd is None else Path(spec.cwd)
    if cwd is not None and not cwd.is_absolute():
        cwd = base / expand_home(cwd, f"{key}.cwd", where)
    return McpServerConfig(
        command=spec.command,
        args=list(spec.args),
        env=dict(spec.env),
        cwd=cwd,
        max_concurrent=spec.max_concurrent,
    )


def read_mcp_json(path: Path) -> dict[str, McpServerConfig]:
    """The stdio servers of an ``{"mcpServers": {...}}`` file, minus ``"disabled": true`` ones."""
    try:
        text = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ConfigError(f"cannot read mcp_json {path}: {exc}") from exc
    try:
        data = json.loads(text.decode("utf-8"))
    except ValueError as exc:  # not UTF-8 either
        raise ConfigError(f"mcp_json {path} is not valid JSON: {exc}") from exc
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"mcp_json {path} has no 'mcpServers' object")
    out: dict[str, McpServerConfig] = {}
    for name, entry in servers.items():
        if isinstance(entry, dict):
            if entry.get("disabled") is True:
                continue
            # other clients' key: says nothing once the entry is not skipped
            entry = {k: v for k, v in entry.items() if k != "disabled"}
        out[name] = server_config(entry, f"mcpServers.{name}", str(path), path.parent)
    return out


def stdio_server(line: str) -> McpServerConfig:
    """The server of one ``--mcp-stdio "CMD ARGS"`` flag, split as a shell would."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise ConfigError(f"--mcp-stdio {line!r}: {exc}") from exc
    if not argv or not argv[0]:
        raise ConfigError("--mcp-stdio needs a command, e.g. --mcp-stdio asyncai-mcp-simple")
    entry = {"command": argv[0], "args": argv[1:]}
    return server_config(entry, "mcp_stdio", f"--mcp-stdio {line!r}", Path())


def unique_name(base: str, taken: Mapping[str, Any]) -> str:
    """``base``, or ``base-2``, ``base-3``… whichever is not ``taken`` yet."""
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name
