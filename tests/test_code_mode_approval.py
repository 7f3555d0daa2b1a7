"""Approvals in code mode (issue 13): a snippet pauses before calls that need a person, and resumes.

End to end on the real shared Monty pool over an in-memory executor; the
pure parts of :mod:`daemon.code_mode.sandbox.approval` at the end.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest

from daemon.approvals import Decision, Pause, PendingCall, Verdict
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.sandbox.approval import (
    PauseStateError,
    denial_message,
    pause_state,
    render_paused,
    restore_state,
)
from daemon.code_mode.sandbox.pool import close_pool, create_pool
from daemon.mcp.executor import McpToolExecutor
from daemon.tools import AuditEntry, ThreadKey, ToolCallOutput, ToolDefinition
from tests.fakes.executor import FakeToolExecutor

TEST_LIMITS = {"max_feed_duration": 2.0, "max_wall": 20.0, "tool_timeout": 10.0}

MakeExecutor = Callable[..., CodeModeToolExecutor]


class Gate:
    """An approval policy for tests: one verdict for every call, and a record of what it saw."""

    def __init__(
        self, action: Literal["allow", "deny", "ask"] = "ask", reason: str = "not read-only"
    ):
        self.verdict = Verdict(action, reason)
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, definition: ToolDefinition, arguments: dict[str, Any]) -> Verdict:
        self.seen.append((definition.name, arguments))
        return self.verdict


@pytest.fixture
def fake() -> FakeToolExecutor:
    """One read-only tool and two unannotated (so mutating) tools."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_items() -> list:
        """Three items."""
        return ["a", "b", "c"]

    @fake.tool()
    async def delete_object(*, name: str) -> str:
        """Delete one object."""
        return f"deleted {name}"

    @fake.tool()
    async def create_object(*, name: str) -> str:
        """Create one object."""
        return f"created {name}"

    return fake


