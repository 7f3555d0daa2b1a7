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
succeeds with the others. Such a server is then retried in the background,
``retry_backoff(attempt)`` seconds apart, until it starts or the executor is
closed (issue 19). When it comes up it leaves ``failed_servers``, its tools
are routed (names another server already answers stay with that one) and
appended to :meth:`~McpToolExecutor.definitions`, and ``mcp.server_recovered``
is logged; :attr:`~McpToolExecutor.tools_version` grows. Whoever builds a
catalog from ``definitions()`` sees them the next time it asks; code mode
rebuilds its catalog when ``tools_version`` moved, as a run or a snippet
starts, never mid-snippet.

Per-server concurrency (issue 19): a server's ``max_concurrent`` bounds its
calls in flight (:mod:`daemon.mcp.slots`). ``call_tool`` waits for a slot
before its ``call_timeout`` starts; code mode takes the slot itself through
:meth:`~McpToolExecutor.call_slot`, before its ``tool_timeout`` starts, and
records the wait.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import structlog
from mcp import ClientSession, MCPError
from mcp import types as mcp_types
from pydantic import ValidationError

from daemon.backoff import Backoff
from daemon.crashpoints import crash_point
from daemon.errors import ToolTransportError
from daemon.mcp.connection import DEFAULT_BACKOFF, ServerConnection
from daemon.mcp.slots import ServerSlots
from daemon.mcp.spec import ServerSpec
from daemon.tools import BaseToolExecutor, ToolCallOutput, ToolDefinition

__all__ = ["McpToolExecutor", "ServerState", "call_output", "tool_definition"]

log = structlog.get_logger("asyncai.mcp")

#: Per tools/call, spec A4 (``tool_timeout``).
DEFAULT_CALL_TIMEOUT = 120.0
#: Spawn, initialize and list tools. A Python server needs about 1 s of CPU
#: just to import the SDK; on a loaded two-core machine that can be several.
DEFAULT_CONNECT_TIMEOUT = 30.0
#: Retry number ``attempt`` of a server that failed at start waits
#: ``delay(attempt)``: 1 s, 2 s, 4 s, ... capped at 5 minutes (each attempt
#: spawns the server, and a broken one may stay broken for long).
RETRY_BACKOFF = Backoff(initial=1.0, maximum=300.0)


