"""Per-sender token limits end to end (issue 26 §5): the tokens of a run count however
it ends. A real hub, store, Monty pool and backend in this process; only the model
is scripted (tests/fakes/fake_openai.py), and it reports each response's usage.

A run spends its tokens on a first response (a ``run_code`` call) and is then
stopped, paused for approval, or cut off by a shutdown while its second request
is held; the next prompts of the same sender meet the limit's one-line reply.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.app import Daemon, running
from daemon.config import load_config
from tests.fakes.fake_openai import FakeOpenAI, Hold, Reply, ToolCalls
from tests.test_daemon import WAIT, Person, run_of, settled, world, write_config

#: One response's usage: 100 000 tokens.
BIG = {"prompt_tokens": 90_000, "completion_tokens": 10_000, "total_tokens": 100_000}
NONE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
LIMIT = "max_tokens_per_sender_per_day = 150000"
REFUSED = "Not run: alice reached [runtime] max_tokens_per_sender_per_day = 150000 "


def spend_then_hold(fake: FakeOpenAI) -> Hold:
    """Script a run that spends 100 000 tokens and then waits in its second request."""
    hold = Hold(Reply("too late"))
    fake.add(ToolCalls(("run_code", {"code": "1 + 1"}), usage=BIG), hold)
    return hold


async def arrived(hold: Hold) -> None:
    """Until the held request reached the model (the first response was spent)."""
    async with asyncio.timeout(WAIT):
        await hold.arrived.wait()


async def test_stopped_runs_tokens_count_so_the_later_prompts_are_refused(tmp_path: Path):
    """Ten prompts of 100 000 tokens each against a limit of 150 000, each run stopped
    mid-run: the tokens are on the run row while it still runs, the stop keeps them,
    and from the third prompt on alice gets the limit's one line instead of a run."""
    async with world(tmp_path, runtime=LIMIT) as (hub, fake, path):
        alice = Person(hub.url)
        await alice.start()
        try:
            async with running(Daemon(load_config(path, environ={}), env={})) as daemon:
                for i in range(10):
                    if i < 2:
                        hold = spend_then_hold(fake)
                    mid, thread = await alice.say(f"question {i}")
                    if i >= 2:
                        [refusal] = await alice.reply_in(thread)
                        assert refusal.text.startswith(
                            REFUSED + "(200000 tokens in the last 24 hours)"
                        ), refusal.text
                        continue
                    await arrived(hold)
                    run_id = await run_of(daemon, mid)
                    found = await daemon.store.queries.run_metrics(run_id)
                    assert found is not None
                    status, metrics, _ = found
                    # durable as spent: on the row while the run still goes on
                    assert (status, metrics.prompt_tokens, metrics.completion_tokens) == (
                        "running",
                        90_000,
                        10_000,
                    )
                    await alice.say("!stop", thread=thread)
                    [stopped] = await alice.reply_in(thread)
                    assert stopped.text == "Stopped by alice."
                    await settled(daemon, mid)
                    found = await daemon.store.queries.run_metrics(run_id)
                    assert found is not None
                    assert (found[0], found[1].prompt_tokens + found[1].completion_tokens) == (
                        "interrupted",
                        100_000,
                    )
                    hold.release.set()  # the fake's held connection was cut; let it end
                assert len(fake.requests) == 4  # two runs, two requests each
                assert not fake.script
        finally:
            await alice.close()


async def test_a_run_cut_off_at_shutdown_counts_after_the_restart(tmp_path: Path):
    """A run cut off by a shutdown after spending 100 000 tokens runs again at the next
    start (another 100 000); those 200 000 keep alice's next prompt from running."""
    async with world(tmp_path, runtime=LIMIT) as (hub, fake, path):
        alice = Person(hub.url)
        await alice.start()
        try:
            path.write_text(
                path.read_text().replace("shutdown_grace = 2.0", "shutdown_grace = 0.1")
            )
            config = load_config(path, environ={})
            hold = spend_then_hold(fake)
            async with running(Daemon(config, env={})) as first:
                mid, thread = await alice.say("a long question")
                await arrived(hold)
                first_run = await run_of(first, mid)
            hold.release.set()
            fake.add(
                ToolCalls(("run_code", {"code": "2 + 2"}), usage=BIG),
                Reply("Here it is.", usage=NONE),
            )
            async with running(Daemon(config, env={})) as second:
                [answer] = await alice.reply_in(thread)
                assert answer.text == "Here it is."
                await settled(second, mid)
                assert await run_of(second, mid) != first_run
                _, refusal = await alice.ask("and another")
                assert refusal.text.startswith(REFUSED + "(200000 tokens in the last 24 hours)")
            assert not fake.script
        finally:
            await alice.close()


async def test_a_paused_runs_tokens_count_when_it_is_stopped(tmp_path: Path):
    """A run that spent 100 000 tokens and paused for approval, then ended by !stop:
    its tokens count, and alice's next prompt is refused (a limit of 50 000)."""
    async with world(tmp_path) as (hub, fake, _):
        path = write_config(
            tmp_path / "asyncai.toml",
            hub_url=hub.url,
            model_url=fake.base_url,
            runtime="max_tokens_per_sender_per_day = 50000",
        )
        alice = Person(hub.url)
        await alice.start()
        try:
            async with running(Daemon(load_config(path, environ={}), env={})) as daemon:
                target = tmp_path / "erase.txt"
                code = f"await erase(path={str(target)!r})"
                fake.add(ToolCalls(("run_code", {"code": code}), usage=BIG))
                mid, asked = await alice.ask("erase it")
                assert asked.text.startswith("This run wants to make a call that needs approval")
                _, stopped = await alice.ask("!stop", thread=mid)
                assert stopped.text == "Stopped by alice."
                await settled(daemon, mid)
                _, refusal = await alice.ask("and now?")
                assert refusal.text.startswith(
                    "Not run: alice reached [runtime] max_tokens_per_sender_per_day = 50000 "
                    "(100000 tokens in the last 24 hours)"
                ), refusal.text
                assert not target.exists()
                assert not fake.script
        finally:
            await alice.close()