@pytest.fixture
async def make_executor(monty_pool) -> AsyncIterator[MakeExecutor]:
    """Executors on the shared pool with test limits; closed afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(inner, gate=None, observer=None, pool=monty_pool) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**TEST_LIMITS), pool=pool, observer=observer, gate=gate
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def run(executor, code: str) -> ToolCallOutput:
    """One run_code call."""
    return await executor.call_tool("run_code", {"code": code})


def approve(pause: Pause, by: str = "alice") -> dict[int, Decision]:
    """Every held call approved."""
    return {c.call_id: Decision(True, by, waited_ms=1500.0) for c in pause.calls}


def deny(pause: Pause, by: str = "bob", reason: str = "not today") -> dict[int, Decision]:
    """Every held call denied."""
    return {c.call_id: Decision(False, by, reason, 900.0, "denied") for c in pause.calls}


def made(fake: FakeToolExecutor, tool: str) -> list[dict]:
    """The arguments of every call of ``tool`` that reached the inner executor."""
    return [arguments for name, arguments in fake.calls if name == tool]


async def test_a_call_that_needs_approval_pauses_the_snippet_and_is_not_made(make_executor, fake):
    """The gate says ask: the run ends with a Pause listing the call; the tool is not called."""
    gate = Gate("ask", "not read-only")
    executor = make_executor(fake, gate)
    out = await run(
        executor.thread_scope(ThreadKey("#t", "t")), 'x = 5\nawait delete_object(name="a")'
    )
    assert out.pause is not None, out.content
    assert not out.is_error
    assert "waiting for approval" in out.content
    assert 'delete_object(name="a")' in out.content
    (call,) = out.pause.calls
    assert call == PendingCall(
        call.call_id, "delete_object", None, {"name": "a"}, "not read-only", "delete_object"
    )
    assert out.pause.snapshot
    assert fake.calls == []
    assert gate.seen == [("delete_object", {"name": "a"})]
    assert executor.worker_pid(ThreadKey("#t", "t")) is None  # the paused run holds no worker


async def test_gather_runs_the_read_only_call_and_pauses_both_mutating_calls_in_one_pause(
    make_executor, fake
):
    """One gather, two mutating calls and a read-only one: the read-only one runs, one Pause
    holds both mutating calls; approving makes each exactly once and the snippet's value comes
    back, with variables from before the pause still in the REPL; the audit shows the decision."""
    seen: list[AuditEntry] = []
    gate = Gate()
    executor = make_executor(fake, gate, observer=lambda _t, entry: seen.append(entry))
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        'x = 5\nprint("before")\n'
        "listed, a, b = await asyncio.gather(\n"
        '    list_items(), delete_object(name="a"), delete_object(name="b"))\n'
        "[x, len(listed), a, b]",
    )
    assert out.pause is not None, out.content
    assert [c.arguments for c in out.pause.calls] == [{"name": "a"}, {"name": "b"}]
    assert fake.calls == [("list_items", {})]
    assert [e["tool"] for e in out.audit["nested_calls"]] == ["list_items"]
    assert [name for name, _ in gate.seen] == ["delete_object", "delete_object"]

    done = await executor.resume(ThreadKey("#t", "t"), out.pause, approve(out.pause))
    assert done.pause is None
    assert not done.is_error, done.content
    assert json.loads(done.content) == {
        "output": "before\n",
        "result": [5, 3, "deleted a", "deleted b"],
    }
    assert made(fake, "delete_object") == [{"name": "a"}, {"name": "b"}]
    audit = done.audit["nested_calls"]
    assert sorted(e["arguments"]["name"] for e in audit) == ["a", "b"]
    assert {(e["decision"], e["decided_by"], e["wait_ms"]) for e in audit} == {
        ("approved", "alice", 1500.0)
    }
    stamped = [e for e in seen if e.tool == "delete_object"]
    assert stamped
    assert all(e.decision == "approved" for e in stamped)
    assert (await run(scope, "x + 1")).content == "6"


async def test_a_denied_call_raises_permission_error_and_is_never_made(make_executor, fake):
    """Denied: the snippet sees PermissionError("denied by NICK: reason"); no call is made."""
    executor = make_executor(fake, Gate())
    out = await run(executor.thread_scope(ThreadKey("#t", "t")), 'await delete_object(name="a")')
    assert out.pause is not None
    done = await executor.resume(ThreadKey("#t", "t"), out.pause, deny(out.pause))
    assert done.is_error
    assert done.pause is None
    assert "PermissionError: denied by bob: not today" in done.content
    assert fake.calls == []
    assert done.audit["nested_calls"] == []
    (refused,) = done.audit["denied_calls"]
    assert (refused["tool"], refused["decision"], refused["decided_by"]) == (
        "delete_object",
        "denied",
        "bob",
    )


async def test_a_snippet_that_catches_the_denial_continues(make_executor, fake):
    """An expired request raises the caller's wording; the snippet catches it and goes on."""
    executor = make_executor(fake, Gate())
    out = await run(
        executor.thread_scope(ThreadKey("#t", "t")),
        'try:\n    r = await delete_object(name="a")\nexcept PermissionError as e:\n'
        "    r = str(e)\n"
        "[r, len(await list_items())]",
    )
    assert out.pause is not None
    (call,) = out.pause.calls
    expired = Decision(False, "expiry", "the request expired after 600 s", 600_000.0, "expired")
    done = await executor.resume(ThreadKey("#t", "t"), out.pause, {call.call_id: expired})
    assert not done.is_error, done.content
    assert json.loads(done.content) == ["denied: the request expired after 600 s", 3]
    assert fake.calls == [("list_items", {})]


async def test_resume_after_a_restart_needs_only_the_snapshot(make_executor, fake):
    """The executor and its pool are gone; a new executor on a new pool resumes the pause."""
    first = make_executor(fake, Gate())
    out = await run(
        first.thread_scope(ThreadKey("#t", "t")), 'x = 5\nr = await delete_object(name="a")\n[x, r]'
    )
    assert out.pause is not None
    await first.aclose()
    pause = Pause(
        out.pause.calls, bytes(out.pause.snapshot or b""), json.loads(json.dumps(out.pause.state))
    )

    pool = create_pool(CodeModeLimits(max_scopes=1))
    await pool.__aenter__()
    try:
        second = make_executor(fake, Gate(), pool=pool)
        done = await second.resume(ThreadKey("#t", "t"), pause, approve(pause))
        assert json.loads(done.content) == [5, "deleted a"], done.content
        assert made(fake, "delete_object") == [{"name": "a"}]
        await second.aclose()
    finally:
        await close_pool(pool)


