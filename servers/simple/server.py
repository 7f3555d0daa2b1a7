"""The ``asyncai-mcp-simple`` MCP server: ``http_get(url)``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypedDict, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from servers.simple.fetch import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT, FetchError, fetch

__all__ = ["HttpResponse", "build_server", "main"]

T = TypeVar("T", int, float)

HTTP_GET_DESCRIPTION = """\
Fetch a URL with HTTP GET and return the whole response (status, \
content_type, body). Redirects are followed. Any status \
(404, 500, ...) is a result, not an error; a URL that cannot be fetched \
(DNS, connection, TLS, timeout, a refused address, a body over the size \
limit) is an error. Link-local and cloud metadata addresses are never fetched.
Example: r = await http_get(url="https://example.com/"); r["status"]"""


class HttpResponse(TypedDict):
    """What ``http_get`` returns (its output schema)."""

    status: int
    content_type: str | None
    body: str


def build_server(
    *,
    deny_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> MCPServer:
    """The server; ``deny_private`` also refuses loopback and private ranges,
    ``timeout`` bounds each whole fetch and ``max_bytes`` each body."""
    server = MCPServer("asyncai-mcp-simple", log_level="WARNING")

    @server.tool(
        description=HTTP_GET_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
        ),
    )
    async def http_get(url: str) -> HttpResponse:
        # An async tool on the server's loop: a fetch holds no worker thread
        # while it waits, so slow fetches cannot exhaust the SDK's thread
        # limiter and starve fast ones; each ends at its own deadline.
        try:
            response = await fetch(
                url, deny_private=deny_private, timeout=timeout, max_bytes=max_bytes
            )
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
        type=_positive(float),
        default=DEFAULT_TIMEOUT,
        help="seconds for one whole fetch: connect, status, headers, body and redirects "
        f"(default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_BYTES,
        help="largest body fetched; a larger one is an error, never cut "
        f"(default {DEFAULT_MAX_BYTES}, 64 MiB)",
    )
    args = parser.parse_args(argv)
    build_server(
        deny_private=args.deny_private, timeout=args.timeout, max_bytes=args.max_bytes
    ).run()


def _positive(kind: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type: ``kind`` of the text, above zero."""

    def parse(text: str) -> T:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
        return value

    return parse
