"""A channel's tools (issue 29 §"A missing tool is not there"): the view of the daemon's
one executor that offers only what the channel's policy sees.

A tool the channel may not use is not there: not in the view's definitions (so
not in code mode's stubs, ``search_tools`` or ``describe``), a direct call of it
is refused with the unknown tool's error, and a snippet that reaches for it by
any form of the indirect-call corpus (tests/test_code_mode_indirect.py) gets a
``NameError`` and makes no call, on the snapshot engine and on Monty's direct
host-call path alike. Where the call leaves the sandbox
(:class:`~daemon.code_mode.sandbox.NestedCalls`), the view is asked again: a
catalog that still showed the tool (a function kept from before) grants nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from fnmatch import fnmatchcase

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.approvals import ApprovalPolicy, Decision
from daemon.code_mode import CodeModeToolExecutor
from daemon.code_mode.catalog import Catalog
from daemon.lanes import ChannelTools, channel_tools
from daemon.tools import (
    BaseToolExecutor,
    CallSlots,
    OffersTools,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
)
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.scope_store import MemoryScopeStore
from tests.test_code_mode_indirect import FORMS, LIMITS, Form

HELP = ThreadKey("#help", "t")


@pytest.fixture
def fake() -> FakeToolExecutor:
    """``kcp.append_line`` (mutating) and ``simple.read_lines`` (read-only)."""
    fake = FakeToolExecutor()

    @fake.tool(server="kcp")
    async def append_line(*, line: str) -> str:
        """Append one line to the log."""
        return f"appended {line}"

    @fake.tool(read_only=True, server="simple")
    async def read_lines() -> list:
        """The log's lines."""
        return ["a", "b"]

    @fake.tool(server="simple")
    async def delete_line(*, n: int) -> str:
        """Delete a line of the log."""
        return "deleted"

    return fake


def help_sees(server: str, tool: str) -> bool:
    """#help's policy: ``servers = ["simple"]``, ``tools_deny = ["*.delete_*"]``."""
    return server == "simple" and not fnmatchcase(f"{server}.{tool}", "*.delete_*")


def help_view(tmp_path, fake: FakeToolExecutor) -> ChannelTools:
    """#help's view: the simple server only, without its delete_* tools."""
    return channel_tools(fake, help_sees)


@pytest.fixture
async def executors() -> AsyncIterator[list[CodeModeToolExecutor]]:
    """Executors made in a test, closed after it."""
    made: list[CodeModeToolExecutor] = []
    yield made
    for ex in made:
        await ex.aclose()


async def test_the_view_offers_exactly_what_the_policy_sees(tmp_path, fake):
    """The definitions are the executor's, filtered by the policy, in their order; a call of
    a tool the channel does not see is the unknown tool's error naming only the channel's
    tools, and never reaches the executor."""
    view = help_view(tmp_path, fake)
    await view.start()
    assert [d.qualified_name for d in view.definitions()] == ["simple.read_lines"]
    assert isinstance(view, OffersTools)
    assert view.offers("read_lines")
    assert not view.offers("append_line")
    out = await view.call_tool("append_line", {"line": "x"})
    assert out.is_error
    assert "unknown tool 'append_line'" in out.content
    assert "delete_line" not in out.content
    assert "read_lines" in out.content
    assert fake.calls_to("append_line") == []
    assert not (await view.call_tool("read_lines", {})).is_error
    # a channel without a section sees every tool
    everything = channel_tools(fake, lambda _server, _tool: True)
    assert [d.name for d in everything.definitions()] == [
        "append_line",
        "read_lines",
        "delete_line",
    ]
    assert not isinstance(view, CallSlots)  # the fake has no slots: neither has its view


async def test_closing_a_view_leaves_the_shared_executor_running(tmp_path, fake):
    """The servers start once per daemon: a channel's executor closing (its code mode's
    pool, at shutdown) does not close the executor every channel shares."""
    view = help_view(tmp_path, fake)
    await view.start()
    await view.aclose()
    assert not (await fake.call_tool("read_lines", {})).is_error
    assert not (await view.call_tool("read_lines", {})).is_error


