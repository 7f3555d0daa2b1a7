"""Issue 3 through the real executor: helpers, preamble, reserved names, hints, note, description.

A real Monty pool (the session's ``monty_pool``) under ``CodeModeToolExecutor``,
with an in-memory inner executor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.repl.note import reset_note
from daemon.tools import ThreadKey, ToolCallOutput, ToolExecutor
from tests.fakes.executor import FakeToolExecutor

TEST_LIMITS = {"max_feed_duration": 2.0, "max_wall": 20.0, "tool_timeout": 10.0}

MakeExecutor = Callable[..., CodeModeToolExecutor]


@pytest.fixture
def fake() -> FakeToolExecutor:
    """A kcp-like list tool and a mutating tool."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_objects(*, workspace: str, resource: str, namespace: str | None = None) -> dict:
        """List objects of one resource type."""
        phases = ["Running", "Pending", "Running", "Failed"]
        return {
            "kind": "List",
            "items": [
                {
                    "metadata": {"name": f"{resource}-{i}", "namespace": namespace or "default"},
                    "status": {"phase": phase},
                }
                for i, phase in enumerate(phases)
            ],
        }

    @fake.tool()
    async def delete_object(*, name: str) -> str:
        """Delete one object."""
        return f"deleted {name}"

    return fake


@pytest.fixture
async def make_executor(monty_pool) -> AsyncIterator[MakeExecutor]:
    """Executors on the shared pool with small limits; all closed afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(inner: ToolExecutor, **limits) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            inner, CodeModeLimits(**{**TEST_LIMITS, **limits}), pool=monty_pool
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def run(executor: ToolExecutor, code: str, **extra) -> ToolCallOutput:
    """One run_code call."""
    return await executor.call_tool("run_code", {"code": code, **extra})


# helpers and preamble ----------------------------------------------------------------------------


async def test_helpers_in_a_new_scope(make_executor, fake) -> None:
    """A new scope has the helpers and asyncio/json/re, with no import in the snippet."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        'pods = await list_objects(workspace="root:app", resource="pods")\n'
        '[names(pods), count_by(pods, "status.phase"), dig(pods, "items", 0, "metadata.name"),'
        ' to_json({1}), json.dumps(re.findall("a", "aa")), type(asyncio).__name__]',
    )
    assert not out.is_error, out.content
    assert out.content == (
        '[["pods-0","pods-1","pods-2","pods-3"],{"Running":2,"Pending":1,"Failed":1},'
        '"pods-0","[1]","[\\"a\\", \\"a\\"]","module"]'
    )


async def test_helpers_again_after_restart(make_executor, fake) -> None:
    """restart empties the REPL and feeds the helpers again."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "x = 1")
    out = await run(scope, 'dig({"a": {"b": 2}}, "a.b")', restart=True)
    assert (out.is_error, out.content) == (False, "2")
    assert "NameError" in (await run(scope, "x")).content


async def test_operator_preamble_runs_after_the_helpers(make_executor, fake) -> None:
    """limits.preamble runs in every new scope, after the helpers (it may use them)."""
    preamble = 'WS = "root:app"\nDEFAULT_PHASE = dig({"p": "Running"}, "p")\n'
    ex = make_executor(fake, preamble=preamble)
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    out = await run(
        scope,
        'pods = await list_objects(workspace=WS, resource="pods")\n'
        'count_by(pods, "status.phase")[DEFAULT_PHASE]',
    )
    assert (out.is_error, out.content) == (False, "2")
    assert (await run(scope, "WS", restart=True)).content == "root:app"
    assert (
        await run(ex.thread_scope(ThreadKey("#t", "other")), "DEFAULT_PHASE")
    ).content == "Running"


# reserved names, validation, hints -------------------------------------------------------------


async def test_rebinding_a_helper_is_rejected_before_running(make_executor, fake) -> None:
    """`names = []` never runs: an error naming the helper, the REPL and tools untouched."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, "keep = 5")
    out = await run(scope, 'keep = 6\nnames = await list_objects(workspace="w", resource="pods")')
    assert out.is_error
    assert out.content.startswith(
        "run_code rejected this snippet before running it: line 2 assigns to 'names'"
    )
    assert "e.g. 'names_'" in out.content
    assert fake.calls == []
    assert (await run(scope, "keep")).content == "5"
    assert (await run(scope, 'names([{"name": "a"}])')).content == '["a"]'


