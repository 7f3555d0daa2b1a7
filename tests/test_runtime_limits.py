"""Per-sender limits (``[runtime] max_runs_per_sender_per_hour``,
``max_tokens_per_sender_per_day``): the pure rule, and the runtime over a real
store that is closed and opened again between runs, as a restart does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.runtime.limits import SenderLimiter, SenderLimits, limit_reached
from daemon.runtime.runs import RunRequest, RunResult
from daemon.runtime.scheduler import Runtime
from daemon.runtime.store import SessionsRuntimeStore
from sessions.ids import iso_utc
from sessions.model import RunMetrics, SenderRun
from sessions.store import Store
from tests.fakes.runtime_helpers import FakePublisher, msg

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ran(minutes_ago: float, tokens: int = 0) -> SenderRun:
    """A run of the sender that started ``minutes_ago`` before NOW."""
    return SenderRun(iso_utc(NOW - timedelta(minutes=minutes_ago)), tokens)


def test_runs_per_hour_frees_up_when_enough_runs_left_the_hour():
    """At the run limit the reply names the key and the moment enough of the oldest runs
    are an hour old; runs older than the hour do not count."""
    limits = SenderLimits(max_runs_per_hour=2)
    assert limit_reached("alice", limits, [ran(90), ran(50)], NOW) is None
    reached = limit_reached("alice", limits, [ran(90), ran(50), ran(10)], NOW)
    assert reached is not None
    assert (reached.key, reached.used, reached.limit) == ("max_runs_per_sender_per_hour", 2, 2)
    assert reached.frees_at == NOW + timedelta(minutes=10)  # when the one of 50 min ago is 60
    assert reached.reply() == (
        "Not run: alice reached [runtime] max_runs_per_sender_per_hour = 2 "
        "(2 runs in the last hour); it frees up at 2026-11-30 12:10:00 UTC."
    )


def test_tokens_per_day_frees_up_when_the_oldest_tokens_age_out():
    """At the token limit it frees up when enough of the oldest runs are a day old to be
    under it again; tokens older than a day do not count."""
    limits = SenderLimits(max_tokens_per_day=1000)
    runs = [ran(25 * 60, 5000), ran(20 * 60, 600), ran(10 * 60, 300), ran(5, 200)]
    reached = limit_reached("bob", limits, runs, NOW)
    assert reached is not None
    assert (reached.key, reached.used) == ("max_tokens_per_sender_per_day", 1100)
    assert reached.frees_at == NOW + timedelta(hours=4)  # the 600 of 20 h ago leave
    assert limit_reached("bob", limits, runs[:3], NOW) is None
    assert limit_reached("bob", SenderLimits(), runs, NOW) is None


class TokenModel:
    """Answers at once; each run used ``tokens`` tokens."""

    def __init__(self, tokens: int = 0) -> None:
        self.tokens = tokens
        self.requests: list[RunRequest] = []

    async def __call__(self, request: RunRequest) -> RunResult:
        """The prompt texts back, with the token usage."""
        self.requests.append(request)
        metrics = RunMetrics(prompt_tokens=self.tokens, completion_tokens=0)
        return RunResult(
            reply="re: " + " | ".join(p.text for p in request.prompts), metrics=metrics
        )


async def one_start(db: Path, limits: SenderLimits, model: TokenModel, *messages) -> FakePublisher:
    """Open the store, run a runtime with ``limits`` over ``messages`` (one reply each),
    shut down and close: one life of the daemon."""
    pub = FakePublisher()
    async with Store(db) as store:
        rt = Runtime(
            store=SessionsRuntimeStore(store),
            publisher=pub,
            run=model,
            limiter=SenderLimiter(store.queries, limits),
        )
        for message in messages:
            await rt.submit(message)
            await pub.wait_for(len(pub.sent) + 1)
        await rt.shutdown(grace=1)
    return pub


async def status_of(db: Path, prompt_id: str) -> str:
    """A prompt's stored status."""
    async with Store(db) as store:
        [prompt] = await store.queries.get_prompts([prompt_id])
        return prompt.status


async def test_run_limit_holds_across_a_restart(tmp_path):
    """max_runs_per_sender_per_hour = 1: alice's first prompt runs; after a restart her
    next prompt is not run (failed, a one-line reply naming the limit) while bob's runs."""
    db = tmp_path / "asyncai.db"
    model = TokenModel()
    limits = SenderLimits(max_runs_per_hour=1)
    first = msg("one", sender="alice")
    pub = await one_start(db, limits, model, first)
    assert [p.text for p in pub.sent] == ["re: one"]
    second, other = msg("two", sender="alice"), msg("hi", sender="bob")
    pub = await one_start(db, limits, model, second, other)
    refusal, answer = pub.sent
    assert refusal.text.startswith(
        "Not run: alice reached [runtime] max_runs_per_sender_per_hour = 1 "
        "(1 run in the last hour); it frees up at "
    )
    assert refusal.reply_to == second.id
    assert answer.text == "re: hi"
    assert [len(r.prompts) for r in model.requests] == [1, 1]  # "two" never ran
    assert await status_of(db, second.id) == "failed"
    assert await status_of(db, other.id) == "done"


async def test_token_limit_holds_across_a_restart_and_spares_the_other_sender(tmp_path):
    """max_tokens_per_sender_per_day = 100 and a run of 150 tokens: after a restart that
    sender's prompt in a coalesced run is refused and the other sender's prompt runs."""
    db = tmp_path / "asyncai.db"
    model = TokenModel(tokens=150)
    limits = SenderLimits(max_tokens_per_day=100)
    await one_start(db, limits, model, msg("big question", sender="alice"))
    pub = FakePublisher()
    gate_model = TokenModel()
    root = msg("from bob", sender="bob")
    mine = msg("from alice", sender="alice", thread=root.thread)
    async with Store(db) as store:
        # Both wait in one thread when the daemon starts, so they make one run.
        for m in (root, mine):
            await store.runs.record_prompt("#ops", m.thread, m.id, m.sender, m.text, iso_utc(NOW))
        rt = Runtime(
            store=SessionsRuntimeStore(store),
            publisher=pub,
            run=gate_model,
            limiter=SenderLimiter(store.queries, limits),
        )
        assert await rt.recover() == 2
        await pub.wait_for(2)
        await rt.shutdown(grace=1)
    texts = sorted(p.text for p in pub.sent)
    assert texts[0].startswith("Not run: alice reached [runtime] max_tokens_per_sender_per_day")
    assert "(150 tokens in the last 24 hours)" in texts[0]
    assert texts[1] == "re: from bob"
    assert [[p.text for p in r.prompts] for r in gate_model.requests] == [["from bob"]]
    assert await status_of(db, mine.id) == "failed"
    assert await status_of(db, root.id) == "done"