async def test_stubs_search_and_describe_leave_the_missing_tools_out(
    tmp_path, fake, executors, monty_pool
):
    """run_code's description, search_tools and describe know only the channel's tools."""
    executor = CodeModeToolExecutor(help_view(tmp_path, fake), LIMITS, pool=monty_pool)
    executors.append(executor)
    await executor.start()
    (definition,) = executor.definitions()
    assert "read_lines" in definition.description
    assert "append_line" not in definition.description
    assert "delete_line" not in definition.description
    scope = executor.thread_scope(HELP)
    out = await scope.call_tool(
        "run_code",
        {"code": 'print(search_tools("line"))\nprint(describe("append_line"))\n1'},
    )
    assert "read_lines" in out.content
    assert "append_line(" not in out.content
    assert "delete_line" not in out.content


async def run_in_help(executor: CodeModeToolExecutor, form: Form):
    """The form's snippets in one #help thread; the last result."""
    scope = executor.thread_scope(HELP)
    *before, last = form.runs
    for code in before:
        await scope.call_tool("run_code", {"code": code})
    return await scope.call_tool("run_code", {"code": last})


def error_type(content: str) -> str:
    """The exception type a failed snippet's result ends with (``NameError``, ``KeyError``)."""
    return content.rstrip().splitlines()[-1].split(":")[0]


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
async def test_no_call_form_reaches_a_tool_the_channel_does_not_see(
    tmp_path, fake, executors, monty_pool, form
):
    """Every form of the indirect-call corpus, in a channel without the kcp server: no call
    of append_line reaches the executor, and the snippet fails exactly as it does for a
    tool that exists nowhere (NameError for the name, KeyError for locals()[...])."""
    executor = CodeModeToolExecutor(help_view(tmp_path, fake), LIMITS, pool=monty_pool)
    executors.append(executor)
    out = await run_in_help(executor, form)
    assert fake.calls_to("append_line") == []
    assert out.is_error, out.content
    # the same form, for a name no server has, in a channel that sees everything (where
    # the name is written whole; a name built at run time or found fails on its own terms)
    nowhere = Form(form.name, tuple(c.replace("append_line", "nosuch_line") for c in form.runs))
    everything = CodeModeToolExecutor(fake, LIMITS, pool=monty_pool)
    executors.append(everything)
    missing = await everything.thread_scope(HELP).call_tool("run_code", {"code": nowhere.runs[-1]})
    if len(form.runs) == 1 and "append_line" in form.runs[0]:
        assert error_type(out.content) == error_type(missing.content), (out, missing)


@pytest.mark.parametrize("form", [f for f in FORMS if not f.source_refused], ids=lambda f: f.name)
async def test_forced_onto_the_direct_path_no_form_reaches_it_either(
    tmp_path, fake, executors, monty_pool, form, monkeypatch
):
    """The path grants nothing: with every snippet sent down Monty's direct host-call path,
    no form's call reaches append_line."""
    monkeypatch.setattr("daemon.code_mode.executor.eligible", lambda *_: True)
    executor = CodeModeToolExecutor(help_view(tmp_path, fake), LIMITS, pool=monty_pool)
    executors.append(executor)
    out = await run_in_help(executor, form)
    assert fake.calls_to("append_line") == []
    assert out.is_error, out.content


class StaleView(ChannelTools):
    """A view whose catalog still lists append_line, though the channel no longer offers it
    (what a function kept from before the policy changed would reach)."""

    def definitions(self) -> list[ToolDefinition]:
        return self._inner.definitions()


@pytest.mark.parametrize("direct", [False, True], ids=["engine", "direct path"])
@pytest.mark.parametrize(
    "code",
    [
        'await append_line(line="x")',
        'f = append_line\nawait f(line="x")',
        'await locals()["append_line"](line="x")',
        'await eval("append_" + "line")(line="x")',
    ],
)
async def test_where_the_call_leaves_the_sandbox_the_view_is_asked_again(
    fake, executors, monty_pool, monkeypatch, code, direct
):
    """The catalog is not the only guard: a call of a tool the view does not offer, reached
    through a stale catalog, is a NameError where it leaves the sandbox, before the gate,
    the audit or the executor see it."""
    if direct:
        monkeypatch.setattr("daemon.code_mode.executor.eligible", lambda *_: True)
    seen = []
    view = StaleView(fake, lambda d: d.server == "simple")
    executor = CodeModeToolExecutor(
        view, LIMITS, pool=monty_pool, observer=lambda _t, entry: seen.append(entry)
    )
    executors.append(executor)
    out = await executor.thread_scope(HELP).call_tool("run_code", {"code": code})
    assert out.is_error
    assert "NameError: name 'append_line' is not defined" in out.content, out.content
    assert fake.calls_to("append_line") == []
    assert [e for e in seen if e.tool == "append_line"] == []


