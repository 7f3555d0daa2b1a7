"""The harness's self-consistency: which results take part, how samples agree, and the
loop that draws them (a scripted model, real code mode on the shared Monty pool)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.config import ModelConfig
from daemon.model import OpenAiCompatibleBackend
from daemon.model.harness import REREAD, VOTE_TEMPERATURE, majority, may_rerun, vote_key
from daemon.model.harness.prompts import retry_seed
from daemon.runtime.runs import Prompt, RunRequest
from tests.fakes.executor import FakeToolExecutor, code_mode_over
from tests.fakes.fake_openai import FakeOpenAI, Reply

LOCAL = "qwen-coder-1.5b"
ORDERS = [
    {"customer": "acme", "amount": 100.5},
    {"customer": "acme", "amount": 62.25},
    {"customer": "globex", "amount": 380.0},
]


# ---- pure --------------------------------------------------------------------------------


def test_numbers_strings_and_short_lists_are_comparable() -> None:
    assert vote_key("3") == vote_key("3.0") == vote_key(" 3 ")
    assert vote_key("162.75") != vote_key("542.75")
    assert vote_key('"Debug "') == vote_key("debug")
    assert vote_key('["b", "a"]') == vote_key('["a", "b"]')
    assert vote_key('["a", "a"]') != vote_key('["a"]')  # a multiset, not a set
    assert vote_key('{"pod": "api-2", "restarts": 14}') == vote_key('{"name": "api-2", "n": 14}')
    assert vote_key('[{"name": "x", "n": 1}]') == vote_key('[{"pod": "x", "count": 1}]')
    assert vote_key("true") != vote_key("1")


def test_data_errors_and_empty_results_are_not_voted_on() -> None:
    assert vote_key("") is None
    assert vote_key("(empty result: the last expression was an empty list)") is None
    assert vote_key("[]") is None
    assert vote_key(str(list(range(41)))) is None  # data, not an answer
    assert vote_key('[{"a": {"b": 1}}]') is None  # nested
    assert vote_key("x" * 201) is None
    assert vote_key("NaN") is None


def test_the_majority_wins_and_a_tie_keeps_the_earliest() -> None:
    assert majority(["a", "b", "b"]) == 1
    assert majority(["a", "b", "c"]) == 0
    assert majority(["a", "b", "a"]) == 0
    assert majority([None, "b", None]) == 1
    assert majority([None, None]) == 0


def test_a_snippet_naming_a_mutating_function_never_runs_again() -> None:
    mutating = ["delete_pod", "scale"]
    assert may_rerun("x = await list_pods(namespace='a')\nlen(x)", mutating)
    assert not may_rerun("await delete_pod(name='a')", mutating)
    assert not may_rerun("f = scale\nawait f(n=1)", mutating)  # aliased
    assert not may_rerun("getattr(x, 'delete_pod')", mutating)  # named as a string
    assert not may_rerun("this is not python(", mutating)


# ---- the loop ----------------------------------------------------------------------------


def inner_tools() -> FakeToolExecutor:
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_orders() -> list:
        """List the orders."""
        return ORDERS

    @fake.tool(read_only=False, destructive=True)
    async def cancel_order(*, customer: str) -> str:
        """Cancel a customer's orders."""
        return "cancelled"

    return fake


@pytest.fixture
async def code_mode(
    monty_pool: Any,
) -> AsyncIterator[tuple[CodeModeToolExecutor, FakeToolExecutor]]:
    inner = inner_tools()
    async with code_mode_over(inner, monty_pool) as ex:
        yield ex, inner


def block(code: str) -> Reply:
    return Reply(f"```python\n{code}")


ALL = "sum(o['amount'] for o in await list_orders())"  # the filter dropped: 542.75
ACME = "sum(o['amount'] for o in await list_orders() if o['customer'] == 'acme')"  # 162.75


async def run(ex: Any, script: list, **params: Any) -> tuple[FakeOpenAI, Any]:
    request = RunRequest("R1", "#ops", "T1", [], [Prompt("m1", "alice", "acme's total?")])
    async with FakeOpenAI(script) as fake:
        params = {"answer_samples": 3, **params}
        config = ModelConfig(base_url=fake.base_url, api_key="k", model=LOCAL, **params)
        backend = OpenAiCompatibleBackend(config, ex)
        try:
            result = await backend.run(request)
        finally:
            await backend.aclose()
    return fake, result