async def test_stub_validation_messages_in_the_sandbox(make_executor, fake) -> None:
    """A3 errors surface as catchable TypeErrors with the spec's wording; no call is made."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    code = (
        "out = []\n"
        "for call in [\n"
        '    lambda: list_objects("root:app"),\n'
        '    lambda: list_objects(workspace="w", resource="pods", bucket="b"),\n'
        '    lambda: list_objects(resource="pods"),\n'
        "]:\n"
        "    try:\n"
        "        await call()\n"
        "    except TypeError as e:\n"
        "        out.append(str(e))\n"
        "out"
    )
    out = await run(scope, code)
    assert not out.is_error, out.content
    assert out.content == (
        '["list_objects() takes keyword arguments only",'
        "\"list_objects() got an unexpected keyword argument 'bucket'; accepted: workspace, "
        'resource, namespace",'
        "\"list_objects() missing required keyword argument 'workspace'\"]"
    )
    assert fake.calls == []


async def test_optional_none_is_not_sent(make_executor, fake) -> None:
    """An optional keyword passed as None is dropped before the tool sees it."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    await run(scope, 'await list_objects(workspace="w", resource="pods", namespace=None)')
    assert fake.calls == [("list_objects", {"workspace": "w", "resource": "pods"})]


async def test_hint_appended_to_a_traceback(make_executor, fake) -> None:
    """A traceback that shows a Monty gap ends with its Hint line."""
    scope = make_executor(fake).thread_scope(ThreadKey("#t", "t"))
    out = await run(scope, 'json.dumps({"a": 1}, default=str)')
    assert out.is_error
    assert "TypeError: JSONEncoder.__init__() got an unexpected keyword argument 'default'" in (
        out.content
    )
    assert "\nHint: Monty's json.dumps has no default=; use to_json(x)" in out.content


# the variables note ----------------------------------------------------------------------------


async def test_note_after_snippets(make_executor, fake) -> None:
    """After each snippet the note lists what the snippets bound, with shapes."""
    ex = make_executor(fake)
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    assert ex.context_note(ThreadKey("#t", "t")) is None
    await run(
        scope,
        'pods = await list_objects(workspace="w", resource="pods")\n'
        'bad = [p for p in pods["items"] if dig(p, "status.phase") != "Running"]\n'
        "len(bad)",
    )
    # list_objects declares no output schema: its first result taught a shape (issue 19)
    assert ex.context_note(ThreadKey("#t", "t")) == (
        "[run_code: the result shape of list_objects (it declares none) was learned: "
        'Returns (observed): {"kind": str, "items": [{"metadata": {"name": str, '
        '"namespace": str}, "status": {"phase": str}}]}]\n'
        "[run_code variables still in scope: pods: dict[2], bad: list[2]]"
    )
    out = await run(scope, 'summary = ", ".join(names(bad))\nboom = 1 / 0')
    assert out.is_error
    assert ex.context_note(ThreadKey("#t", "t")) == (
        "[run_code variables still in scope: pods: dict[2], bad: list[2], summary: str[14]]"
    )


async def test_note_after_eviction(make_executor, fake) -> None:
    """An evicted thread's note says its REPL is empty; its next snippets are listed again."""
    ex = make_executor(fake, max_scopes=1)
    await run(ex.thread_scope(ThreadKey("#t", "a")), "rows = [1, 2, 3]")
    assert (
        ex.context_note(ThreadKey("#t", "a"))
        == "[run_code variables still in scope: rows: list[3]]"
    )
    await run(ex.thread_scope(ThreadKey("#t", "b")), "other = 1")  # evicts a
    assert ex.context_note(ThreadKey("#t", "a")) == reset_note("evicted")
    assert (
        ex.context_note(ThreadKey("#t", "b")) == "[run_code variables still in scope: other: int]"
    )
    scope = ex.thread_scope(ThreadKey("#t", "a"))
    assert "NameError" in (await run(scope, "rows")).content
    assert ex.context_note(ThreadKey("#t", "a")) == reset_note("evicted")
    await run(scope, "rows = []")
    assert (
        ex.context_note(ThreadKey("#t", "a"))
        == "[run_code variables still in scope: rows: list[0]]"
    )


async def test_note_after_restart(make_executor, fake) -> None:
    """After restart only the new snippet's names are listed; none at all says the REPL is empty."""
    ex = make_executor(fake)
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    await run(scope, "old = 1")
    await run(scope, "1 + 1", restart=True)
    assert ex.context_note(ThreadKey("#t", "t")) == reset_note("reset")
    await run(scope, "new = 'x'")
    assert (
        ex.context_note(ThreadKey("#t", "t")) == "[run_code variables still in scope: new: str[1]]"
    )


async def test_description_byte_identical_while_the_note_changes(make_executor, fake) -> None:
    """Snippets change the note, never the tool definition (A11: the prompt cache holds)."""
    ex = make_executor(fake)
    (before,) = ex.definitions()
    scope = ex.thread_scope(ThreadKey("#t", "t"))
    await run(scope, "a = [1]")
    first = ex.context_note(ThreadKey("#t", "t"))
    await run(scope, "b = {'k': 1}")
    second = ex.context_note(ThreadKey("#t", "t"))
    (after,) = ex.definitions()
    assert first != second
    assert after.description.encode() == before.description.encode()
    assert after == before
    other = make_executor(fake)
    assert other.definitions()[0].description == before.description
    assert (
        "async def list_objects(*, workspace: str, resource: str, namespace: str | None = None)"
        in (before.description)
    )
