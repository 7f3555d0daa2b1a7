"""The ``asyncai-mcp-simple`` MCP server: ``http_get(url)``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from servers.simple.fetch import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT, FetchError, fetch

__all__ = ["HttpResponse", "build_server", "main", "parsed_json"]

T = TypeVar("T", int, float)

HTTP_GET_DESCRIPTION = """\
Fetch a URL with HTTP GET and return the whole response (status, \
content_type, body; and json, the body parsed, when the body is JSON). \
Redirects are followed. Any status \
(404, 500, ...) is a result, not an error; a URL that cannot be fetched \
(DNS, connection, TLS, timeout, a refused address, a body over the size \
limit) is an error. Link-local and cloud metadata addresses are never fetched.
Example: r = await http_get(url="https://example.com/"); r["status"]"""

_JSON_TYPES = ("application/json", "text/json")


class HttpResponse(TypedDict):
    """What ``http_get`` returns (its output schema)."""

    status: int
    content_type: str | None
    body: str
    # The body parsed, present only when it is JSON: a small model indexed the body
    # string as if it were the parsed data (`r["body"]["items"]`), and a missing
    # key says "not JSON" more plainly than a None would.
    json: NotRequired[Any]


def parsed_json(body: str, content_type: str | None) -> tuple[bool, Any]:
    """``(True, value)`` when ``body`` is JSON, else ``(False, None)``.

    A JSON media type (``application/json``, ``text/json``, ``*/*+json``) is
    parsed whatever it holds; any other type only when the body is an object
    or an array (servers often label JSON ``text/plain``), so a page that
    happens to say ``42`` stays text.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    declared = media in _JSON_TYPES or media.endswith("+json")
    if not declared and not body.lstrip().startswith(("{", "[")):
        return False, None
    try:
        return True, json.loads(body)
    except (ValueError, RecursionError):  # not JSON after all, or nested too deep to parse
        return False, None


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
        result = HttpResponse(
            status=response.status, content_type=response.content_type, body=response.body
        )
        is_json, value = parsed_json(response.body, response.content_type)
        if is_json:
            result["json"] = value
        return result

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