async def test_a_snippet_can_pause_twice(make_executor, fake):
    """A later mutating call pauses the resumed snippet again; prints from both parts are kept."""
    executor = make_executor(fake, Gate())
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        'print("one")\na = await delete_object(name="a")\n'
        'print("two")\nb = await create_object(name="b")\n[a, b]',
    )
    assert out.pause is not None
    assert out.pause.calls[0].tool == "delete_object"
    again = await executor.resume(ThreadKey("#t", "t"), out.pause, approve(out.pause))
    assert again.pause is not None, again.content
    assert again.pause.calls[0].tool == "create_object"
    assert made(fake, "create_object") == []
    done = await executor.resume(
        ThreadKey("#t", "t"), again.pause, approve(again.pause, by="carol")
    )
    assert json.loads(done.content) == {
        "output": "one\ntwo\n",
        "result": ["deleted a", "created b"],
    }
    assert [e["decided_by"] for e in done.audit["nested_calls"]] == ["carol"]


async def test_a_held_call_without_a_decision_pauses_again(make_executor, fake):
    """Deciding one of two held calls runs it; the snippet pauses again before the other."""
    executor = make_executor(fake, Gate())
    out = await run(
        executor.thread_scope(ThreadKey("#t", "t")),
        'await asyncio.gather(delete_object(name="a"), delete_object(name="b"))',
    )
    assert out.pause is not None
    first, second = out.pause.calls
    again = await executor.resume(
        ThreadKey("#t", "t"), out.pause, {first.call_id: Decision(True, "alice")}
    )
    assert again.pause is not None, again.content
    assert [c.call_id for c in again.pause.calls] == [second.call_id]
    assert made(fake, "delete_object") == [{"name": "a"}]
    done = await executor.resume(ThreadKey("#t", "t"), again.pause, approve(again.pause))
    assert json.loads(done.content) == ["deleted a", "deleted b"]


async def test_a_run_while_paused_gets_a_fresh_repl_and_the_resume_still_works(make_executor, fake):
    """A stray run_code on the paused thread works on a fresh checkout; resume replaces it."""
    executor = make_executor(fake, Gate())
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    out = await run(scope, 'x = 5\nawait delete_object(name="a")\nx')
    assert out.pause is not None
    stray = await run(scope, "1 + 1")
    assert stray.content == "2"
    assert stray.pause is None
    done = await executor.resume(ThreadKey("#t", "t"), out.pause, approve(out.pause))
    assert done.content == "5"
    assert (await run(scope, "x")).content == "5"


async def test_the_private_scope_pauses_and_resumes(make_executor, fake):
    """Unscoped calls pause too, and resume with thread id None."""
    executor = make_executor(fake, Gate())
    out = await run(executor, 'await delete_object(name="a")')
    assert out.pause is not None
    done = await executor.resume(None, out.pause, approve(out.pause))
    assert done.content == "deleted a"


async def test_without_a_gate_mutating_calls_run_as_before(make_executor, fake):
    """gate=None: nothing pauses, nothing is asked."""
    executor = make_executor(fake)
    out = await run(executor.thread_scope(ThreadKey("#t", "t")), 'await delete_object(name="a")')
    assert (out.content, out.pause, out.is_error) == ("deleted a", None, False)
    assert "denied_calls" not in out.audit


async def test_a_gate_deny_raises_permission_error_at_once(make_executor, fake):
    """The policy denies: PermissionError with its reason, no pause, no call; reads still run."""
    gate = Gate("deny", "[approvals] deny matches *.delete_object")
    executor = make_executor(fake, gate)
    out = await run(
        executor.thread_scope(ThreadKey("#t", "t")),
        'listed = await list_items()\nawait delete_object(name="a")',
    )
    assert out.pause is None
    assert out.is_error
    assert "PermissionError: [approvals] deny matches *.delete_object" in out.content
    assert fake.calls == [("list_items", {})]
    assert gate.seen == [("delete_object", {"name": "a"})]
    assert out.audit["denied_calls"][0]["decided_by"] == "policy"


