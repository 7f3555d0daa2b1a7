"""A stdio MCP server for the executor tests (a fake at the boundary: a server).

Tools: ``echo``, ``whoami``, ``barrier`` (returns only once ``parties`` calls
with the same key are waiting, so gathered calls must really overlap),
``crash`` (exits the process mid-call), ``big`` (a large result), ``env``
(the environment the server was given), ``rm`` (annotated destructive),
``append_and_block`` (mutating: appends a line to a file, then never answers,
so a test can kill the daemon mid-call), ``append_line`` (mutating) and
``erase`` (destructive), both writing a line to a file, for the approvals,
``crowd`` (counts its calls in flight and lets them through in groups, for the
``max_concurrent`` tests), ``nap`` (sleeps) and ``wait_file`` (returns once a
file exists, so a test decides when a snippet goes on), and ``--also NAME`` adds a tool
called NAME, to make a duplicate of another server's tool (``--log-calls PATH``: each
call of one appends ``LABEL NAME ARGUMENT`` to PATH). ``--require-file
PATH`` makes the server exit at start (status 3) while PATH does not exist: a
server that fails at start and later comes back.

Run: ``python tests/fakes/mcp_test_server.py --label alpha [--also http_get]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import defaultdict
from collections.abc import Callable

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

#: A barrier that never fills ends the call with an error instead of hanging.
BARRIER_TIMEOUT = 20.0
#: How long append_and_block blocks: far longer than any test waits for it.
BLOCK_SECONDS = 60.0


def _append(path: str, line: str) -> None:
    """One line at the end of a file (a small local write: blocking is fine here)."""
    with open(path, "a") as f:
        f.write(line + "\n")


def build(label: str, also: list[str], log_calls: str | None = None) -> MCPServer:
    """The test server, labelled so routing tests can tell servers apart."""
    server = MCPServer(f"test-{label}", log_level="WARNING")
    arrivals: dict[str, int] = defaultdict(int)
    filled: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
    in_flight: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)

    @server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Return text unchanged."""
        return text

    @server.tool(structured_output=False)
    def whoami() -> str:
        """This server's label."""
        return label

    @server.tool(structured_output=False)
    async def barrier(key: str, parties: int) -> str:
        """Wait until `parties` calls with this key are in flight, then return."""
        arrivals[key] += 1
        # Tests read this from the log to know the call is in flight here.
        print(f"barrier {key}: arrival {arrivals[key]}", file=sys.stderr, flush=True)
        if arrivals[key] >= parties:
            filled[key].set()
        try:
            await asyncio.wait_for(filled[key].wait(), BARRIER_TIMEOUT)
        except TimeoutError:
            raise ToolError(f"barrier {key!r}: only {arrivals[key]} of {parties} arrived") from None
        return f"{key} passed with {arrivals[key]}"

    @server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=True))
    async def crowd(key: str, group: int, linger: float = 0.0) -> str:
        """Count this call in flight; wait until its group of `group` consecutive arrivals
        with this key is complete, then `linger` seconds more (time for any further calls
        to arrive); return the most calls with this key seen in flight at once."""
        arrivals[key] += 1
        in_flight[key] += 1
        peak[key] = max(peak[key], in_flight[key])
        gate = f"{key}#{(arrivals[key] - 1) // group}"
        if arrivals[key] % group == 0:
            filled[gate].set()
        try:
            await asyncio.wait_for(filled[gate].wait(), BARRIER_TIMEOUT)
            await asyncio.sleep(linger)
        except TimeoutError:
            raise ToolError(f"crowd {gate!r}: the group of {group} never filled") from None
        finally:
            in_flight[key] -= 1
        return str(peak[key])

    @server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=True))
    async def nap(seconds: float) -> str:
        """Sleep `seconds`, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=True))
    async def wait_file(path: str) -> str:
        """Wait until a file exists at `path` (a test creates it), then say so."""
        try:
            async with asyncio.timeout(BARRIER_TIMEOUT):
                # another process makes the file: there is no event to wait on (a stat is quick)
                while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise ToolError(f"{path} did not appear within {BARRIER_TIMEOUT:g}s") from None
        return f"found {path}"

    @server.tool(structured_output=False)
    def crash(code: int = 7) -> str:
        """Exit the server process in the middle of this call."""
        print(f"test server {label}: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(code)

    @server.tool(structured_output=False)
    def big(size: int) -> str:
        """`size` characters of a repeating pattern, then the marker END."""
        pattern = "0123456789abcdef"
        return (pattern * (size // len(pattern) + 1))[:size] + "END"

    @server.tool()
    def env() -> dict[str, str]:
        """The environment this server was started with."""
        return dict(os.environ)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def rm(path: str) -> str:
        """Pretend to delete a path."""
        return f"removed {path}"

    @server.tool(structured_output=False)
    async def append_and_block(path: str, line: str = "called") -> str:
        """Append `line` to the file at `path`, then block (the side effect is done)."""
        _append(path, line)
        print(f"append_and_block: appended to {path}", file=sys.stderr, flush=True)
        await asyncio.sleep(BLOCK_SECONDS)
        return "appended"

    @server.tool(structured_output=False, annotations=ToolAnnotations(read_only_hint=False))
    def append_line(path: str, line: str) -> str:
        """Append `line` to the file at `path` (mutating, not destructive)."""
        _append(path, line)
        return f"appended {line}"

    @server.tool(
        structured_output=False,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def erase(path: str) -> str:
        """Record an erase of `path` in it (destructive)."""
        _append(path, "erased")
        return f"erased {path}"

    @server.tool(structured_output=False)
    def fail(message: str) -> str:
        """Always an error result carrying `message`."""
        raise ToolError(message)

    for tool in also:
        server.add_tool(
            _duplicate(label, tool, log_calls),
            name=tool,
            description=f"A duplicate {tool}.",
            structured_output=False,
        )
    return server


def _duplicate(label: str, tool: str, log_calls: str | None) -> Callable[..., str]:
    """An ``--also`` tool: answers with its server's label; logs each call when asked."""

    def extra(name: str = tool) -> str:
        if log_calls is not None:
            _append(log_calls, f"{label} {tool} {name}")
        return f"{name} from test server {label}"

    return extra


def main() -> None:
    """Parse the flags and serve on stdio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="test")
    parser.add_argument("--also", action="append", default=[])
    parser.add_argument("--require-file", default=None)
    parser.add_argument("--log-calls", default=None)
    args = parser.parse_args()
    if args.require_file is not None and not os.path.exists(args.require_file):
        print(f"test server {args.label}: {args.require_file} is missing", file=sys.stderr)
        sys.exit(3)
    print(f"test server {args.label} starting", file=sys.stderr, flush=True)
    build(args.label, args.also, args.log_calls).run()


if __name__ == "__main__":
    main()
