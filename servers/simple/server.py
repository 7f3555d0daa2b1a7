"""The ``asyncai-mcp-simple`` MCP server: ``http_get(url)``."""

from __future__ import annotations

import argparse
from typing import TypedDict

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from servers.simple.fetch import FetchError, fetch

__all__ = ["HttpResponse", "build_server", "main"]

DEFAULT_TIMEOUT = 30.0

HTTP_GET_DESCRIPTION = """\
Fetch a URL with HTTP GET and return the whole response (status, \
content_type, body). Redirects are followed. Any status \
(404, 500, ...) is a result, not an error; a URL that cannot be fetched \
(DNS, connection, TLS, timeout, a refused address) is an error. Link-local \
and cloud metadata addresses are never fetched.
Example: r = await http_get(url="https://example.com/"); r["status"]"""


class HttpResponse(TypedDict):
    """What ``http_get`` returns (its output schema)."""

    status: int
    content_type: str | None
    body: str


def build_server(*, deny_private: bool = False, timeout: float = DEFAULT_TIMEOUT) -> MCPServer:
    """The server; ``deny_private`` also refuses loopback and private ranges."""
    server = MCPServer("asyncai-mcp-simple", log_level="WARNING")

    @server.tool(
        description=HTTP_GET_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
        ),
    )
    def http_get(url: str) -> HttpResponse:
        # A sync tool: the SDK runs it on a worker thread, so concurrent calls
        # overlap while this one blocks on the network.
        try:
            response = fetch(url, deny_private=deny_private, timeout=timeout)
        except FetchError as exc:
            raise ToolError(str(exc)) from exc
        return HttpResponse(
            status=response.status, content_type=response.content_type, body=response.body
        )

    return server


def main(argv: list[str] | None = None) -> None:
    """Console script ``asyncai-mcp-simple``: serve on stdio."""
    parser = argparse.ArgumentParser(
        prog="asyncai-mcp-simple", description="An MCP server with one tool, http_get(url)."
    )
    parser.add_argument(
        "--deny-private",
        action="store_true",
        help="also refuse loopback, private and other non-public addresses",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds for one whole fetch, redirects included (default {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(argv)
    build_server(deny_private=args.deny_private, timeout=args.timeout).run()