async def test_a_failing_gate_denies_the_call(make_executor, fake):
    """A gate that raises fails closed: the call is refused, the snippet sees PermissionError."""

    def broken(definition: ToolDefinition, arguments: dict[str, Any]) -> Verdict:
        raise KeyError("policy bug")

    executor = make_executor(fake, broken)
    out = await run(executor.thread_scope(ThreadKey("#t", "t")), 'await delete_object(name="a")')
    assert out.is_error
    assert "PermissionError: the approval check failed" in out.content
    assert fake.calls == []


async def test_a_call_never_awaited_is_never_judged(make_executor, fake):
    """The gate is asked as the sandbox awaits a call, so an un-awaited call is never judged."""
    gate = Gate()
    executor = make_executor(fake, gate)
    out = await run(executor.thread_scope(ThreadKey("#t", "t")), 'c = delete_object(name="a")\n1')
    assert out.is_error
    assert "await" in out.content
    assert gate.seen == []
    assert out.pause is None


# -- the pure parts --------------------------------------------------------


def _catalog() -> Catalog:
    return Catalog(
        [
            ToolDefinition("delete_object", "Delete.", {"type": "object"}, server="kcp"),
            ToolDefinition("list_items", "List.", {"type": "object"}, read_only=True),
        ]
    )


def test_pause_state_round_trips_and_a_vanished_tool_is_reported():
    """The state is JSON and reads back; a held call of a tool no longer offered is named."""
    from daemon.code_mode.sandbox.approval import MadeCall

    catalog = _catalog()
    entry = catalog.lookup("delete_object")
    assert entry is not None
    state = pause_state(
        code="x",
        prints="p",
        pending={4: MadeCall(entry, "delete_object", {"name": "z"})},
        held={1: MadeCall(entry, "delete_object", {"name": "a"}, "why")},
        suspensions=7,
        nested_calls=2,
    )
    back = restore_state(json.loads(json.dumps(state)), catalog)
    assert (back.code, back.prints, back.suspensions, back.nested_calls) == ("x", "p", 7, 2)
    assert back.held[1].pending(1) == PendingCall(
        1, "delete_object", "kcp", {"name": "a"}, "why", "delete_object"
    )
    assert back.pending[4].arguments == {"name": "z"}
    smaller = Catalog([ToolDefinition("list_items", "List.", {"type": "object"})])
    assert restore_state(state, smaller).gone == {1: "delete_object"}


@pytest.mark.parametrize(
    "state", [{}, {"version": 99}, {"version": 1, "held": "x"}, {"version": 1, "held": [{}]}]
)
def test_a_damaged_pause_state_is_a_clear_error(state):
    """Another version or a malformed call is PauseStateError, not a crash."""
    with pytest.raises(PauseStateError):
        restore_state(state, _catalog())


def test_denial_messages_come_from_the_decision():
    """The caller words the denial through ``by``, ``reason`` and ``kind``."""
    assert denial_message(Decision(False, "bob", "no", kind="denied")) == "denied by bob: no"
    assert denial_message(Decision(False, "bob", kind="denied")) == "denied by bob"
    expired = Decision(False, "expiry", "the request expired after 60 s", kind="expired")
    assert denial_message(expired) == "denied: the request expired after 60 s"


def test_the_paused_text_names_each_call():
    """The model-facing text lists the calls with their arguments."""
    text = render_paused((PendingCall(0, "delete", "kcp", {"name": "a"}, "destructive", "delete"),))
    assert 'delete(name="a")' in text
    assert "waiting for approval" in text


class Servers(FakeToolExecutor):
    """Several servers behind one executor, routed as the MCP executor routes: a tool name
    belongs to the first server (in order) that is up and declares it."""

    def __init__(self, servers: dict[str, FakeToolExecutor], up: set[str]):
        super().__init__()
        self.servers, self.up = servers, up

    def _owner(self, name: str) -> FakeToolExecutor | None:
        return next((s for n, s in self.servers.items() if n in self.up and name in s.tools), None)

    def definitions(self) -> list[ToolDefinition]:
        """Each name once, its owner's definition."""
        names = {n for s in self.servers.values() for n in s.tools}
        owners = {n: self._owner(n) for n in names}
        return [o.tools[n].definition for n, o in owners.items() if o is not None]

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """The owner's answer."""
        owner = self._owner(name)
        assert owner is not None
        return await owner.call_tool(name, arguments)


