"""One MCP server connection: an owner task, its session, restarts with backoff.

anyio contexts (the stdio transport, ``ClientSession``) must be entered and
left in the same task (notes/mcp-openai.md §1.6), so each server run has one
*owner task* that opens the transport and the session, does the handshake,
publishes the session, then waits until it is told to stop or the server goes
away, and closes everything itself. Any other task may call
``session.call_tool`` concurrently: calls take no lock.

A server that dies fails its in-flight calls at once (the session sees its
read stream end: ``MCPError: Connection closed``); the owner reaps it and logs
``mcp.server_exited``. The next call that needs the server restarts it, after
waiting out ``backoff(attempt)`` seconds since it went down, and logs
``mcp.server_restarted``. Only (re)connects are serialised, by a lock that
calls never take once a session is up.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import anyio
import structlog
from mcp import ClientSession, MCPError
from mcp import types as mcp_types

from daemon.backoff import Backoff
from daemon.errors import ToolTransportError
from daemon.mcp.spec import ServerSpec
from daemon.mcp.stdio import StdioProcess, minimal_environment

__all__ = ["DEFAULT_BACKOFF", "ServerConnection"]

log = structlog.get_logger("asyncai.mcp")

#: Restart number ``attempt`` (1 for the first restart after a crash; it grows
#: while restarts keep failing and resets after a successful call) waits
#: ``backoff.delay(attempt)``: 0.5 s, 1 s, 2 s, ... capped at 30 s.
DEFAULT_BACKOFF = Backoff(initial=0.5, maximum=30.0)

#: How long a stop may take before the owner task is cancelled outright: the
#: transport's own shutdown is bounded by about 7 s (flush, grace, kill, reap).
CLOSE_TIMEOUT = 15.0


@dataclass(eq=False)
class _Run:
    """One life of the server process, from spawn to reap."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # up, or failed to start
    handshake: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    session: ClientSession | None = None
    tools: list[mcp_types.Tool] = field(default_factory=list)
    version: str | None = None  # serverInfo.version of the handshake
    error: str | None = None  # why it could not start
    process: StdioProcess | None = None
    task: asyncio.Task[None] | None = None
    ended: bool = False


