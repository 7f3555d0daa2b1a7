"""MCP servers that misbehave on the wire, against the real stdio transport.

``tests/fakes/mcp_hostile_server.py`` answers the handshake, then each of its
tools misbehaves in its own way. Each test checks that the daemon tells the
caller what happened, at once, and keeps the server usable.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from structlog.testing import capture_logs

from daemon.backoff import Backoff
from daemon.code_mode.catalog import Catalog
from daemon.errors import ToolTransportError
from daemon.logging import configure_logging, reset_logging
from daemon.mcp.executor import McpToolExecutor

T = TypeVar("T")
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


def _ref_ladder(levels: int, last: Any) -> dict[str, Any]:
    """A schema whose each level refers to the next twice, down to ``last``: small on
    the wire, but 2 ** levels paths when expanded (no cycle for a guard to stop)."""
    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}, {"$ref": f"#/$defs/D{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"D{levels}"] = last
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "$defs": defs}


async def catalog_of(tmp_path: Path, tools: list[dict], **options: Any) -> tuple[Catalog, float]:
    """Code mode's catalog of the hostile server listing ``tools``, and the seconds its
    build took on the event loop."""
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(tools))
    executor = McpToolExecutor(
        {"h": {"command": sys.executable, "args": [HOSTILE, "--tools-json", str(listing)]}}
    )
    try:
        await executor.start()
        started = time.monotonic()
        catalog = Catalog(executor.definitions(), **options)
        return catalog, time.monotonic() - started
    finally:
        await executor.aclose()


async def test_a_schema_whose_refs_multiply_does_not_stall_the_catalog(tmp_path: Path) -> None:
    """A few hundred bytes of $refs that double at each of 40 levels, as input and output
    schema: building code mode's catalog used to walk every path (2 ** 40) on the event
    loop; a shorter ladder down to a union of 20,000 members walked that union 1,024
    times. Past a budget of nodes reached through references the schema is ``Any``."""
    ladder = _ref_ladder(40, {"type": "string"})
    wide = _ref_ladder(10, {"anyOf": [{"type": "string"}] * 20_000})
    tools = [
        {"name": "ladder", "inputSchema": ladder, "outputSchema": ladder},
        {"name": "wide", "inputSchema": wide, "outputSchema": wide},
    ]
    catalog, seconds = await catalog_of(tmp_path, tools)
    assert seconds < 1.0
    for name in ("ladder", "wide"):
        entry = catalog.lookup(name)
        assert entry is not None
        assert [(p.py_name, p.annotation) for p in entry.params] == [("x", "Any")]


async def test_ten_thousand_tools_whose_names_collide_make_a_catalog_quickly(
    tmp_path: Path,
) -> None:
    """10,000 tools named in CJK, which all sanitize to ``t_``: each name used to be
    found by trying ``t_2``, ``t_3``... from the start (quadratic: 6 s on the event loop
    for 10,000); the names are the same, made in linear time."""
    schema = {"type": "object", "properties": {chr(0x4E00 + i): {} for i in range(3)}}
    tools = [{"name": "t" + chr(0x4E00 + i), "inputSchema": schema} for i in range(10_000)]
    catalog, seconds = await catalog_of(tmp_path, tools, budget=20_000)
    assert seconds < 1.5
    assert list(catalog.entries)[:3] == ["t_", "t__2", "t__3"]
    assert list(catalog.entries)[-1] == "t__10000"
    entry = catalog.lookup("t__2")
    assert entry is not None
    assert entry.tool_name == "t\u4e01"
    assert [p.py_name for p in entry.params] == ["_", "__2", "__3"]


async def _longest_stall(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result and the longest time the event loop went without a turn."""
    stalls = [0.0]

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            stalls.append(now - last - 0.005)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        result = await work
        await asyncio.sleep(0.2)  # the rest of the stderr is still being logged
    finally:
        ticker.cancel()
    return result, max(stalls)


