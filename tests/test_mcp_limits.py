"""Per-server ``max_concurrent`` and servers that come back (issue 19), on real stdio servers.

The test server's ``crowd`` tool counts its calls in flight and lets them
through in groups (a group passes only when all its members are in flight at
once, then lingers a moment so that any further calls can pile up), and
reports the most calls it ever held at the same time: with
``max_concurrent = 4`` and groups of 4, exactly 4 (without the limit, all 20).
``nap`` sleeps, for the wait that must not count against a call's timeout. A server started with
``--require-file`` exits at start until that file exists: a server that fails
at start and comes back once the test creates the file. Retries use a short
injected backoff, so no test sleeps for long.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from channels.hub import Hub
from daemon.app import Daemon, running
from daemon.backoff import Backoff
from daemon.cli import main
from daemon.code_mode import CodeModeToolExecutor
from daemon.code_mode.sandbox import engine
from daemon.config import load_config
from daemon.errors import ConfigError
from daemon.lanes import build_mcp_executor
from daemon.limits import CodeModeLimits
from daemon.mcp.executor import McpToolExecutor
from daemon.runtime.audit import audit_observer
from daemon.runtime.runs import ToolUseContext, current_tool_use
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import AuditEntry, ThreadKey
from sessions import RunMetrics, Store
from sessions.ids import now_iso
from sessions.testing import run_records
from tests.fakes.fake_openai import FakeOpenAI, Reply
from tests.fakes.runtime_helpers import msg
from tests.test_daemon import Person, write_config

TEST_SERVER = str(Path(__file__).parent / "fakes" / "mcp_test_server.py")
quick_retry = Backoff(0.05, 0.2)  # a server that failed at start is tried again at once


def server_entry(label: str, *extra: str, **entry: Any) -> dict[str, Any]:
    """An ``mcpServers`` entry for the test server."""
    return {"command": sys.executable, "args": [TEST_SERVER, "--label", label, *extra], **entry}


@pytest.fixture(scope="module")
async def limited() -> AsyncIterator[McpToolExecutor]:
    """One test server limited to 4 calls at once, one without a limit (its own tool nap1)."""
    executor = McpToolExecutor(
        {
            "four": server_entry("four", max_concurrent=4),
            "one": server_entry("one", "--also", "nap1"),
        },
        call_timeout=30.0,
    )
    await executor.start()
    yield executor
    await executor.aclose()


async def test_twenty_gathered_calls_never_have_more_than_four_in_flight(
    limited: McpToolExecutor,
) -> None:
    """20 gathered calls on a server with max_concurrent = 4: the server counts at most 4
    in flight, and all 20 answer (groups of 4 pass only when 4 are in flight together)."""
    arguments = {"key": "direct", "group": 4, "linger": 0.05}
    calls = [limited.call_tool("crowd", arguments) for _ in range(20)]
    outputs = await asyncio.gather(*calls)
    assert [o.is_error for o in outputs] == [False] * 20, outputs
    assert max(int(o.content) for o in outputs) == 4
    assert limited.slots.limit("four") == 4
    assert (limited.slots.in_flight("four"), limited.slots.waiting("four")) == (0, 0)


async def test_the_bound_is_per_server_and_a_server_without_one_is_not_bounded(
    limited: McpToolExecutor,
) -> None:
    """A server without max_concurrent takes no slot: its calls report no wait (None)."""
    assert limited.slots.limit("one") is None
    async with limited.call_slot("nap1") as waited:
        assert waited is None
    async with limited.call_slot("crowd") as waited:
        assert waited == 0.0  # a slot was free
        assert limited.slots.in_flight("four") == 1
    assert limited.slots.in_flight("four") == 0


async def test_a_call_inside_its_slot_does_not_take_a_second_one() -> None:
    """Code mode holds the slot and calls inside it: with max_concurrent = 1 that must not
    wait for itself; the waiting call's time is not part of call_timeout."""
    executor = McpToolExecutor({"solo": server_entry("solo", max_concurrent=1)}, call_timeout=1.0)
    try:
        await executor.start()
        async with executor.call_slot("nap") as waited:
            assert waited == 0.0
            async with asyncio.timeout(10):  # the same task: wait_for would run it in another
                out = await executor.call_tool("nap", {"seconds": 0})
            assert out.content == "slept 0.0"
        # six 0.25 s naps, one at a time: the last waits about 1.25 s, past the 1 s
        # call_timeout, and still answers
        outputs = await asyncio.gather(
            *(executor.call_tool("nap", {"seconds": 0.25}) for _ in range(6))
        )
        assert [o.content for o in outputs] == ["slept 0.25"] * 6
    finally:
        await executor.aclose()


