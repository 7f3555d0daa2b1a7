"""Per-sender limits counted across the daemons of a cluster (issue 26 §5).

On a real nats-server: two daemons' limiters share one usage bucket (a race
for the last run is won once, tokens spent on one count on the other, a re-run
of cut-off prompts replaces the cut-off run); and two real daemon processes
with ``max_runs_per_sender_per_hour = 2``: alice's third prompt is refused
although each daemon ran at most one of her first two.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client

from channels.nats import NatsChannel
from daemon.cluster.usage import ClusterSenderLimiter, SenderCounts
from daemon.runtime.limits import SenderLimits
from daemon.runtime.ports import InboundMessage
from sessions.model import SenderRun
from tests.fakes.fake_openai import FakeOpenAI, Reply, Step
from tests.test_cluster_process import daemons_on_a_broker, member, thread_entry
from tests.test_daemon import WAIT, user_text

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class NoLocalRuns:
    """A daemon's own database with no runs (what a daemon alone would count)."""

    async def sender_runs(self, sender: str, since: str) -> list[SenderRun]:
        return []


async def _limiter(
    nc: Client, limits: SenderLimits, channel: str | None = None
) -> ClusterSenderLimiter:
    counts = await SenderCounts(nc.jetstream(), "asyncai").open()

    async def run_senders(run_id: str) -> set[str]:
        return {"alice"}

    return ClusterSenderLimiter(
        counts, NoLocalRuns(), limits, run_senders=run_senders, clock=lambda: NOW, channel=channel
    )


def _prompt(n: int, sender: str = "alice", channel: str = "#ops") -> InboundMessage:
    return InboundMessage(channel, f"{n:026d}", f"{n:026d}", sender, "hi")


async def test_a_channels_own_limit_counts_its_runs_only_on_the_broker(nc: Client) -> None:
    """#help's limiter (one run an hour) counts alice's #help runs only, though her #ops
    run is in the same entry; the global limiter counts both (issue 29)."""
    help_ = await _limiter(nc, SenderLimits(max_runs_per_hour=1), channel="#help")
    everywhere = await _limiter(nc, SenderLimits(max_runs_per_hour=5))
    assert await everywhere.admit("run-ops", [_prompt(1, "dave")]) == {}
    assert await help_.admit("run-help", [_prompt(2, "dave", "#help")]) == {}
    refused = await help_.admit("run-help-2", [_prompt(3, "dave", "#help")])
    assert refused["dave"].used == 1
    assert (
        refused["dave"]
        .reply()
        .startswith('Not run: dave reached [channel."#help"] max_runs_per_sender_per_hour = 1')
    )
    assert await everywhere.check({"dave"}) == {}
    counts = await SenderCounts(nc.jetstream(), "asyncai").open()
    assert len(await counts.runs("dave", NOW)) == 2
    assert len(await counts.runs("dave", NOW, "#help")) == 1


async def test_two_daemons_racing_for_the_last_run_admit_it_once(nc: Client) -> None:
    """Limit one run an hour, two daemons admit a run of alice at the same moment:
    one compare-and-set wins, the other reads again and finds the limit reached."""
    a = await _limiter(nc, SenderLimits(max_runs_per_hour=1))
    b = await _limiter(nc, SenderLimits(max_runs_per_hour=1))
    results = await asyncio.gather(a.admit("run-a", [_prompt(1)]), b.admit("run-b", [_prompt(2)]))
    assert sorted(len(r) for r in results) == [0, 1]
    [refused] = [r["alice"] for r in results if r]
    assert (refused.key, refused.used, refused.limit) == ("max_runs_per_sender_per_hour", 1, 1)
    assert await a.check({"alice", "bob"}) == {"alice": refused}


async def test_tokens_spent_on_one_daemon_count_on_the_other(nc: Client) -> None:
    """A's run spends 600 tokens of a 1000 a day, B's 500: B's next run is refused."""
    limits = SenderLimits(max_tokens_per_day=1000)
    a, b = await _limiter(nc, limits), await _limiter(nc, limits)
    assert await a.admit("run-a", [_prompt(1)]) == {}
    await a.spent("run-a", 600)
    assert await b.admit("run-b", [_prompt(2)]) == {}
    await b.spent("run-b", 500)
    refused = await a.admit("run-c", [_prompt(3)])
    assert (refused["alice"].key, refused["alice"].used) == ("max_tokens_per_sender_per_day", 1100)
    # a run this process did not admit (resumed after a restart) finds its senders itself
    await b.spent("run-elsewhere", 1)
    assert (await b.check({"alice"}))["alice"].used == 1101


async def test_a_rerun_of_cut_off_prompts_counts_once(nc: Client) -> None:
    """A run cut off by a crash, its prompt then run again by the daemon that took the
    thread over: the later run counts, the cut-off one no longer (as on one daemon)."""
    a = await _limiter(nc, SenderLimits(max_runs_per_hour=2))
    b = await _limiter(nc, SenderLimits(max_runs_per_hour=2))
    assert await a.admit("run-1", [_prompt(1)]) == {}
    assert await a.admit("run-2", [_prompt(2)]) == {}  # cut off: its daemon died
    assert await b.admit("run-3", [_prompt(2)]) == {}  # the same prompt, run again
    assert "alice" in await b.admit("run-4", [_prompt(4)])  # two runs: the limit


@pytest.mark.slow
async def test_the_run_limit_holds_across_two_daemons(tmp_path: Path) -> None:
    """max_runs_per_sender_per_hour = 2 on two daemons of one broker: alice's first
    prompt runs on one daemon, her second on the other, and her third is refused
    (each daemon's own database holds one run of hers: alone each would allow it)."""

    def model(body: dict) -> Step:
        return Reply("ok " + user_text(body).split("\n")[0])

    async with (
        FakeOpenAI(fallback=model) as fake,
        daemons_on_a_broker(
            tmp_path, fake, servers=False, runtime="max_runs_per_sender_per_hour = 2"
        ) as (broker, alice, daemons),
        NatsChannel(broker.url, nick="bob") as bob,
    ):
        first, home = await alice.say("one")
        await alice.answered([first])
        here = (await thread_entry(broker.url, home)).owner
        # bob opens threads until one is the other daemon's (rendezvous hashing: a coin flip)
        for _ in range(40):
            opened = await bob.publish("#ops", "open")
            await alice.answered([opened.id])
            if (await thread_entry(broker.url, opened.thread)).owner != here:
                away = opened.thread
                break
        else:
            raise AssertionError("every thread went to one daemon")
        second, _ = await alice.say("two", thread=away)
        await alice.answered([second])
        assert [m.text for m in alice.replies[second]] == ["ok two"]
        third, _ = await alice.say("three", thread=home)
        await alice.answered([third])
        [refusal] = alice.replies[third]
        assert refusal.text.startswith(
            "Not run: alice reached [runtime] max_runs_per_sender_per_hour = 2 "
            "(2 runs in the last hour)"
        )
        assert not any("three" in user_text(r) for r in fake.requests)
        assert {member(d) for d in daemons} == {here, (await thread_entry(broker.url, away)).owner}
        async with asyncio.timeout(WAIT):
            for daemon in daemons:
                assert daemon.proc is not None
                daemon.proc.send_signal(15)
                assert await daemon.wait() == 0
