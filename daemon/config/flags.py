"""The command-line flags every daemon command shares, and the overrides they make.

:func:`add_config_arguments` adds them to a parser; :func:`overrides_from_args`
turns the parsed flags into the dotted-key ``overrides`` of
:func:`daemon.config.load_config`, where they win over the file and the
environment.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_config_arguments", "overrides_from_args"]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags every daemon command shares: config file, model, MCP servers, verbosity."""
    parser.add_argument(
        "--config", metavar="FILE", help="TOML config file (default ./asyncai.toml)"
    )
    parser.add_argument("--model", metavar="M", help="model name (overrides [model] model)")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1",
    )
    parser.add_argument(
        "--tool-mode",
        choices=["code", "direct"],
        help="code: the model sees only run_code (default); direct: MCP tools as functions",
    )
    parser.add_argument(
        "--mcp-stdio",
        action="append",
        metavar="CMD ARGS",
        help="add a stdio MCP server (repeatable), e.g. --mcp-stdio asyncai-mcp-simple",
    )
    parser.add_argument(
        "--mcp-json", metavar="PATH", help="read servers from an mcpServers JSON file"
    )
    parser.add_argument(
        "--code-preamble", metavar="PATH", help="Python run in every new REPL scope"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log model and tool calls (NDJSON on stderr)"
    )


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``overrides`` for :func:`load_config` from :func:`add_config_arguments` flags."""
    get = lambda name: getattr(args, name, None)  # noqa: E731 -- a local shorthand
    return {
        "model.model": get("model"),
        "model.base_url": get("base_url"),
        "model.tool_mode": get("tool_mode"),
        "mcp_json": get("mcp_json"),
        "code_mode.preamble": get("code_preamble"),
        "mcp_stdio": get("mcp_stdio"),
    }
