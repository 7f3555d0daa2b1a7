"""McpToolExecutor against real stdio MCP servers.

One module-scoped executor holds the bundled ``asyncai-mcp-simple``, the
third-party ``mcp-server-time`` from PyPI, a test server (``alpha``, with a
barrier, a crash and a duplicate ``http_get``) and a server that cannot
start. Spawning a Python MCP server costs about a second of CPU, so the tests
share it; the cheap stdlib-only raw server covers timeouts and start-up.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import types as mcp_types
from structlog.testing import capture_logs

from daemon.backoff import Backoff
from daemon.errors import ConfigError, ToolTransportError
from daemon.mcp.executor import McpToolExecutor, call_output
from daemon.mcp.spec import ServerSpec
from daemon.mcp.stdio import BASE_ENV_VARS, minimal_environment
from tests.fakes.backoff import RecordingBackoff

FAKES = Path(__file__).parent / "fakes"
TEST_SERVER = str(FAKES / "mcp_test_server.py")
RAW_SERVER = str(FAKES / "mcp_raw_server.py")
BIG_BODY = "".join(f"line {i:07d}\n" for i in range(200_000))  # 2.6 MB


no_backoff = Backoff(0.0, 0.0)  # restart at once: tests never really sleep


class _Handler(http.server.BaseHTTPRequestHandler):
    """A loopback site: ``/big`` (a large body) and ``/missing`` (404)."""

    def do_GET(self) -> None:
        if self.path == "/big":
            status, body = 200, BIG_BODY.encode()
        else:
            status, body = 404, b"no such page"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for access logs."""


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """Base URL of a real HTTP server on 127.0.0.1, port 0."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@dataclass
class World:
    """The shared executor and what it logged while starting."""

    executor: McpToolExecutor
    start_logs: list[dict[str, Any]]


@pytest.fixture(scope="module")
async def world() -> AsyncIterator[World]:
    """Four configured servers, three of which start."""
    servers = {
        "simple": {"command": sys.executable, "args": ["-m", "servers.simple"]},
        # Listed after simple, so simple's http_get wins and this one is the duplicate.
        "alpha": {
            "command": sys.executable,
            "args": [TEST_SERVER, "--label", "alpha", "--also", "http_get"],
            "env": {"GREETING": "hello"},
        },
        # A bare command with a PATH that lacks it: found next to the daemon's Python.
        "time": {
            "command": "mcp-server-time",
            "args": ["--local-timezone", "UTC"],
            "env": {"PATH": "/usr/bin:/bin"},
        },
        "broken": {
            "command": sys.executable,
            "args": ["-c", "import sys; print('broken: no config', file=sys.stderr); sys.exit(3)"],
        },
    }
    executor = McpToolExecutor(servers, call_timeout=30.0, backoff=no_backoff)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASYNCAI_TEST_SECRET", "must-not-leak")
        mp.setenv("LC_TIME", "C.UTF-8")
        with capture_logs() as logs:
            await executor.start()
    yield World(executor, logs)
    await executor.aclose()


async def logged(logs: list[dict[str, Any]], predicate: Callable[[dict[str, Any]], bool]) -> None:
    """Wait until a captured log entry matches; callers bound it with a timeout."""
    # capture_logs() offers a list, not an event to wait on: poll it.
    while not any(predicate(entry) for entry in logs):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured log entries of one event."""
    return [entry for entry in logs if entry["event"] == name]


async def test_definitions_carry_output_schemas_and_annotations(world: World) -> None:
    """ToolDefinitions keep each tool's output schema and read-only/destructive hints."""
    defs = {d.name: d for d in world.executor.definitions()}
    http_get = defs["http_get"]
    assert http_get.read_only is True
    assert http_get.output_schema is not None
    assert set(http_get.output_schema["properties"]) == {"status", "content_type", "body", "json"}
    assert defs["rm"].destructive is True
    assert defs["rm"].mutating
    assert defs["echo"].output_schema is None
    assert defs["get_current_time"].read_only is True
    assert "timezone" in defs["get_current_time"].input_schema["properties"]