class ServerConnection:
    """A named MCP server over stdio, (re)started on demand."""

    def __init__(
        self,
        name: str,
        spec: ServerSpec,
        *,
        connect_timeout: float,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.name = name
        self.spec = spec
        self._connect_timeout = connect_timeout
        self._backoff = backoff
        self._run: _Run | None = None
        self._lock = asyncio.Lock()  # (re)connects only
        self._attempt = 0  # restarts since the last successful call
        self._down_since: float | None = None
        self._closed = False
        # Every owner task still running, including one still reaping a dead
        # server while its successor starts: aclose() waits for all of them.
        self._owners: set[asyncio.Task[None]] = set()
        self.restarts = 0  # total, for status and tests

    @property
    def tools(self) -> list[mcp_types.Tool]:
        """The tools the server listed at its latest start."""
        return [] if self._run is None else self._run.tools

    @property
    def version(self) -> str | None:
        """The ``serverInfo.version`` the server gave at its latest start."""
        return None if self._run is None else self._run.version

    @property
    def pid(self) -> int | None:
        """The live server's process id, if any."""
        run = self._run
        if run is None or run.ended or run.process is None:
            return None
        return run.process.pid

    def is_live(self, session: ClientSession | None) -> bool:
        """Whether ``session`` is still the server's live session: it has not gone away.

        An MCP error with the ``CONNECTION_CLOSED`` code (-32000, also JSON-RPC's
        generic "server error") came from the server itself while this holds.
        """
        return session is not None and self._live() is session

    def _live(self) -> ClientSession | None:
        run = self._run
        if run is None or run.ended or run.wake.is_set():
            return None
        return run.session

    async def start(self) -> None:
        """First start. Raises :class:`ToolTransportError` naming the server,
        with its exit code and stderr tail, when it cannot start."""
        async with self._lock:
            if self._live() is None:
                await self._spawn()

    async def session(self) -> ClientSession:
        """The live session, restarting the server first if it went down."""
        session = self._live()
        if session is not None:
            return session
        async with self._lock:
            session = self._live()
            if session is not None:
                return session
            if self._closed:
                raise ToolTransportError(f"MCP server {self.name!r} is closed", server=self.name)
            self._attempt += 1
            delay = self._backoff.delay(self._attempt)
            if self._down_since is not None:
                wait = self._down_since + delay - asyncio.get_running_loop().time()
                if wait > 0:
                    await asyncio.sleep(wait)
            before = [t.name for t in self.tools]
            session = await self._spawn()
            self.restarts += 1
            after = [t.name for t in self.tools]
            if after != before:
                # Routing was built at start and stays; the catalog the model
                # saw must not change under it.
                log.warning("mcp.tools_changed", server=self.name, before=before, after=after)
            log.warning(
                "mcp.server_restarted",
                server=self.name,
                attempt=self._attempt,
                backoff=delay,
                pid=self.pid,
            )
            return session

    def note_success(self) -> None:
        """A call went through: the next restart starts the backoff afresh."""
        self._attempt = 0

    async def _spawn(self) -> ClientSession:
        """Start an owner task and wait until the server is up or has failed."""
        if self._closed:  # aclose() ran while this restart waited out its backoff
            raise ToolTransportError(f"MCP server {self.name!r} is closed", server=self.name)
        run = _Run()
        self._run = run
        run.task = asyncio.create_task(self._own(run), name=f"mcp-server:{self.name}")
        self._owners.add(run.task)
        run.task.add_done_callback(self._owners.discard)
        # The owner bounds the handshake itself (connect_timeout) and always
        # settles, so this wait is bounded too.
        await run.settled.wait()
        if run.session is None:
            self._down_since = asyncio.get_running_loop().time()
            await asyncio.wait({run.task})
            raise ToolTransportError(run.error or "unknown start failure", server=self.name)
        return run.session

    async def _own(self, run: _Run) -> None:
        """Owner task: open, handshake, publish, wait, close — all in this task."""
        process = StdioProcess(
            self.spec.command,
            self.spec.args,
            minimal_environment(self.spec.env),
            cwd=self.spec.cwd,
            on_stderr=self._log_stderr,
            on_exit=run.wake.set,
            on_bad_output=self._log_bad_output,
        )
        run.process = process
        error: BaseException | None = None
        up = False
        try:
            async with process as (read, write), ClientSession(read, write) as session:
                with run.handshake:
                    with anyio.fail_after(self._connect_timeout):
                        initialized = await session.initialize()
                        run.version = initialized.server_info.version
                        run.tools = await _list_tools(session)
                    run.session = session
                    up = True
                    run.settled.set()
                    log.info(
                        "mcp.server_started",
                        server=self.name,
                        pid=process.pid,
                        tools=[t.name for t in run.tools],
                    )
                if up:
                    await run.wake.wait()
        except Exception as exc:  # reported below, with the stderr the shutdown drained
            error = exc
        finally:
            run.ended = True
            run.session = None
            if not up:
                run.error = self._start_failure(error, process)
                run.settled.set()
        if not up:
            if not self._closed:
                log.error("mcp.server_start_failed", server=self.name, error=run.error)
        elif not self._closed:
            self._down_since = asyncio.get_running_loop().time()
            log.warning(
                "mcp.server_exited",
                server=self.name,
                returncode=process.returncode,
                stderr=process.stderr_text(),
                error=None if error is None else repr(error),
            )

    def _start_failure(self, error: BaseException | None, process: StdioProcess) -> str:
        """A message naming the server, what went wrong, its exit code and stderr."""
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]  # the task groups wrap the one real cause
        if isinstance(error, FileNotFoundError | PermissionError | _PagesLoop):
            reason = str(error)
        elif isinstance(error, TimeoutError):
            reason = f"no MCP handshake within {self._connect_timeout:g}s"
        elif (
            isinstance(error, MCPError)
            and error.error.code == mcp_types.CONNECTION_CLOSED
            and process.ended_by_itself
        ):
            reason = "it exited before the MCP handshake finished"
        elif error is None:
            reason = "stopped before the MCP handshake finished"
        else:
            reason = f"{type(error).__name__}: {error}"
        parts = [f"MCP server {self.name!r} could not start: {reason}"]
        if process.ended_by_itself and process.returncode is not None:
            parts.append(f"exit code {process.returncode}")
        stderr = process.stderr_text()
        parts.append(f"stderr:\n{stderr}" if stderr else "no stderr output")
        return "; ".join(parts)

    def _log_stderr(self, line: str) -> None:
        log.info("mcp.server_stderr", server=self.name, line=line)

    def _log_bad_output(self, line: str, error: str) -> None:
        # a banner or debug print on stdout: no answer, so a call may wait for one
        log.warning("mcp.server_bad_output", server=self.name, line=line, error=error)

    async def aclose(self) -> None:
        """Stop the server and reap it; in-flight calls fail with Connection closed."""
        self._closed = True
        run = self._run
        if run is not None:
            run.wake.set()
            run.handshake.cancel()
        owners = set(self._owners)
        if not owners:
            return
        _done, pending = await asyncio.wait(owners, timeout=CLOSE_TIMEOUT)
        for task in pending:  # a shutdown stuck past its own bounds
            task.cancel()
        if pending:
            await asyncio.wait(pending)


class _PagesLoop(Exception):
    """``tools/list`` named a cursor it had named before: its pages would never end."""


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    """Every page of ``tools/list``; :class:`_PagesLoop` when a cursor comes back."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in seen:
            # paging on would pile up copies of the tools until connect_timeout
            raise _PagesLoop(f"its tools/list pages loop (the cursor {cursor!r} came back)")
        seen.add(cursor)