def two_servers() -> dict[str, FakeToolExecutor]:
    """staging and prod, each with a delete_object of its own."""
    servers = {}
    for server in ("staging", "prod"):
        fake = FakeToolExecutor()

        @fake.tool(server=server, destructive=True)
        async def delete_object(*, name: str) -> str:
            """Delete one object."""
            return f"deleted {name}"

        servers[server] = fake
    return servers


async def test_an_approved_call_whose_name_now_reaches_another_server_is_not_made(
    make_executor,
):
    """Paused while staging owned delete_object; after a restart staging is down and prod
    owns the name. Approving the request (which showed staging.delete_object) calls
    neither server: the snippet gets a PermissionError that says why, the audit says refused."""
    servers = two_servers()
    before = make_executor(Servers(servers, {"staging", "prod"}), Gate())
    out = await run(
        before.thread_scope(ThreadKey("#t", "t")), 'await delete_object(name="bucket-1")'
    )
    assert out.pause is not None, out.content
    assert [(c.server, c.tool) for c in out.pause.calls] == [("staging", "delete_object")]

    after = make_executor(Servers(servers, {"prod"}), Gate())  # the restart: staging failed
    done = await after.resume(ThreadKey("#t", "t"), out.pause, approve(out.pause))
    assert servers["prod"].calls == []
    assert servers["staging"].calls == []
    assert done.is_error
    assert (
        "PermissionError: the approved call was not made: staging.delete_object was approved, "
        "but delete_object() now reaches prod.delete_object"
    ) in done.content
    (refused,) = done.audit["denied_calls"]
    assert (refused["tool"], refused["decision"], refused["decided_by"]) == (
        "delete_object",
        "denied",
        "resume check",
    )


async def test_an_approved_call_with_arguments_other_than_those_shown_is_not_made(
    make_executor, fake
):
    """The request's arguments are what was approved: a pause whose stored call differs
    from them (a damaged or altered row) resumes without making the call."""
    executor = make_executor(fake, Gate())
    out = await run(executor.thread_scope(ThreadKey("#t", "t")), 'await delete_object(name="a")')
    assert out.pause is not None
    (call,) = out.pause.calls
    shown = Pause(
        calls=(replace(call, arguments={"name": "b"}),),
        snapshot=out.pause.snapshot,
        state=out.pause.state,
    )
    done = await executor.resume(ThreadKey("#t", "t"), shown, approve(shown))
    assert fake.calls == []
    assert "the approved call was not made: its arguments are not the ones approved" in (
        done.content
    )


TEST_SERVER = str(Path(__file__).parent / "fakes" / "mcp_test_server.py")


async def test_on_real_servers_an_approval_never_reaches_the_server_that_took_the_name(
    make_executor, tmp_path
):
    """Two stdio MCP servers declare delete_object; staging (first) owns the name when the
    run pauses. After a restart staging fails at start and prod owns it. Approving the
    request, which showed staging.delete_object, makes no call on either server."""
    calls, staging_up = tmp_path / "calls.log", tmp_path / "staging-up"
    staging_up.touch()

    def servers() -> McpToolExecutor:
        def entry(label: str, *extra: str) -> dict[str, Any]:
            args = [TEST_SERVER, "--label", label, "--also", "delete_object", *extra]
            return {"command": sys.executable, "args": [*args, "--log-calls", str(calls)]}

        return McpToolExecutor(
            {"staging": entry("staging", "--require-file", str(staging_up)), "prod": entry("prod")}
        )

    key = ThreadKey("#t", "t")
    before = make_executor(servers(), Gate())
    out = await run(before.thread_scope(key), 'await delete_object(name="bucket-1")')
    assert out.pause is not None, out.content
    assert [(c.server, c.tool) for c in out.pause.calls] == [("staging", "delete_object")]
    await before.aclose()

    staging_up.unlink()  # the restart: staging fails at start, prod takes the name
    after = make_executor(servers(), Gate())
    await after.start()
    assert after.catalog is not None
    entry = after.catalog.lookup("delete_object")
    assert entry is not None
    assert entry.definition.server == "prod"
    done = await after.resume(key, out.pause, approve(out.pause))
    assert "now reaches prod.delete_object" in done.content
    assert done.audit["nested_calls"] == []
    assert not calls.exists()  # neither server was called