@pytest.fixture
async def code_mode(monty_pool) -> AsyncIterator[Any]:
    """Build code-mode executors over MCP servers on the shared pool; close them afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(inner: McpToolExecutor, observed: list[AuditEntry], **limits: Any):
        def observer(thread: str | None, entry: AuditEntry) -> None:
            observed.append(entry)

        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**limits), pool=monty_pool, observer=observer
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def test_code_mode_gather_of_twenty_waits_its_turn_and_audits_the_wait(code_mode) -> None:
    """The issue's test through run_code: 20 gathered calls, max_concurrent = 4, never more
    than 4 in flight; the 16 that waited record how long (queue_ms), the first 4 zero."""
    observed: list[AuditEntry] = []
    inner = McpToolExecutor({"four": server_entry("four", max_concurrent=4)})
    ex = code_mode(inner, observed)
    out = await ex.thread_scope(ThreadKey("#t", "t")).call_tool(
        "run_code",
        {
            "code": "peaks = await asyncio.gather("
            "*[crowd(key='snippet', group=4, linger=0.05) for _ in range(20)])\n"
            "max(int(p) for p in peaks), len(peaks)"
        },
    )
    assert not out.is_error, out.content
    assert json.loads(out.content) == [4, 20]
    assert out.audit is not None
    nested = out.audit["nested_calls"]
    assert len(nested) == 20
    queued = sorted(call["queue_ms"] for call in nested)
    assert queued[:4] == [0.0] * 4
    assert all(ms > 0 for ms in queued[4:])
    # the started entry (the audit row as the call begins) carries the wait too
    starts = [e for e in observed if e.outcome == "started"]
    assert sorted(e.queue_ms or 0.0 for e in starts) == queued


async def test_code_mode_wait_for_a_slot_does_not_count_against_tool_timeout(code_mode) -> None:
    """tool_timeout = 1 s, max_concurrent = 1, six gathered 0.25 s calls: the last waits
    about 1.25 s for its turn and still answers; no call timed out."""
    observed: list[AuditEntry] = []
    inner = McpToolExecutor({"solo": server_entry("solo", max_concurrent=1)})
    ex = code_mode(inner, observed, tool_timeout=1.0)
    out = await ex.call_tool(
        "run_code",
        {"code": "await asyncio.gather(*[nap(seconds=0.25) for _ in range(6)])"},
    )
    assert not out.is_error, out.content
    assert json.loads(out.content) == ["slept 0.25"] * 6
    assert out.audit is not None
    assert {call["outcome"] for call in out.audit["nested_calls"]} == {"ok"}
    assert max(call["queue_ms"] for call in out.audit["nested_calls"]) > 1000.0


async def test_calls_waiting_behind_another_threads_calls_are_not_given_up(
    code_mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot is held elsewhere (another thread's call) for longer than the engine's guard
    on its own wait (tool_timeout plus a slack, here 0.3 s plus 0): the snippet's gathered
    calls wait for it and then run, instead of the snippet being reset."""
    monkeypatch.setattr(engine, "_WAIT_SLACK", 0.0)
    inner = McpToolExecutor({"solo": server_entry("solo", max_concurrent=1)})
    ex = code_mode(inner, [], tool_timeout=0.3)
    await ex.start()
    snippet = "await asyncio.gather(nap(seconds=0), nap(seconds=0))"
    async with inner.call_slot("nap"):
        task = asyncio.create_task(ex.call_tool("run_code", {"code": snippet}))
        async with asyncio.timeout(30):
            while inner.slots.waiting("solo") < 2:  # noqa: ASYNC110 - no event to wait on
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)  # past the guard's 0.3 s, twice
    out = await task
    assert not out.is_error, out.content
    assert json.loads(out.content) == ["slept 0.0", "slept 0.0"]


async def test_a_server_without_a_limit_records_no_queue(code_mode) -> None:
    """No max_concurrent: queue_ms stays None (NULL in the audit)."""
    observed: list[AuditEntry] = []
    ex = code_mode(McpToolExecutor({"free": server_entry("free")}), observed)
    out = await ex.call_tool("run_code", {"code": "await echo(text='hi')"})
    assert out.content == "hi"
    assert out.audit is not None
    assert [call["queue_ms"] for call in out.audit["nested_calls"]] == [None]
    assert {e.queue_ms for e in observed} == {None}


# -- configuration -------------------------------------------------------------------------