async def test_duplicate_tool_first_server_wins_and_is_logged(world: World, site: str) -> None:
    """Two servers declare http_get: the first configured one answers, the
    other is recorded and logged as a warning (spec A2)."""
    ex = world.executor
    assert ex.routes["http_get"] == "simple"
    assert ex.routes["whoami"] == "alpha"
    assert ("http_get", "simple", "alpha") in ex.duplicates
    [warning] = events(world.start_logs, "mcp.duplicate_tool")
    assert warning["log_level"] == "warning"
    assert (warning["tool"], warning["kept"], warning["ignored"]) == ("http_get", "simple", "alpha")
    assert [d.name for d in ex.definitions()].count("http_get") == 1
    out = await ex.call_tool("http_get", {"url": f"{site}/missing"})
    assert out.structured == {
        "status": 404,
        "content_type": "text/plain; charset=utf-8",
        "body": "no such page",
    }


async def test_gathered_calls_really_overlap(world: World) -> None:
    """Four gathered calls are in flight together on one session: each waits
    on a barrier in the server that opens only when all four have arrived."""
    async with asyncio.timeout(15):
        outs = await asyncio.gather(
            *(
                world.executor.call_tool("barrier", {"key": "overlap", "parties": 4})
                for _ in range(4)
            )
        )
    assert [o.is_error for o in outs] == [False] * 4
    assert all(o.content == "overlap passed with 4" for o in outs)


async def test_large_outputs_arrive_whole(world: World, site: str) -> None:
    """Nothing between the server and the caller truncates: a 3 MB text
    result and a 2.6 MB HTTP body arrive complete."""
    out = await world.executor.call_tool("big", {"size": 3_000_000})
    assert len(out.content) == 3_000_003
    assert out.content.endswith("cdefEND")
    page = await world.executor.call_tool("http_get", {"url": f"{site}/big"})
    assert page.is_error is False
    assert page.structured["body"] == BIG_BODY
    assert page.structured["status"] == 200


async def test_unknown_tool_is_an_error_result(world: World) -> None:
    """A name no server declares is an error result, with a suggestion."""
    out = await world.executor.call_tool("get_curent_time", {})
    assert out.is_error
    assert out.content.startswith("unknown tool 'get_curent_time'")
    assert "get_current_time" in out.content


async def test_tool_errors_and_bad_arguments_are_error_results(world: World) -> None:
    """A tool's own failure and a validation failure come back as is_error
    results carrying the server's text, not as exceptions."""
    failed = await world.executor.call_tool("fail", {"message": "the disk is full"})
    assert failed.is_error
    assert "the disk is full" in failed.content
    bad = await world.executor.call_tool("echo", {"wrong": 1})
    assert bad.is_error
    assert "text" in bad.content


async def test_servers_get_a_minimal_environment(world: World) -> None:
    """A server sees the base variables and its entry's env, nothing else of
    the daemon's environment."""
    out = await world.executor.call_tool("env", {})
    env = out.structured
    assert env["GREETING"] == "hello"
    assert env["LC_TIME"] == "C.UTF-8"
    assert "ASYNCAI_TEST_SECRET" not in env
    assert all(k in BASE_ENV_VARS or k.startswith("LC_") or k == "GREETING" for k in env)


async def test_third_party_server_from_pypi(world: World) -> None:
    """mcp-server-time, installed from PyPI, is connected and called offline."""
    out = await world.executor.call_tool("get_current_time", {"timezone": "UTC"})
    assert out.is_error is False
    assert out.structured["timezone"] == "UTC"
    assert out.structured["datetime"].endswith("+00:00")


async def test_server_that_cannot_start_is_reported_and_others_work(world: World) -> None:
    """The broken server is named with its exit code and stderr; start()
    succeeded and the other servers answer."""
    message = world.executor.failed_servers["broken"]
    assert "'broken' could not start" in message
    assert "exit code 3" in message
    assert "broken: no config" in message
    [logged] = events(world.start_logs, "mcp.server_start_failed")
    assert logged["server"] == "broken"
    assert "broken: no config" in logged["error"]
    assert set(world.executor.failed_servers) == {"broken"}
    assert (await world.executor.call_tool("whoami", {})).content == "alpha"