class Listed(BaseToolExecutor):
    """An executor that only lists tools (the properties below call nothing)."""

    def __init__(self, definitions: list[ToolDefinition]):
        self._definitions = definitions

    def definitions(self) -> list[ToolDefinition]:
        return list(self._definitions)

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        raise AssertionError("not called")


SERVERS = ["kcp", "simple", "git"]
# tool names are unique across servers: the MCP executor routes by name
listings = st.lists(
    st.tuples(st.sampled_from(SERVERS), st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
    max_size=12,
    unique_by=lambda pair: pair[1],
)


@given(listed=listings, seen=st.data())
def test_a_channels_view_and_catalog_are_the_executors_tools_filtered(listed, seen):
    """Over any tool list and any policy (a random set of visible server.tool names): the
    view lists exactly the visible tools in the executor's order, offers exactly those,
    and code mode's catalog over it (stubs, search_tools, describe) holds exactly them."""
    visible = set(seen.draw(st.lists(st.sampled_from(listed), unique=True))) if listed else set()
    definitions = [
        ToolDefinition(name, f"{server} {name}", {"type": "object"}, server=server)
        for server, name in listed
    ]
    view = channel_tools(Listed(definitions), lambda server, tool: (server, tool) in visible)
    expected = [d for d in definitions if (d.server, d.name) in visible]
    assert view.definitions() == expected
    assert {d.name for d in definitions if view.offers(d.name)} == {d.name for d in expected}
    catalog = Catalog(view.definitions())
    assert [e.definition for e in catalog.entries.values()] == expected


async def test_a_function_kept_in_a_stored_repl_cannot_reach_a_tool_the_channel_lost(
    fake, executors, monty_pool
):
    """The channel saw kcp.append_line when a snippet kept a function calling it; after a
    restart under a policy without kcp, the stored REPL comes back and calling the function
    is a NameError for the tool's host function: no call is made."""
    store = MemoryScopeStore()
    before = CodeModeToolExecutor(
        channel_tools(fake, lambda _s, _t: True), LIMITS, pool=monty_pool, scopes=store
    )
    executors.append(before)
    define = "async def later():\n    return await append_line(line='x')\n1"
    out = await before.thread_scope(HELP).call_tool("run_code", {"code": define})
    assert out.content == "1"
    await before.checkpoint_all()
    after = CodeModeToolExecutor(
        channel_tools(fake, help_sees), LIMITS, pool=monty_pool, scopes=store
    )
    executors.append(after)
    out = await after.thread_scope(HELP).call_tool("run_code", {"code": "await later()"})
    assert "NameError" in out.content, out.content
    assert fake.calls_to("append_line") == []


async def test_an_approved_call_is_not_made_once_the_channel_no_longer_offers_it(
    fake, executors, monty_pool
):
    """A call paused for approval while the channel offered kcp.append_line, approved after a
    restart under a policy without kcp: the call is not made, and the snippet reads why."""
    asking = CodeModeToolExecutor(
        channel_tools(fake, lambda _s, _t: True),
        LIMITS,
        pool=monty_pool,
        gate=ApprovalPolicy(mode="ask").verdict,
    )
    executors.append(asking)
    code = 'r = await append_line(line="x")\nr'
    paused = await asking.thread_scope(HELP).call_tool("run_code", {"code": code})
    assert paused.pause is not None, paused.content
    after = CodeModeToolExecutor(channel_tools(fake, help_sees), LIMITS, pool=monty_pool)
    executors.append(after)
    await after.start()
    (pending,) = paused.pause.calls
    out = await after.resume(HELP, paused.pause, {pending.call_id: Decision(True, "alice")})
    assert "append_line() is no longer offered, so the call was not made" in out.content
    assert fake.calls_to("append_line") == []