def test_max_concurrent_is_read_from_the_config_and_reaches_the_executor(tmp_path: Path) -> None:
    """``[mcp_servers.NAME] max_concurrent`` is a positive integer; unset means unlimited."""
    path = tmp_path / "asyncai.toml"
    path.write_text(
        "[mcp_servers.kcp]\ncommand = 'asyncai-mcp-kcp'\nmax_concurrent = 4\n"
        "[mcp_servers.web]\ncommand = 'asyncai-mcp-simple'\n"
    )
    config = load_config(path)
    assert config.mcp_servers["kcp"].max_concurrent == 4
    assert config.mcp_servers["web"].max_concurrent is None
    executor = build_mcp_executor(config)
    assert isinstance(executor, McpToolExecutor)
    assert executor.slots.limit("kcp") == 4
    assert executor.slots.limit("web") is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [("0", "int 0"), ("-2", "int -2"), ("'4'", "str '4'"), ("true", "bool True"), ("1.5", "float")],
)
def test_a_bad_max_concurrent_is_a_clear_error(tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "asyncai.toml"
    path.write_text(f"[mcp_servers.kcp]\ncommand = 'asyncai-mcp-kcp'\nmax_concurrent = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "key 'mcp_servers.kcp.max_concurrent'" in message
    assert "must be a positive integer" in message
    assert shown in message


def test_max_concurrent_in_an_mcp_json_entry(tmp_path: Path) -> None:
    """The same key in an ``mcp_json`` file's entry."""
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"t": {"command": "t", "max_concurrent": 2}}}))
    path = tmp_path / "asyncai.toml"
    path.write_text(f"mcp_json = '{servers}'\n")
    assert load_config(path).mcp_servers["t"].max_concurrent == 2


# -- servers that come back ----------------------------------------------------------------


async def until_logged(logs: list[dict[str, Any]], event: str, server: str) -> dict[str, Any]:
    """The first captured entry of ``event`` for ``server``, once it is there (bounded)."""
    async with asyncio.timeout(30):
        while True:
            for entry in logs:
                if entry["event"] == event and entry.get("server") == server:
                    return entry
            await asyncio.sleep(0.02)  # capture_logs offers a list, not an event


async def test_a_server_that_failed_at_start_is_retried_and_its_tools_appear(
    tmp_path: Path,
) -> None:
    """It is listed in failed_servers and retried with backoff (server_states says so,
    with the retries so far); once it starts, its tools are routed and listed (a name
    another server answers stays with that one)."""
    flag = tmp_path / "ready"
    executor = McpToolExecutor(
        {
            "first": server_entry("first"),
            "late": server_entry(
                "late", "--require-file", str(flag), "--also", "late_hello", max_concurrent=2
            ),
        },
        retry_backoff=quick_retry,
    )
    try:
        with capture_logs() as logs:
            await executor.start()
            assert set(executor.failed_servers) == {"late"}
            assert "late_hello" not in executor.routes
            assert executor.tools_version == 0
            await until_logged(logs, "mcp.server_retry", "late")
            first, late = executor.server_states()  # the console's Health page
            assert (first.name, first.failed, first.retries) == ("first", None, 0)
            assert first.pid is not None
            assert first.tools > 0
            assert (late.name, late.pid, late.tools) == ("late", None, 0)
            assert late.failed is not None
            assert late.retries >= 1
            flag.touch()
            recovered = await until_logged(logs, "mcp.server_recovered", "late")
        assert recovered["tools"] == ["late_hello"]
        up = executor.server_states()[1]
        assert (up.failed, up.tools) == (None, 1)
        assert up.pid is not None
        assert executor.tools_version == 1
        assert executor.failed_servers == {}
        assert executor.routes["late_hello"] == "late"
        assert executor.routes["whoami"] == "first"  # stays with the server that had it
        assert [d.name for d in executor.definitions()][-1] == "late_hello"
        out = await executor.call_tool("late_hello", {})
        assert out.content == "late_hello from test server late"
        assert executor.slots.limit("late") == 2
    finally:
        await executor.aclose()


async def test_retries_stop_when_the_executor_closes(tmp_path: Path) -> None:
    """A server that never comes up is retried until aclose(), which ends the retries."""
    executor = McpToolExecutor(
        {"never": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}},
        retry_backoff=quick_retry,
    )
    with capture_logs() as logs:
        await executor.start()
        retrying = [t for t in asyncio.all_tasks() if t.get_name() == "mcp-retry:never"]
        assert len(retrying) == 1
        await until_logged(logs, "mcp.server_retry", "never")
        await executor.aclose()
    assert retrying[0].done()
    assert set(executor.failed_servers) == {"never"}