async def test_two_samples_that_agree_answer_at_once(code_mode) -> None:
    ex, inner = code_mode
    fake, result = await run(ex, [block(ACME), block(ACME), "It is 162.75."])
    first, sample, answer = fake.requests
    assert sample["temperature"] == VOTE_TEMPERATURE
    # the question again (not the result), with a request to read it word by word
    assert sample["messages"][:-1] == first["messages"][:-1]
    assert sample["messages"][-1]["content"] == f"{first['messages'][-1]['content']}\n\n{REREAD}"
    assert "162.75" in answer["messages"][-1]["content"]
    assert result.reply == "It is 162.75."
    assert result.metrics.vote_samples == 1
    assert len(inner.calls) == 2


async def test_a_third_sample_breaks_a_tie_and_the_majority_is_the_answer(code_mode) -> None:
    ex, _ = code_mode
    fake, result = await run(ex, [block(ALL), block(ACME), block(ACME), "The total is 162.75."])
    assert len(fake.requests) == 4
    answer = fake.requests[-1]["messages"]
    assert "162.75" in answer[-1]["content"]
    assert "542.75" not in answer[-1]["content"]
    assert answer[-2]["content"] == f"```python\n{ACME}\n```"  # the winner's code
    assert result.metrics.vote_samples == 2
    # each sample seeded by its prompt and its draw: repeatable, and not the same draw
    seeds = [r.get("seed") for r in fake.requests[1:3]]
    base = retry_seed(fake.requests[1]["messages"])
    assert seeds == [(base + 2) % 2**32, (base + 3) % 2**32]
    assert fake.requests[1]["messages"] == fake.requests[2]["messages"]
    # every sample is in the transcript as a run_code call with its result
    uses = [b for r in result.records for b in _blocks(r) if b.get("type") == "tool_use"]
    assert len(uses) == 3


async def test_a_tie_break_that_fails_is_drawn_again(code_mode) -> None:
    ex, _ = code_mode
    script = [block(ALL), block(ACME), block("1 / 0"), block(ACME), "162.75"]
    fake, result = await run(ex, script)
    assert len(fake.requests) == 5
    assert "162.75" in fake.requests[-1]["messages"][-1]["content"]
    assert result.metrics.vote_samples == 3


async def test_no_majority_keeps_the_first_sample(code_mode) -> None:
    ex, _ = code_mode
    third = "len(await list_orders())"
    fake, _ = await run(ex, [block(ALL), block(ACME), block(third), "542.75"])
    assert "542.75" in fake.requests[-1]["messages"][-1]["content"]


async def test_a_snippet_with_a_mutating_call_is_not_sampled_again(code_mode) -> None:
    ex, inner = code_mode
    code = f"await cancel_order(customer='zzz')\n{ACME}"
    fake, result = await run(ex, [block(code), "162.75"])
    assert len(fake.requests) == 2
    assert result.metrics.vote_samples == 0
    assert [c[0] for c in inner.calls].count("cancel_order") == 1


async def test_a_sample_that_would_mutate_is_not_run(code_mode) -> None:
    ex, inner = code_mode
    cancel = block("await cancel_order(customer='acme')")
    fake, result = await run(ex, [block(ACME), cancel, cancel, cancel, "162.75"])
    assert len(fake.requests) == 5  # two draws and one more, then the first stands
    assert [c[0] for c in inner.calls] == ["list_orders"]
    assert result.reply == "162.75"


async def test_one_sample_turns_the_vote_off(code_mode) -> None:
    ex, _ = code_mode
    fake, result = await run(ex, [block(ALL), "542.75"], answer_samples=1)
    assert len(fake.requests) == 2
    assert result.metrics.vote_samples == 0


async def test_long_data_is_not_voted_on(code_mode) -> None:
    ex, _ = code_mode
    fake, _ = await run(ex, [block("list(range(100))"), "a hundred numbers"])
    assert len(fake.requests) == 2


def _blocks(record: Any) -> list[dict]:
    content = record.message.get("content") if isinstance(record.message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


# ---- the harness's catalog budget ------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "budget", "expected"),
    [
        (LOCAL, None, 16_000),  # the harness is on: stubs up to its own budget
        ("gpt-4o", None, 6_000),  # the configured default
        (LOCAL, 3_000, 3_000),  # a configured budget always wins
    ],
)
async def test_the_harness_keeps_stubs_up_to_its_own_budget(
    model: str, budget: int | None, expected: int
) -> None:
    from daemon.config import Config
    from daemon.lanes import build_tool_executor

    config = Config()
    config.model.model = model
    config.code_mode.catalog_budget = budget
    executor = build_tool_executor(config, inner=FakeToolExecutor())
    assert isinstance(executor, CodeModeToolExecutor)
    try:
        assert executor.limits.catalog_budget == expected
    finally:
        await executor.aclose()
