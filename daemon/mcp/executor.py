"""``McpToolExecutor``: MCP servers over stdio behind the ``ToolExecutor`` interface.

It starts every configured server, lists their tools, and routes each call to
exactly one server through a name → server table (spec A2: when two servers
declare the same name the first in configuration order wins, and the
duplicate is logged as ``mcp.duplicate_tool``). Calls run concurrently on one
session per server, without a lock (spec Decision 5). Tool output is never
truncated anywhere on the way (Decision 3).

Error behaviour, which callers rely on:

- unknown tool name → ``ToolCallOutput(is_error=True, content="unknown tool ...")``;
- the server answered with an error result (``isError``), or with a JSON-RPC
  error (bad arguments, a tool the server does not know), or with structured
  content that breaks its own output schema → ``ToolCallOutput(is_error=True)``
  carrying the server's text;
- the call cannot be made or does not finish (the server died mid-call or
  cannot be restarted, the per-call timeout passed, the executor is closed)
  → :class:`daemon.errors.ToolTransportError` with ``tool`` and ``server`` set
  and the cause chained.

A server that cannot start is logged (``mcp.server_start_failed``) and listed
in :attr:`McpToolExecutor.failed_servers` with its stderr; ``start()`` still
succeeds with the others.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Mapping
from typing import Any

import structlog
from mcp import MCPError
from mcp import types as mcp_types
from pydantic import ValidationError

from daemon.backoff import Backoff
from daemon.errors import ToolTransportError
from daemon.mcp.connection import DEFAULT_BACKOFF, ServerConnection
from daemon.mcp.spec import ServerSpec
from daemon.tools import BaseToolExecutor, ToolCallOutput, ToolDefinition

__all__ = ["McpToolExecutor", "ServerSpec", "call_output", "tool_definition"]

log = structlog.get_logger("asyncai.mcp")

#: Per tools/call, spec A4 (``tool_timeout``).
DEFAULT_CALL_TIMEOUT = 120.0
#: Spawn, initialize and list tools. A Python server needs about 1 s of CPU
#: just to import the SDK; on a loaded two-core machine that can be several.
DEFAULT_CONNECT_TIMEOUT = 30.0


class McpToolExecutor(BaseToolExecutor):
    """Tools of several stdio MCP servers, one name → server table.

    ``servers`` maps a server name to a :class:`ServerSpec` or an
    ``mcpServers`` entry (``{"command", "args", "env"}``); its order is the
    routing priority. Built synchronously; ``start()`` (or the first call)
    connects.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerSpec | Mapping[str, Any]],
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._call_timeout = call_timeout
        self._conns = {
            name: ServerConnection(
                name,
                ServerSpec.from_entry(name, entry),
                connect_timeout=connect_timeout,
                backoff=backoff,
            )
            for name, entry in servers.items()
        }
        self._routes: dict[str, str] = {}  # tool name → server name
        self._definitions: list[ToolDefinition] = []
        self._failed: dict[str, str] = {}
        self._duplicates: list[tuple[str, str, str]] = []
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()

    @property
    def failed_servers(self) -> dict[str, str]:
        """Servers that could not start: name → message (with exit code and stderr)."""
        return dict(self._failed)

    @property
    def duplicates(self) -> list[tuple[str, str, str]]:
        """``(tool, kept_server, ignored_server)`` for every shadowed tool name."""
        return list(self._duplicates)

    @property
    def routes(self) -> dict[str, str]:
        """Tool name → the server that answers it."""
        return dict(self._routes)

    def server_pid(self, server: str) -> int | None:
        """The live process id of a server (for status output and tests)."""
        return self._conns[server].pid

    async def start(self) -> None:
        """Connect every server concurrently and build the routing table.

        Idempotent and safe to call from several tasks at once.
        """
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            if self._closed:
                raise ToolTransportError("McpToolExecutor is closed")
            await asyncio.gather(*(self._start_one(conn) for conn in self._conns.values()))
            self._build_routes()
            self._started = True

    async def _start_one(self, conn: ServerConnection) -> None:
        try:
            await conn.start()
        except ToolTransportError as exc:
            self._failed[conn.name] = str(exc)  # already logged by the connection

    def _build_routes(self) -> None:
        for name, conn in self._conns.items():  # configuration order: first wins
            if name in self._failed:
                continue
            for tool in conn.tools:
                kept = self._routes.get(tool.name)
                if kept is not None:
                    self._duplicates.append((tool.name, kept, name))
                    log.warning("mcp.duplicate_tool", tool=tool.name, kept=kept, ignored=name)
                    continue
                self._routes[tool.name] = name
                self._definitions.append(
                    tool_definition(tool, server=name, server_version=conn.version)
                )

    def definitions(self) -> list[ToolDefinition]:
        """Every routed tool, in configuration order. Valid once started."""
        if not self._started:
            raise RuntimeError("McpToolExecutor.definitions() before start(): await start() first")
        return list(self._definitions)

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call ``name`` on the one server that declares it; see the module
        docstring for what is a result and what raises."""
        await self.start()
        server = self._routes.get(name)
        if server is None:
            return ToolCallOutput(content=_unknown_tool(name, self._routes), is_error=True)
        if self._closed:
            raise ToolTransportError("McpToolExecutor is closed", tool=name, server=server)
        conn = self._conns[server]
        try:
            async with asyncio.timeout(self._call_timeout):
                session = await conn.session()
                result = await session.call_tool(name, arguments)
        except TimeoutError as exc:
            raise ToolTransportError(
                f"tool {name!r} on MCP server {server!r} timed out after {self._call_timeout:g}s",
                tool=name,
                server=server,
            ) from exc
        except ToolTransportError as exc:  # could not (re)start the server
            raise ToolTransportError(str(exc), tool=name, server=server) from exc
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                if self._closed:
                    message = f"McpToolExecutor closed during a call to {name!r}"
                else:
                    message = (
                        f"MCP server {server!r} went away during a call to {name!r} "
                        "(it exited or closed its pipes); it is restarted for the next call"
                    )
                raise ToolTransportError(message, tool=name, server=server) from exc
            conn.note_success()  # the server is alive and answered
            return ToolCallOutput(
                content=f"MCP error {exc.error.code}: {exc.error.message}", is_error=True
            )
        except (RuntimeError, ValidationError) as exc:
            # The SDK checks structured content against the tool's output
            # schema (RuntimeError) and results against the protocol
            # (ValidationError): the server answered, but wrongly.
            conn.note_success()
            return ToolCallOutput(content=f"invalid result from {name!r}: {exc}", is_error=True)
        conn.note_success()
        return call_output(result)

    async def aclose(self) -> None:
        """Stop every server and reap every process. Final."""
        self._closed = True
        await asyncio.gather(*(conn.aclose() for conn in self._conns.values()))


def tool_definition(
    tool: mcp_types.Tool, server: str | None = None, server_version: str | None = None
) -> ToolDefinition:
    """An MCP tool of ``server`` (at ``server_version``) as a :class:`ToolDefinition`,
    with schemas and annotations."""
    annotations = tool.annotations
    return ToolDefinition(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        read_only=None if annotations is None else annotations.read_only_hint,
        destructive=None if annotations is None else annotations.destructive_hint,
        server=server,
        server_version=server_version,
    )


def call_output(result: mcp_types.CallToolResult) -> ToolCallOutput:
    """A ``CallToolResult`` as a :class:`ToolCallOutput`, in full.

    Text blocks (and embedded text resources) are joined with newlines; any
    other block (image, audio, blob, resource link) is included as the compact
    JSON of its wire form, data and all.
    """
    texts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            texts.append(block.resource.text)
        else:
            wire = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            texts.append(json.dumps(wire, separators=(",", ":"), ensure_ascii=False))
    return ToolCallOutput(
        content="\n".join(texts),
        is_error=bool(result.is_error),
        structured=result.structured_content,
    )


def _unknown_tool(name: str, routes: Mapping[str, str]) -> str:
    close = difflib.get_close_matches(name, list(routes), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown tool {name!r}{hint}"
