"""What the store keeps for the daemon across restarts besides transcripts: the mark of
its first start (where channels without a cursor are read from) and each sender's runs
(what the per-sender limits count)."""

from __future__ import annotations

from sessions.cursors import FIRST_START
from sessions.ids import now_iso
from sessions.model import RunMetrics
from sessions.store import Store


async def test_first_start_cursor_is_stored_once_and_survives_a_reopen(tmp_path):
    """The first call stores its id; every later call, after a reopen too, returns the
    stored one. Channel cursors are untouched."""
    db = tmp_path / "asyncai.db"
    async with Store(db) as store:
        assert await store.cursors.first_start_cursor("01AAAAAAAAAAAAAAAAAAAAAAAA") == (
            "01AAAAAAAAAAAAAAAAAAAAAAAA"
        )
        assert await store.cursors.get_cursor("#ops") is None
    async with Store(db) as store:
        assert await store.cursors.first_start_cursor("01BBBBBBBBBBBBBBBBBBBBBBBB") == (
            "01AAAAAAAAAAAAAAAAAAAAAAAA"
        )
        assert await store.cursors.get_cursor(FIRST_START) == "01AAAAAAAAAAAAAAAAAAAAAAAA"


async def test_sender_runs_counts_each_run_that_answered_the_sender(tmp_path):
    """A sender's runs since a moment: a coalesced run counts for each of its senders,
    with all its tokens; other senders' runs and older runs do not count."""
    async with Store(tmp_path / "asyncai.db") as store:
        ts = now_iso()
        for mid, sender in (("p1", "alice"), ("p2", "bob"), ("p3", "alice"), ("p4", "bob")):
            await store.runs.record_prompt("#ops", "t1", mid, sender, "hi", ts)
        await store.runs.start_run("r1", "#ops", "t1", ["p1"])
        metrics = RunMetrics(prompt_tokens=100, completion_tokens=20)
        await store.runs.finish_run("r1", "done", [], metrics, ["p1"], "done")
        await store.runs.start_run("r2", "#ops", "t1", ["p2", "p3"])  # coalesced: both senders
        await store.runs.start_run("r3", "#ops", "t1", ["p4"])
        alice = await store.queries.sender_runs("alice", "2000-01-01T00:00:00.000Z")
        assert [r.tokens for r in alice] == [120, 0]
        bob = await store.queries.sender_runs("bob", "2000-01-01T00:00:00.000Z")
        assert len(bob) == 2
        assert await store.queries.sender_runs("carol", "2000-01-01T00:00:00.000Z") == []
        assert await store.queries.sender_runs("alice", "2999-01-01T00:00:00.000Z") == []


async def test_sender_runs_of_one_channel_leave_the_others_out(tmp_path):
    """With a channel, only the runs of that channel's threads count (a channel's own
    limits, issue 29); without one, every channel's, as before."""
    async with Store(tmp_path / "asyncai.db") as store:
        ts = now_iso()
        await store.runs.record_prompt("#ops", "t1", "p1", "alice", "hi", ts)
        await store.runs.record_prompt("#help", "t1", "p2", "alice", "hi", ts)
        await store.runs.record_prompt("#help", "t2", "p3", "alice", "hi", ts)
        await store.runs.start_run("r1", "#ops", "t1", ["p1"])
        await store.runs.start_run("r2", "#help", "t1", ["p2"])
        await store.runs.start_run("r3", "#help", "t2", ["p3"])
        since = "2000-01-01T00:00:00.000Z"
        assert len(await store.queries.sender_runs("alice", since)) == 3
        assert len(await store.queries.sender_runs("alice", since, "#ops")) == 1
        assert len(await store.queries.sender_runs("alice", since, "#help")) == 2
        assert await store.queries.sender_runs("alice", since, "#team") == []


async def test_switching_the_id_space_drops_the_channel_cursors_once(tmp_path):
    """A hub's cursors mean nothing to NATS (and back): switching drops them, keeps the
    first start, and claiming the same space again drops nothing."""
    db = tmp_path / "asyncai.db"
    async with Store(db) as store:
        await store.cursors.first_start_cursor("01AAAAAAAAAAAAAAAAAAAAAAAA")
        await store.cursors.set_cursor("#ops", "01BBBBBBBBBBBBBBBBBBBBBBBB")
        assert await store.cursors.claim_cursor_space("hub") == 0  # no row yet: the hub's
        assert await store.cursors.get_cursor("#ops") == "01BBBBBBBBBBBBBBBBBBBBBBBB"
        assert await store.cursors.claim_cursor_space("nats") == 1
        assert await store.cursors.get_cursor("#ops") is None
        assert await store.cursors.get_cursor(FIRST_START) == "01AAAAAAAAAAAAAAAAAAAAAAAA"
        await store.cursors.set_cursor("#ops", "01M8NY6P17T0CK000000000001")
    async with Store(db) as store:
        assert await store.cursors.claim_cursor_space("nats") == 0
        assert await store.cursors.get_cursor("#ops") == "01M8NY6P17T0CK000000000001"
        assert await store.cursors.claim_cursor_space("hub") == 1
        assert await store.cursors.get_cursor("#ops") is None