async def test_a_stderr_flood_is_logged_without_stalling_the_event_loop(
    hostile: McpToolExecutor, tmp_path: Path
) -> None:
    """Every stderr line goes to the log (docs/mcp.md); with --verbose that is a log
    line each, and a 64 KiB read of short lines (11,000 lines) used to be logged in
    one go, about a second without a turn for anything else. The server's 50,000 lines
    and a 1 MB line now leave the loop a turn every few hundred lines."""
    with (tmp_path / "log").open("w") as sink:
        configure_logging(verbose=True, stream=sink)
        try:
            out, stall = await _longest_stall(hostile.call_tool("stderr_flood", {}))
        finally:
            reset_logging()
    assert out.content == "flooded"
    assert stall < 0.25
    assert "noise" in (tmp_path / "log").read_text()


async def test_requests_and_notifications_the_client_does_not_expect_are_answered(
    hostile: McpToolExecutor,
) -> None:
    """Mid-call, the server asks for sampling, roots, elicitation and an unknown method,
    sends notifications the client does not expect (tools/list_changed included) and
    an answer to no request: each request gets an error answer, the rest is ignored,
    and the call and the tool list stand."""
    tools = [d.name for d in hostile.definitions()]
    with capture_logs() as logs:
        async with asyncio.timeout(5):
            out = await hostile.call_tool("asks", {})
            assert out.content == "asked"
            while sum("client answered" in e.get("line", "") for e in logs) < 4:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    answers = sorted(e["line"] for e in logs if "client answered" in e.get("line", ""))
    assert [a.split('"error":{"code":')[1][:6] for a in answers] == [
        "-32600",
        "-32600",
        "-32602",
        "-32601",
    ]
    assert [d.name for d in hostile.definitions()] == tools
    assert (await hostile.call_tool("ok", {})).content == "fine"


async def test_a_tools_list_whose_cursor_comes_back_fails_the_start_at_once() -> None:
    """A server whose every tools/list page names the same next cursor: paging used to
    go on until connect_timeout (30 s by default), piling up copies of its tools (some
    200 MB in 8 s), then blame a missing handshake. The repeated cursor ends it."""
    executor = McpToolExecutor(
        {"h": {"command": sys.executable, "args": [HOSTILE, "--cursor-loop"]}},
        connect_timeout=20.0,
    )
    try:
        async with asyncio.timeout(5):
            await executor.start()
        assert executor.failed_servers["h"].startswith(
            "MCP server 'h' could not start: its tools/list pages loop "
            "(the cursor 'again' came back)"
        )
    finally:
        await executor.aclose()


async def test_a_line_that_is_not_json_rpc_is_logged_with_the_server_name(
    hostile: McpToolExecutor,
) -> None:
    """A server that prints a banner or debug text to stdout: the line cannot be an
    answer, and it used to vanish (the SDK logs it at debug level), leaving only a call
    that times out. It is logged as ``mcp.server_bad_output``, cut to 200 characters."""
    with capture_logs() as logs, pytest.raises(TimeoutError):  # no answer: the call waits
        async with asyncio.timeout(1):
            await hostile.call_tool("garbage", {})
    bad = [e for e in logs if e["event"] == "mcp.server_bad_output"]
    assert len(bad) == 1
    assert (bad[0]["server"], bad[0]["line"], bad[0]["log_level"]) == (
        "h",
        "this is not json",
        "warning",
    )
    assert "Invalid JSON" in bad[0]["error"]


@pytest.mark.parametrize(
    ("tool", "content"),
    [
        ("weird", "invalid result from 'weird': 13 validation errors for CallToolResult"),
        ("empty_error", ""),
        ("no_content", "invalid result from 'no_content': 1 validation error"),
        ("structured_list", "invalid result from 'structured_list': 1 validation error"),
    ],
)
async def test_results_the_protocol_does_not_allow_are_error_results(
    hostile: McpToolExecutor, tool: str, content: str
) -> None:
    """An unknown content type, isError without a word, no content, a list as structured
    content: each is the call's error result (never a raise), and the server stays."""
    pid = hostile.server_pid("h")
    out = await hostile.call_tool(tool, {})
    assert out.is_error
    assert out.content.startswith(content)
    assert hostile.server_pid("h") == pid
