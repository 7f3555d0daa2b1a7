"""MCP servers that misbehave on the wire, against the real stdio transport.

``tests/fakes/mcp_hostile_server.py`` answers the handshake, then each of its
tools misbehaves in its own way. Each test checks that the daemon tells the
caller what happened, at once, and keeps the server usable.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.backoff import Backoff
from daemon.errors import ToolTransportError
from daemon.mcp.executor import McpToolExecutor

HOSTILE = str(Path(__file__).parent / "fakes" / "mcp_hostile_server.py")


@pytest.fixture
async def hostile() -> AsyncIterator[McpToolExecutor]:
    """The hostile server, with a short call timeout so that a lost answer shows."""
    executor = McpToolExecutor(
        {"h": {"command": sys.executable, "args": [HOSTILE]}},
        call_timeout=10.0,
        backoff=Backoff(0.0, 0.0),
    )
    await executor.start()
    yield executor
    await executor.aclose()


async def test_an_error_with_the_generic_server_error_code_is_an_error_result(
    hostile: McpToolExecutor,
) -> None:
    """-32000 is the generic JSON-RPC "server error" (and the SDK's code for a closed
    connection): the server answered, so it is the tool's error result, not a server
    that went away and is restarted."""
    pid = hostile.server_pid("h")
    out = await hostile.call_tool("err32000", {})
    assert out.is_error
    assert out.content == "MCP error -32000: database is locked"
    assert hostile.server_pid("h") == pid
    assert (await hostile.call_tool("ok", {})).content == "fine"
    assert hostile._conns["h"].restarts == 0


async def test_an_answer_that_is_not_utf8_arrives_with_replacement_characters(
    hostile: McpToolExecutor,
) -> None:
    """Bytes that are not UTF-8 in an answer (a Latin-1 file name, a binary blob) used
    to make the line unreadable: the answer was dropped and the call waited out its
    whole timeout. It arrives now, the bad bytes replaced, as stderr's are."""
    async with asyncio.timeout(5):
        out = await hostile.call_tool("bad_utf8", {})
    assert (out.content, out.is_error) == ("caf\ufffd \ufffd", False)


async def test_an_answer_nested_too_deeply_fails_its_call_at_once(
    hostile: McpToolExecutor,
) -> None:
    """An answer nested deeper than the JSON parser goes cannot be delivered, but its id
    can be read: the call fails at once with why, instead of at its timeout."""
    async with asyncio.timeout(5):
        out = await hostile.call_tool("deep", {})
    assert out.is_error
    assert out.content == (
        "MCP error -32700: the server's answer could not be read: "
        "Invalid JSON: recursion limit exceeded at line 1 column 271"
    )
    assert (await hostile.call_tool("ok", {})).content == "fine"


async def test_a_server_that_stops_reading_is_restarted(hostile: McpToolExecutor) -> None:
    """A server that closes its stdin but lives on, stdout open, cannot take requests:
    the next call fails as a server that went away, and the one after restarts it
    (it used to fail every later call with "Connection closed", never restarting)."""
    pid = hostile.server_pid("h")
    assert (await hostile.call_tool("deaf", {})).content == "deaf now"
    async with asyncio.timeout(5):
        with pytest.raises(ToolTransportError, match="went away"):
            await hostile.call_tool("ok", {})
        out = await hostile.call_tool("ok", {})
    assert out.content == "fine"
    assert hostile.server_pid("h") not in (None, pid)