@dataclass(frozen=True)
class ServerState:
    """One MCP server as :meth:`McpToolExecutor.server_states` reports it."""

    name: str
    pid: int | None  # its live process (None: not running)
    tools: int  # tools it answers
    failed: str | None  # why it could not start (None: it started)
    retries: int  # retries made since it failed at start


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
        retry_backoff: Backoff = RETRY_BACKOFF,
    ) -> None:
        self._call_timeout = call_timeout
        self._retry_backoff = retry_backoff
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
        self._slots = ServerSlots(
            {name: conn.spec.max_concurrent for name, conn in self._conns.items()}
        )
        self._retries: dict[str, asyncio.Task[None]] = {}  # servers that failed at start
        self._attempts: dict[str, int] = {}  # retries of each so far (the console's Health)
        self._tools_version = 0  # grows as a server that failed at start adds its tools
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()

    @property
    def failed_servers(self) -> dict[str, str]:
        """Servers that could not start (yet): name → message (with exit code and stderr).

        Each is being retried in the background until it starts (see the module docstring).
        """
        return dict(self._failed)

    def server_states(self) -> list[ServerState]:
        """Each configured server as it stands now, in configuration order: its process,
        the tools it answers, and for one that failed to start its error and how many
        retries were made (it is retried with backoff until it starts)."""
        return [
            ServerState(
                name=name,
                pid=conn.pid,
                tools=sum(1 for server in self._routes.values() if server == name),
                failed=self._failed.get(name),
                retries=self._attempts.get(name, 0),
            )
            for name, conn in self._conns.items()
        ]

    @property
    def tools_version(self) -> int:
        """Grows each time :meth:`definitions` grows after start (a late server came up).

        A catalog built from the definitions is stale when this moved since;
        tools are only ever added, never taken away or changed.
        """
        return self._tools_version

    @property
    def slots(self) -> ServerSlots:
        """The per-server ``max_concurrent`` slots (calls in flight and waiting, for tests)."""
        return self._slots

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
            for name, conn in self._conns.items():  # configuration order: first wins
                if name not in self._failed:
                    self._add_routes(conn)
            for name in self._failed:
                task = asyncio.create_task(self._retry(self._conns[name]), name=f"mcp-retry:{name}")
                self._retries[name] = task
            self._started = True

    async def _start_one(self, conn: ServerConnection) -> None:
        try:
            await conn.start()
        except ToolTransportError as exc:
            self._failed[conn.name] = str(exc)  # already logged by the connection

    def _add_routes(self, conn: ServerConnection) -> None:
        """Route ``conn``'s tools whose names no server answers yet."""
        for tool in conn.tools:
            kept = self._routes.get(tool.name)
            if kept is not None:
                self._duplicates.append((tool.name, kept, conn.name))
                log.warning("mcp.duplicate_tool", tool=tool.name, kept=kept, ignored=conn.name)
                continue
            self._routes[tool.name] = conn.name
            self._definitions.append(
                tool_definition(tool, server=conn.name, server_version=conn.version)
            )

    async def _retry(self, conn: ServerConnection) -> None:
        """Start a server that failed at start, with backoff, until it is up or we close.

        A server that comes up late routes only names still free: a tool
        another server answers keeps answering there (the catalogs already
        handed out say so), even when the late server is configured first.
        """
        attempt = 0
        while not self._closed:
            attempt += 1
            self._attempts[conn.name] = attempt
            delay = self._retry_backoff.delay(attempt)
            log.info("mcp.server_retry", server=conn.name, attempt=attempt, wait=delay)
            await asyncio.sleep(delay)
            if self._closed:
                return
            try:
                await conn.start()  # a failure is logged there, with its stderr
            except ToolTransportError as exc:
                self._failed[conn.name] = str(exc)
                continue
            del self._failed[conn.name]
            self._add_routes(conn)
            self._tools_version += 1
            log.warning(
                "mcp.server_recovered",
                server=conn.name,
                attempt=attempt,
                pid=conn.pid,
                tools=[name for name, server in self._routes.items() if server == conn.name],
            )
            return

    def definitions(self) -> list[ToolDefinition]:
        """Every routed tool, in configuration order. Valid once started."""
        if not self._started:
            raise RuntimeError("McpToolExecutor.definitions() before start(): await start() first")
        return list(self._definitions)

    def call_slot(self, name: str) -> AbstractAsyncContextManager[float | None]:
        """Wait for a slot of the server that answers ``name`` (:class:`daemon.tools.CallSlots`).

        Yields the milliseconds waited, or None when that server has no
        ``max_concurrent`` (or ``name`` is unknown); a ``call_tool(name)``
        that the same task makes inside the ``async with`` uses this slot.
        """
        server = self._routes.get(name)
        return self._slots.hold(server if server is not None else "")

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call ``name`` on the one server that declares it; see the module
        docstring for what is a result and what raises."""
        await self.start()
        server = self._routes.get(name)
        if server is None:
            return ToolCallOutput(content=_unknown_tool(name, self._routes), is_error=True)
        if self._closed:
            raise ToolTransportError("McpToolExecutor is closed", tool=name, server=server)
        # the wait for a slot (max_concurrent) is not part of call_timeout
        async with self._slots.hold(server):
            return await self._call(server, name, arguments)

    async def _call(self, server: str, name: str, arguments: dict) -> ToolCallOutput:
        conn = self._conns[server]
        session: ClientSession | None = None
        try:
            async with asyncio.timeout(self._call_timeout):
                session = await conn.session()
                result = await session.call_tool(name, arguments)
            crash_point("call_answered")
        except TimeoutError as exc:
            raise ToolTransportError(
                f"tool {name!r} on MCP server {server!r} timed out after {self._call_timeout:g}s",
                tool=name,
                server=server,
            ) from exc
        except ToolTransportError as exc:  # could not (re)start the server
            raise ToolTransportError(str(exc), tool=name, server=server) from exc
        except MCPError as exc:
            # The SDK fails calls on a closed connection with CONNECTION_CLOSED, but
            # a server may answer with that code (-32000, JSON-RPC's generic
            # "server error") itself: only a session that is gone went away.
            if exc.error.code == mcp_types.CONNECTION_CLOSED and (
                self._closed or not conn.is_live(session)
            ):
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
        retries = list(self._retries.values())
        for task in retries:
            task.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
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