async def test_code_mode_sees_a_late_server_at_the_next_run_not_mid_snippet(
    tmp_path: Path, code_mode
) -> None:
    """A snippet that started before the server came up keeps the catalog it started with
    (the new tool is a NameError there); the next run's description lists the tool, and
    its snippet calls it."""
    flag = tmp_path / "ready"
    inner = McpToolExecutor(
        {
            "first": server_entry("first"),
            "late": server_entry("late", "--require-file", str(flag), "--also", "late_hello"),
        },
        retry_backoff=quick_retry,
    )
    ex = code_mode(inner, [])
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    with capture_logs() as logs:
        await ex.start()
        assert "late_hello" not in ex.definitions()[0].description
        held = asyncio.create_task(
            scope.call_tool(
                "run_code",
                {"code": "await barrier(key='hold', parties=2)\nawait late_hello()"},
            )
        )
        async with asyncio.timeout(30):
            while not any(e.get("line") == "barrier hold: arrival 1" for e in logs):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        flag.touch()
        await until_logged(logs, "mcp.server_recovered", "late")
    assert "late_hello" in ex.definitions()[0].description  # the next run's catalog
    await inner.call_tool("barrier", {"key": "hold", "parties": 2})  # let the snippet go on
    mid = await held
    assert mid.is_error
    assert "NameError" in mid.content
    assert "late_hello" in mid.content
    after = await scope.call_tool("run_code", {"code": "await late_hello()"})
    assert not after.is_error, after.content
    assert after.content == "late_hello from test server late"


# -- the audit keeps the wait --------------------------------------------------------------


async def test_the_wait_reaches_the_audit_row_the_cli_and_the_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """queue_ms goes from the AuditEntry (started and ended) through the observer to the
    tool_calls row, `asyncai audit` (QUEUE; --json), and the transcript's nested calls."""
    path = tmp_path / "asyncai.db"
    async with Store(path) as store:
        m = msg("x")
        await SessionsRuntimeStore(store).record_prompt(m)
        await store.runs.start_run("R1", "#ops", m.thread, [m.id])
        observe = audit_observer(store.audit)
        token = current_tool_use.set(ToolUseContext("R1", m.thread, "tu1", "rec-1"))
        try:
            waited = AuditEntry(
                "crowd", {}, False, 0, False, now_iso(), 0.0, "started", "k1", queue_ms=1250.4
            )
            await observe(m.thread, waited)
            [row] = await store.audit.entries()
            assert (row.outcome, row.queue_ms) == ("started", 1250.4)
            await observe(m.thread, replace(waited, outcome="ok", duration_ms=3.0))
            free = AuditEntry("echo", {}, False, 2, False, now_iso(), 1.0, "ok", "k2")
            await observe(m.thread, free)
        finally:
            current_tool_use.reset(token)
        assert {(e.tool, e.outcome, e.queue_ms) for e in await store.audit.entries()} == {
            ("crowd", "ok", 1250.4),
            ("echo", "ok", None),
        }
        nested = [
            {"tool": "crowd", "arguments": {}, "is_error": False, "bytes": 1, "queue_ms": 1250.4},
            {"tool": "echo", "arguments": {}, "is_error": False, "bytes": 2, "queue_ms": None},
        ]
        records = run_records("q", nested=nested)
        await store.runs.finish_run("R1", "done", records, RunMetrics(rounds=2), [m.id], "done")

    assert await asyncio.to_thread(main, ["audit", "--db", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    queue = lines[0].index("QUEUE")
    assert {line[queue:].split()[0] for line in lines[1:]} == {"1250", "-"}
    assert await asyncio.to_thread(main, ["audit", "--db", str(path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(str(r["queue_ms"]) for r in rows) == ["1250.4", "None"]
    assert await asyncio.to_thread(main, ["transcript", m.thread, "--db", str(path)]) == 0
    text = capsys.readouterr().out
    assert "crowd({}) — ok, 1 B, queued 1250 ms" in text
    assert "echo({}) — ok, 2 B\n" in text


# -- the daemon ----------------------------------------------------------------------------


async def test_the_daemon_reports_a_failed_server_as_retried_and_offers_it_when_it_is_up(
    tmp_path: Path,
) -> None:
    """daemon.ready names the server that failed and says it is being retried; once it
    comes up, the next run's run_code description lists its tool (real hub, store,
    servers and pool; the model is scripted)."""
    flag = tmp_path / "ready"
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=False
        )
        with path.open("a") as config:
            config.write(
                f'[mcp_servers.late]\ncommand = "{sys.executable}"\n'
                f'args = ["{TEST_SERVER}", "--require-file", "{flag}", "--also", "late_hello"]\n'
            )
        alice = Person(hub.url)
        await alice.start()
        try:
            with capture_logs() as logs:
                async with running(Daemon(load_config(path, environ={}), env={})):
                    [ready] = [e for e in logs if e["event"] == "daemon.ready"]
                    assert ready["failed_servers"] == ["late"]
                    assert ready["failed_servers_action"] == "retrying with backoff"
                    flag.touch()
                    await until_logged(logs, "mcp.server_recovered", "late")
                    fake.add(Reply("it is there"))
                    _, reply = await alice.ask("is late_hello there?")
                    assert reply.text == "it is there"
        finally:
            await alice.close()
    [tool] = fake.requests[-1]["tools"]
    assert "late_hello" in tool["function"]["description"]
