"""The approval gate holds however a snippet reaches a tool (issue 26 §1).

A corpus of indirect calls of one mutating tool, ``append_line``: an alias, a
container of functions, a closure, a function passed along or kept from an
earlier ``run_code``, a name built at run time, the scope's own wrappers.
Each runs on the real shared Monty pool under the real ``[approvals]``
policy, over an in-memory executor that records every call that reaches it:

- under ``mode = "deny"`` the snippet gets a ``PermissionError``, no call is
  made, and the audit (the result's and the observer's) says refused;
- under ``mode = "ask"`` the run pauses with the call as the request lists
  it, and no call is made.

A form that names a private ``_asyncai_`` name is refused before it runs.
Before this issue, the wrappers dict and every form that took Monty's direct
host-call path (``locals()[...]``, ``eval``) made the call under ``deny``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

import pytest

from daemon.approvals import ApprovalPolicy
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.tools import AuditEntry, ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.scope_store import MemoryScopeStore

# catalog_budget=1: the catalog is searchable, so search_tools/describe exist
LIMITS = CodeModeLimits(max_feed_duration=2.0, max_wall=20.0, tool_timeout=10.0, catalog_budget=1)


@dataclass(frozen=True)
class Form:
    """One indirect call: ``runs`` are run_code calls in one thread; the last makes the call."""

    name: str
    runs: tuple[str, ...]
    source_refused: bool = False  # names a private name: rejected before it runs


CALL = '(line="x")'
FORMS = [
    Form("direct call", (f"await append_line{CALL}",)),
    Form("alias", (f"f = append_line\nawait f{CALL}",)),
    Form("dict of functions", (f'd = {{"a": append_line}}\nawait d["a"]{CALL}',)),
    Form("list of functions", (f"fs = [read_lines, append_line]\nawait fs[1]{CALL}",)),
    Form("lambda", ('g = lambda s: append_line(line=s)\nawait g("x")',)),
    Form(
        "closure",
        (
            "def make():\n    async def inner(s):\n        return await append_line(line=s)\n"
            '    return inner\nh = make()\nawait h("x")',
        ),
    ),
    Form(
        "function passed to a function",
        (
            "async def call_it(fn, s):\n    return await fn(line=s)\n"
            'await call_it(append_line, "x")',
        ),
    ),
    Form("comprehension", (f"fs = [f for f in (append_line,)]\nawait fs[0]{CALL}",)),
    Form("gather over aliases", (f"a = append_line\nawait asyncio.gather(a{CALL}, read_lines())",)),
    Form("kept from an earlier run_code", ("keep = append_line\n1", f"await keep{CALL}")),
    Form(
        "the scope's wrappers dict",
        (f'await _asyncai_wrappers["append_line"]{CALL}',),
        source_refused=True,
    ),
    Form("locals() lookup", (f'await locals()["append_line"]{CALL}',)),
    Form("eval of a built name", (f'await eval("append_" + "line"){CALL}',)),
    Form(
        "eval of the private host name, built",
        (f'await eval("_async" + "ai_tool_append_line"){CALL}',),
    ),
    Form(
        "the wrappers dict through locals()",
        (f'await locals()["_async" + "ai_wrappers"]["append_line"]{CALL}',),
    ),
    Form(
        "default argument",
        (f"async def go(fn=append_line):\n    return await fn{CALL}\nawait go()",),
    ),
    Form(
        "dispatch table",
        (
            'table = {"write": append_line, "read": read_lines}\n'
            f'op = "write"\nawait table[op]{CALL}',
        ),
    ),
    Form("tuple unpack", (f"r, w = read_lines, append_line\nawait w{CALL}",)),
    Form("conditional expression", (f"fn = append_line if 1 else read_lines\nawait fn{CALL}",)),
    Form("walrus", (f"await (w := append_line){CALL}",)),
    Form(
        "*args forwarding",
        (
            "async def fwd(fn, *args, **kw):\n    return await fn(*args, **kw)\n"
            'await fwd(append_line, line="x")',
        ),
    ),
    Form(
        "decorator-like wrapper",
        (
            "def logged(fn):\n    async def wrapped(**kw):\n        return await fn(**kw)\n"
            f"    return wrapped\nw = logged(append_line)\nawait w{CALL}",
        ),
    ),
    Form("a helper digs it out", (f'await dig({{"f": append_line}}, "f"){CALL}',)),
    Form(
        "a name found with search_tools",
        (f'name = search_tools("append line")[0].split(":")[0]\nawait locals()[name]{CALL}',),
    ),
    Form(
        "a name found with describe",
        (f'name = describe("append_line").split("(")[0].split()[-1]\nawait eval(name){CALL}',),
    ),
]


@pytest.fixture
def fake() -> FakeToolExecutor:
    """One mutating tool (unannotated) and one read-only tool."""
    fake = FakeToolExecutor()

    @fake.tool()
    async def append_line(*, line: str) -> str:
        """Append one line to the log."""
        return f"appended {line}"

    @fake.tool(read_only=True)
    async def read_lines() -> list:
        """The log's lines."""
        return ["a", "b"]

    return fake


@pytest.fixture
async def executors(monty_pool) -> AsyncIterator[list[CodeModeToolExecutor]]:
    """Executors made in a test, closed after it."""
    made: list[CodeModeToolExecutor] = []
    yield made
    for ex in made:
        await ex.aclose()


