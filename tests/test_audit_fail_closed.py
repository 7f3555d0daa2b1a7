"""A mutating call is made only once its ``started`` audit row is durable (issue 26 §2.1, §2.3).

The audit here is the real one: :func:`daemon.runtime.audit.audit_observer`
over a real SQLite store. Another connection holds the database's write lock
past the store's ``busy_timeout`` (as a long ``sqlite3`` session or a backup
would), so the ``started`` row cannot be written: the call must not reach the
tool, and whoever asked for it (the snippet in code mode, the model in direct
mode) reads that it was not recorded and not made. The same holds for an
observer that raises.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from daemon.runtime.audit import AuditedExecutor, audit_observer
from daemon.runtime.runs import ToolUseContext, current_tool_use
from daemon.tools import AuditEntry, ThreadKey
from sessions.store import Store
from tests.fakes.executor import FakeToolExecutor, code_mode_over

NOT_RECORDED = "was not called: the call could not be recorded in the audit"
THREAD = "T1"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A real store whose writer gives up on a lock after 0.2 s, with run R1 started."""
    async with Store(tmp_path / "asyncai.db", busy_timeout=0.2) as s:
        await s.runs.record_prompt("#ops", THREAD, "M1", "alice", "x", "2026-12-01T10:00:00Z")
        await s.runs.start_run("R1", "#ops", THREAD, ["M1"])
        yield s


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another connection holds the write lock (an open write transaction) meanwhile."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


@contextlib.contextmanager
def in_run() -> Iterator[None]:
    """What the backend sets around a tool call: the run the audit rows belong to."""
    token = current_tool_use.set(ToolUseContext("R1", THREAD, "tu1", "rec-1"))
    try:
        yield
    finally:
        current_tool_use.reset(token)


def tools() -> FakeToolExecutor:
    fake = FakeToolExecutor()

    @fake.tool()  # no annotations: mutating, as MCP's defaults say
    async def append_line(*, path: str, line: str) -> str:
        "Append a line to a file."
        return "appended"

    @fake.tool(read_only=True)
    async def read_file(*, path: str) -> str:
        "Read a file."
        return "contents"

    return fake


SNIPPET = """
try:
    await append_line(path="/x", line="once")
    made = "made"
except RuntimeError as e:
    made = str(e)
seen = await read_file(path="/x")
[made, seen]
"""


async def _code_mode(inner: FakeToolExecutor, pool, observer) -> str:
    async with code_mode_over(inner, pool, observer=observer) as ex:
        scope = ex.thread_scope(ThreadKey("#ops", THREAD))
        assert scope is not None
        with in_run():
            out = await scope.call_tool("run_code", {"code": SNIPPET})
    assert not out.is_error, out.content
    return out.content


async def test_code_mode_makes_no_mutating_call_while_the_database_is_locked(
    store: Store, monty_pool
):
    """The started row cannot be written: append_line never reaches the tool, the
    snippet gets the RuntimeError saying so; the read-only call still goes on."""
    inner = tools()
    with write_locked(store.path):
        content = await _code_mode(inner, monty_pool, audit_observer(store.audit))
    assert [name for name, _ in inner.calls] == ["read_file"]
    assert NOT_RECORDED in content
    assert "append_line was not called" in content
    assert "contents" in content
    # no row claims the call was made
    assert [
        (e.tool, e.outcome) for e in await store.audit.entries() if e.tool == "append_line"
    ] in (
        [],
        [("append_line", "error")],
    )


async def test_code_mode_makes_no_mutating_call_when_the_observer_fails(monty_pool):
    """An observer that raises on a start (a broker that did not answer, a full disk)."""
    inner = tools()

    async def failing(thread_id: str | None, entry: AuditEntry) -> None:
        if entry.outcome == "started":
            raise OSError(28, "No space left on device")

    content = await _code_mode(inner, monty_pool, failing)
    assert [name for name, _ in inner.calls] == ["read_file"]
    assert "append_line was not called" in content
    assert "No space left on device" in content


async def test_code_mode_records_the_start_before_the_call_when_it_can(store: Store, monty_pool):
    inner = tools()
    content = await _code_mode(inner, monty_pool, audit_observer(store.audit))
    assert [name for name, _ in inner.calls] == ["append_line", "read_file"]
    assert "made" in content
    assert sorted((e.tool, e.outcome) for e in await store.audit.entries()) == [
        ("append_line", "ok"),
        ("read_file", "ok"),
    ]


async def test_direct_mode_records_each_call_as_it_starts_and_ends(store: Store):
    """Direct mode (the model calls the tools itself) writes the same rows code mode does:
    the started row is committed before the tool runs."""
    inner = FakeToolExecutor()
    seen: list[list[tuple[str, str]]] = []

    @inner.tool()
    async def append_line(*, path: str, line: str) -> str:
        "Append a line to a file."
        seen.append([(e.tool, e.outcome) for e in await store.audit.entries()])
        return "appended"

    ex = AuditedExecutor(inner, audit_observer(store.audit))
    await ex.start()
    with in_run():
        out = await ex.call_tool("append_line", {"path": "/x", "line": "once"})
    assert (out.content, out.is_error) == ("appended", False)
    assert seen == [[("append_line", "started")]]
    [row] = await store.audit.entries()
    assert (row.tool, row.mutating, row.outcome, row.bytes) == ("append_line", True, "ok", 8)
    assert row.record_uuid == "rec-1"


async def test_direct_mode_makes_no_mutating_call_while_the_database_is_locked(store: Store):
    inner = tools()
    ex = AuditedExecutor(inner, audit_observer(store.audit))
    await ex.start()
    with in_run(), write_locked(store.path):
        refused = await ex.call_tool("append_line", {"path": "/x", "line": "once"})
        read = await ex.call_tool("read_file", {"path": "/x"})
    assert refused.is_error
    assert "append_line was not called" in refused.content
    assert (read.content, read.is_error) == ("contents", False)
    assert [name for name, _ in inner.calls] == ["read_file"]
