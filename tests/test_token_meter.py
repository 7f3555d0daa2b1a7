"""A run's tokens on its row in the real store (SQLite on disk): before the run's next
model request, within ``TOKENS_DELAY`` while the run goes on, and with its end once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.runtime import usage
from daemon.runtime.runs import RunResult
from daemon.runtime.store import SessionsRuntimeStore
from daemon.runtime.usage import TokenMeter, metering, tokens_before_request, tokens_spent
from sessions.model import RunMetrics
from sessions.store import Store
from tests.fakes.runtime_helpers import msg


async def _row(store: Store, run_id: str) -> tuple[str, int, int]:
    found = await store.queries.run_metrics(run_id)
    assert found is not None
    status, metrics, _ = found
    return status, metrics.prompt_tokens, metrics.completion_tokens


async def _run(store: Store, runtime_store: SessionsRuntimeStore, run_id: str) -> str:
    prompt = msg("how many pods?")
    await runtime_store.record_prompt(prompt)
    await runtime_store.start_run(run_id, "#ops", prompt.thread, [prompt.id])
    return prompt.id


async def test_tokens_reach_the_row_before_the_next_request_and_while_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """A response's tokens are on the row when the run's next request goes out, and,
    with no next request (code running, an approval awaited), within the delay."""
    async with Store(tmp_path / "a.db") as store:
        runtime_store = SessionsRuntimeStore(store)
        await _run(store, runtime_store, "r1")
        with metering(TokenMeter(runtime_store, "r1")):
            await tokens_spent(900, 100)
            await tokens_before_request()
            assert await _row(store, "r1") == ("running", 900, 100)
            await tokens_spent(50, 5)
            await asyncio.sleep(usage.TOKENS_DELAY + 0.2)  # the run is busy elsewhere
            assert await _row(store, "r1") == ("running", 950, 105)


async def test_the_last_responses_tokens_go_with_the_end_and_are_counted_once(
    tmp_path: Path,
) -> None:
    """The run ends with its answer before the delay: the end's transaction writes the
    sums, and nothing is added after it (a late write would count them twice)."""
    async with Store(tmp_path / "a.db") as store:
        runtime_store = SessionsRuntimeStore(store)
        prompt_id = await _run(store, runtime_store, "r1")
        with metering(TokenMeter(runtime_store, "r1")) as meter:
            await tokens_spent(900, 100)
            assert await _row(store, "r1") == ("running", 0, 0)  # not yet: the run may end
        result = RunResult(reply="3 pods", metrics=meter.metrics())
        await runtime_store.finish_run("r1", result, [prompt_id], "done")
        assert await _row(store, "r1") == ("done", 900, 100)
        await asyncio.sleep(usage.TOKENS_DELAY + 0.2)
        assert await _row(store, "r1") == ("done", 900, 100)


async def test_a_run_cut_off_keeps_every_token_it_spent(tmp_path: Path) -> None:
    """Written and unwritten alike: the interrupted run's row has the meter's sums."""
    async with Store(tmp_path / "a.db") as store:
        runtime_store = SessionsRuntimeStore(store)
        prompt_id = await _run(store, runtime_store, "r1")
        with metering(TokenMeter(runtime_store, "r1")) as meter:
            await tokens_spent(900, 100)
            await tokens_before_request()
            await tokens_spent(400, 40)
        cut = RunResult(reply="", metrics=meter.metrics(), status="interrupted")
        await runtime_store.finish_run("r1", cut, [prompt_id], "queued")
        assert await _row(store, "r1") == ("interrupted", 1300, 140)
        assert meter.metrics() == RunMetrics(prompt_tokens=1300, completion_tokens=140)