async def run_form(
    executors: list[CodeModeToolExecutor],
    monty_pool,
    fake: FakeToolExecutor,
    form: Form,
    mode: Literal["deny", "ask"],
) -> tuple[ToolCallOutput, list[AuditEntry]]:
    """Run the form's snippets in one thread under ``[approvals] mode``; the last result and
    every entry the audit observer saw."""
    seen: list[AuditEntry] = []
    policy = ApprovalPolicy(mode=mode)
    executor = CodeModeToolExecutor(
        fake,
        LIMITS,
        pool=monty_pool,
        gate=policy.verdict,
        observer=lambda _thread, entry: seen.append(entry),
    )
    executors.append(executor)
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    *before, last = form.runs
    for code in before:
        out = await scope.call_tool("run_code", {"code": code})
        assert not out.is_error, out.content
        assert out.pause is None
    return await scope.call_tool("run_code", {"code": last}), seen


def appended(fake: FakeToolExecutor) -> list[dict]:
    """Calls of append_line that reached the inner executor."""
    return fake.calls_to("append_line")


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
async def test_under_deny_an_indirect_call_is_refused_and_audited(
    executors, monty_pool, fake, form
):
    """[approvals] mode = "deny": a PermissionError in the snippet, no call made, and an audit
    row that says refused (decision denied, by the policy); nothing audited as made."""
    out, seen = await run_form(executors, monty_pool, fake, form, "deny")
    assert appended(fake) == []
    assert out.is_error, out.content
    assert out.pause is None
    mine = [e for e in seen if e.tool == "append_line"]
    if form.source_refused:
        assert "names starting with '_asyncai_' are reserved for asyncai" in out.content
        assert mine == []
        return
    assert "PermissionError" in out.content, out.content
    assert "refuses such calls" in out.content
    assert [(e.decision, e.decided_by, e.outcome) for e in mine] == [("denied", "policy", "error")]
    refused = out.audit["denied_calls"]
    assert [(r["tool"], r["arguments"], r["decided_by"]) for r in refused] == [
        ("append_line", {"line": "x"}, "policy")
    ]
    assert [e["tool"] for e in out.audit["nested_calls"]] in ([], ["read_lines"])


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
async def test_under_ask_an_indirect_call_pauses_for_a_person(executors, monty_pool, fake, form):
    """[approvals] mode = "ask": the run pauses with the pending call (the request's); no call
    is made and nothing is audited for it."""
    out, seen = await run_form(executors, monty_pool, fake, form, "ask")
    assert appended(fake) == []
    assert [e for e in seen if e.tool == "append_line"] == []
    if form.source_refused:
        assert out.is_error
        assert out.pause is None
        assert "names starting with '_asyncai_' are reserved for asyncai" in out.content
        return
    assert out.pause is not None, out.content
    assert [(c.tool, c.arguments) for c in out.pause.calls] == [("append_line", {"line": "x"})]


async def test_a_call_the_gate_would_hold_on_the_direct_path_is_refused_not_made(
    executors, monty_pool, fake
):
    """The direct path cannot pause: a stored REPL's function, defined before approvals were
    on, stays on it after the restart; its call is refused there (fail closed), audited."""
    store = MemoryScopeStore()
    before = CodeModeToolExecutor(fake, LIMITS, pool=monty_pool, scopes=store)
    executors.append(before)
    define = "async def later():\n    return await append_line(line='x')\n1"
    assert (
        await before.thread_scope(ThreadKey("#t", "t")).call_tool("run_code", {"code": define})
    ).content == "1"
    await before.checkpoint_all()

    seen: list[AuditEntry] = []
    after = CodeModeToolExecutor(  # a restart with [approvals] mode = "ask"
        fake,
        LIMITS,
        pool=monty_pool,
        scopes=store,
        gate=ApprovalPolicy(mode="ask").verdict,
        observer=lambda _thread, entry: seen.append(entry),
    )
    executors.append(after)
    out = await after.thread_scope(ThreadKey("#t", "t")).call_tool(
        "run_code", {"code": "await later()"}
    )
    assert appended(fake) == []
    assert out.is_error
    assert out.pause is None
    assert "PermissionError: append_line needs a person's approval" in out.content
    assert [(e.tool, e.decision, e.decided_by) for e in seen] == [
        ("append_line", "denied", "policy")
    ]
    # the scope left the direct path: run again, the call waits for a person
    again = await after.thread_scope(ThreadKey("#t", "t")).call_tool(
        "run_code", {"code": "await later()"}
    )
    assert again.pause is not None, again.content
    assert [(c.tool, c.arguments) for c in again.pause.calls] == [("append_line", {"line": "x"})]
    assert appended(fake) == []


@pytest.mark.parametrize("mode", ["deny", "ask"])
@pytest.mark.parametrize("form", [f for f in FORMS if not f.source_refused], ids=lambda f: f.name)
async def test_forced_onto_the_direct_path_every_form_is_refused_at_the_call(
    executors, monty_pool, fake, form, mode, monkeypatch
):
    """The choice of path grants nothing: with every snippet sent down Monty's direct
    host-call path (as if the static check said yes to all), each form's call still asks
    the gate where it is made. deny and ask (which that path cannot hold) both refuse it:
    a PermissionError, no call, an audit row that says refused, no pause."""
    monkeypatch.setattr("daemon.code_mode.executor.eligible", lambda *_: True)
    out, seen = await run_form(executors, monty_pool, fake, form, mode)
    assert appended(fake) == []
    assert out.pause is None
    assert out.is_error
    assert "PermissionError" in out.content, out.content
    mine = [(e.tool, e.decision, e.decided_by) for e in seen if e.tool == "append_line"]
    assert mine == [("append_line", "denied", "policy")]