async def test_server_stderr_goes_to_the_log_tagged_with_its_name(world: World) -> None:
    """Each stderr line becomes an mcp.server_stderr entry with server=<name>."""
    lines = {(e["server"], e["line"]) for e in events(world.start_logs, "mcp.server_stderr")}
    assert ("alpha", "test server alpha starting") in lines
    assert ("broken", "broken: no config") in lines


async def test_server_killed_mid_call_fails_in_flight_calls_then_restarts(world: World) -> None:
    """A crash fails the crashing call and another in-flight call at once with
    ToolTransportError; the next call restarts the server and succeeds."""
    ex = world.executor
    old_pid = ex.server_pid("alpha")
    with capture_logs() as logs:
        # 15 s: the waiting call must fail at the crash, long before its barrier gives up.
        async with asyncio.timeout(15):
            waiting = asyncio.create_task(ex.call_tool("barrier", {"key": "never", "parties": 2}))
            # The barrier call is inside the server before the crash.
            await logged(logs, lambda e: e.get("line") == "barrier never: arrival 1")
            with pytest.raises(ToolTransportError) as crashed:
                await ex.call_tool("crash", {})
            with pytest.raises(ToolTransportError) as dropped:
                await waiting
        assert crashed.value.server == "alpha"
        assert crashed.value.tool == "crash"
        assert "went away" in str(crashed.value)
        assert crashed.value.__cause__ is not None
        assert dropped.value.tool == "barrier"
        again = await ex.call_tool("whoami", {})
    assert again.content == "alpha"
    assert ex.server_pid("alpha") not in (None, old_pid)
    [exited] = events(logs, "mcp.server_exited")
    assert exited["returncode"] == 7
    assert "crashing on purpose" in exited["stderr"]
    [restarted] = events(logs, "mcp.server_restarted")
    assert restarted["server"] == "alpha"


async def test_call_timeout_and_handshake_timeout() -> None:
    """A call that never finishes raises ToolTransportError after call_timeout;
    a server that never finishes the handshake is reported, the other works;
    concurrent start() calls start each server once; aclose() reaps."""
    ex = McpToolExecutor(
        {
            "raw": {"command": sys.executable, "args": [RAW_SERVER]},
            "stuck": {"command": sys.executable, "args": [RAW_SERVER, "--no-handshake"]},
        },
        call_timeout=0.3,
        connect_timeout=0.5,
    )
    try:
        with capture_logs() as logs:
            await asyncio.gather(ex.start(), ex.start(), ex.start())
        assert len(events(logs, "mcp.server_started")) == 1
        assert "no MCP handshake within 0.5s" in ex.failed_servers["stuck"]
        assert "raw server up" in ex.failed_servers["stuck"]
        with pytest.raises(ToolTransportError, match=r"timed out after 0\.3s") as timed_out:
            await ex.call_tool("hang", {})
        assert isinstance(timed_out.value.__cause__, TimeoutError)
        assert (await ex.call_tool("ping", {})).content == "pong"
        pid = ex.server_pid("raw")
        assert pid is not None
    finally:
        await ex.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ToolTransportError, match="closed"):
        await ex.call_tool("ping", {})


async def test_failed_restarts_back_off_and_recover(tmp_path: Path) -> None:
    """A server that cannot come back fails each call with its stderr; each
    retry asks the backoff for a higher attempt; once it starts again the
    call succeeds, and a good call resets the attempts."""
    marker = tmp_path / "broken"
    backoff = RecordingBackoff()

    ex = McpToolExecutor(
        {"raw": {"command": sys.executable, "args": [RAW_SERVER, "--refuse-if", str(marker)]}},
        backoff=backoff,
    )
    try:
        await ex.start()
        marker.touch()
        with pytest.raises(ToolTransportError, match="went away"):
            await ex.call_tool("crash", {})
        for _ in range(2):
            with pytest.raises(ToolTransportError) as failed:
                await ex.call_tool("ping", {})
            assert "'raw' could not start" in str(failed.value)
            assert "exit code 1" in str(failed.value)
            assert f"refusing to start: {marker} exists" in str(failed.value)
            assert (failed.value.server, failed.value.tool) == ("raw", "ping")
        marker.unlink()
        assert (await ex.call_tool("ping", {})).content == "pong"
        with pytest.raises(ToolTransportError):
            await ex.call_tool("crash", {})
        assert (await ex.call_tool("ping", {})).content == "pong"
    finally:
        await ex.aclose()
    assert [attempt for attempt, _ in backoff.asked] == [1, 2, 3, 1]


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_exit_is_noticed_even_when_a_child_holds_stdout() -> None:
    """A server that exits leaving a child with its stdout still fails the
    in-flight call promptly; the child is stopped with the server's group."""
    ex = McpToolExecutor(
        {"raw": {"command": sys.executable, "args": [RAW_SERVER]}},
        call_timeout=30.0,
        backoff=no_backoff,
    )
    try:
        with capture_logs() as logs:
            async with asyncio.timeout(15):  # well before call_timeout
                with pytest.raises(ToolTransportError, match="went away"):
                    await ex.call_tool("orphan_crash", {})
                await logged(logs, lambda e: e.get("line", "").startswith("orphan pid "))
        [line] = [e["line"] for e in logs if e.get("line", "").startswith("orphan pid ")]
        orphan = int(line.split()[-1])
        assert (await ex.call_tool("ping", {})).content == "pong"
    finally:
        await ex.aclose()
    assert not alive(orphan)


async def test_missing_command_is_reported_by_name() -> None:
    """A command that does not exist fails start-up with a message naming it."""
    ex = McpToolExecutor({"ghost": {"command": "asyncai-no-such-server"}})
    try:
        await ex.start()
        assert ex.definitions() == []
        assert "command not found: 'asyncai-no-such-server'" in ex.failed_servers["ghost"]
    finally:
        await ex.aclose()


def test_definitions_before_start_is_a_clear_error() -> None:
    """definitions() says to await start() first."""
    with pytest.raises(RuntimeError, match="await start"):
        McpToolExecutor({}).definitions()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "url": "http://h"}, r"unknown key 'mcpServers\.srv\.url'"),
        ({"command": "x", "type": "sse"}, r"'mcpServers\.srv' .* has type 'sse': only stdio"),
        ({"args": []}, r"missing key 'mcpServers\.srv\.command'"),
        ({"command": "x", "args": "a b"}, r"'mcpServers\.srv\.args' .* must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, r"'mcpServers\.srv\.env' .* table of strings"),
    ],
)
def test_bad_server_entries_are_config_errors(entry: dict[str, Any], message: str) -> None:
    """An invalid mcpServers entry is a ConfigError naming the server and key
    (the one check of an entry, shared with the config file's [mcp_servers])."""
    with pytest.raises(ConfigError, match=message) as error:
        ServerSpec.from_entry("srv", entry)
    assert "mcpServers.srv" in str(error.value)


def test_entry_with_stdio_type_is_accepted() -> None:
    """Entries pasted from other clients' mcpServers files parse as is."""
    spec = ServerSpec.from_entry(
        "t", {"type": "stdio", "command": "uvx", "args": ["x"], "env": {"K": "v"}}
    )
    assert spec == ServerSpec(command="uvx", args=("x",), env={"K": "v"})


def test_minimal_environment_keeps_only_the_basics() -> None:
    """Only BASE_ENV_VARS and LC_* pass, shell functions never; extra wins."""
    base = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "OPENAI_API_KEY": "sk-secret",
        "TMPDIR": "() { evil; }",
        "LANG": "C.UTF-8",
    }
    env = minimal_environment({"HOME": "/srv", "TOKEN": "t"}, base=base)
    assert env == {"PATH": "/bin", "HOME": "/srv", "LC_ALL": "C", "LANG": "C.UTF-8", "TOKEN": "t"}


def test_call_output_joins_text_and_keeps_other_blocks_whole() -> None:
    """Text blocks are joined with newlines; other blocks are kept as JSON,
    data included; structured content and is_error pass through."""
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="one"),
            mcp_types.ImageContent(type="image", data="QUJD" * 1000, mime_type="image/png"),
            mcp_types.TextContent(type="text", text="two"),
        ],
        structured_content={"n": 2},
        is_error=True,
    )
    out = call_output(result)
    first, image, last = out.content.split("\n")
    assert (first, last) == ("one", "two")
    assert '"data":"' + "QUJD" * 1000 + '"' in image
    assert out.structured == {"n": 2}
    assert out.is_error is True
