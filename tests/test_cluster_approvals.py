"""Runs paused for approval move with their thread, on a real nats-server and real SQLite:
a request one daemon shares is adopted by another, tampered state is refused, and a
decision is taken once across the daemons (issue 18)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.aio.client import Client

from daemon.approvals import ApprovalPolicy
from daemon.cluster.approvals import ClusterApprovals, PausedRejected, PausedStates
from daemon.cluster.approvals import approvals_bucket as bucket_name
from daemon.cluster.leases import Leases, PausedEntry
from daemon.cluster.node import ClusterNode
from daemon.cluster.router import MovedApproval, ThreadRouter
from daemon.runtime.context import ResumeJob
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.ports import InboundMessage
from daemon.runtime.runs import RunResult
from daemon.runtime.store import SessionsRuntimeStore
from sessions.approvals import NewApproval
from sessions.store import Store
from tests.fakes.nats_server import NatsServer
from tests.fakes.runtime_helpers import FakePublisher

KEY = b"k" * 32
CALLS = [
    {
        "call_id": 1,
        "tool": "append_line",
        "server": "test",
        "arguments": {"path": "/tmp/x", "line": "once"},
        "why": "not read-only",
        "py_name": "append_line",
    }
]
CONVERSATION = {"messages": [{"role": "user", "content": "append"}], "pause_state": {"n": 1}}
SNAPSHOT = b"\x00monty\xffsnapshot\n"


def _request(rid: str = "k3x9ab") -> NewApproval:
    return NewApproval(
        id=rid,
        run_id="R1",
        channel="#ops",
        thread_id="T1",
        requested_by="alice",
        expires="2099-12-01T08:00:00Z",
        calls=CALLS,
        conversation=CONVERSATION,
        snapshot=SNAPSHOT,
        requested="2026-11-30T08:00:01Z",
    )


class Daemon:
    """One daemon's part: its SQLite, leases, the shared states, a desk bound to them."""

    def __init__(self, nc: Client, store: Store, member: str, key: bytes = KEY):
        js = nc.jetstream()
        self.store = store
        self.leases = Leases(js, "asyncai", member, member_ttl=30.0)
        self.states = PausedStates(js, "asyncai", key)
        self.mirror = ClusterApprovals(self.states, self.leases, store)
        self.publisher = FakePublisher()
        self.jobs: list[ResumeJob] = []
        self.held: list[tuple[str, str]] = []

        async def resume(*_: object) -> RunResult:
            raise AssertionError("not resumed in these tests")

        self.desk = ApprovalDesk(
            store=store.approvals,
            publisher=self.publisher,
            policy=ApprovalPolicy(),
            resume=resume,
            mirror=self.mirror,
        )
        self.desk.bind(schedule=self.jobs.append, hold=lambda c, t: self.held.append((c, t)))
        self.mirror.bind(self.desk, None)

    async def open(self) -> Daemon:
        await self.leases.open()
        await self.states.open()
        return self


async def _paused_in_a(tmp_path: Path, nc: Client) -> tuple[Daemon, Daemon]:
    """a holds #ops/T1, whose run R1 is paused for request k3x9ab (shared); b is empty."""
    a = await Daemon(nc, await Store(tmp_path / "a.db").open(), "a").open()
    b = await Daemon(nc, await Store(tmp_path / "b.db").open(), "b").open()
    await a.store.runs.record_prompt("#ops", "T1", "M1", "alice", "append", "2026-11-30T08:00:00Z")
    await a.store.runs.start_run("R1", "#ops", "T1", ["M1"])
    await a.leases.claim("#ops", "T1")
    await a.store.approvals.add_approval(_request())
    await a.mirror.shared(_request(), ["M1"])
    return a, b


async def _take_over(b: Daemon) -> MovedApproval:
    old = await b.leases.get("#ops", "T1")
    assert old is not None
    claim = await b.leases.take_over("#ops", "T1", old)
    assert claim.owner == "b"
    assert claim.paused is not None
    prompt = InboundMessage("#ops", "M1", "T1", "alice", "append")
    return MovedApproval("#ops", "T1", claim.paused, (prompt,))


async def test_a_request_shared_by_one_daemon_is_adopted_by_the_one_taking_over(
    tmp_path: Path, nc: Client
) -> None:
    """The entry points at the request; after a takeover, b's SQLite holds the same
    request (snapshot, calls, conversation, expiry) and the run's prompts, its desk
    keeps the thread busy, and b's ``!approve ID`` with the original id resumes it."""
    a, b = await _paused_in_a(tmp_path, nc)
    try:
        entry = await a.leases.get("#ops", "T1")
        assert entry is not None
        assert entry.paused == PausedEntry("k3x9ab", "R1", ("M1",))
        moved = await _take_over(b)
        assert await b.mirror.adopt(moved)
        got = await b.store.approvals.get_approval("k3x9ab")
        assert got is not None
        assert (got.status, got.run_id, got.requested_by) == ("pending", "R1", "alice")
        assert (got.snapshot, got.calls, got.conversation) == (SNAPSHOT, CALLS, CONVERSATION)
        assert got.expires == "2099-12-01T08:00:00.000Z"
        assert [p.id for p in await b.store.approvals.run_prompts("R1")] == ["M1"]
        assert b.held == [("#ops", "T1")]
        assert await b.mirror.adopt(moved)  # adopted twice: still one request
        assert len(await b.store.approvals.pending_approvals()) == 1

        approve = InboundMessage("#ops", "M2", "T1", "alice", "!approve k3x9ab")
        assert await b.desk.handle(approve)
        [job] = b.jobs
        assert (job.request_id, job.run_id, job.outcome) == ("k3x9ab", "R1", "approved")
        assert [m.id for m in job.prompts] == ["M1"]
        entry = await b.leases.get("#ops", "T1")
        assert entry is not None
        assert entry.paused is not None
        assert entry.paused.decided == "approved"
        assert entry.mutating is None  # written as the approved call starts
        with pytest.raises(PausedRejected, match="no paused state"):
            await b.states.get("#ops", "T1", "k3x9ab")  # decided: no longer needed
        await b.desk.close()
    finally:
        await a.store.aclose()
        await b.store.aclose()


async def test_a_decision_is_taken_once_across_the_daemons(tmp_path: Path, nc: Client) -> None:
    """The old holder still has the request pending in its SQLite: its ``!approve`` after
    the move is refused (one line, no resume), its copy ends as stopped by the cluster;
    the new holder's second decision is refused as already taken."""
    a, b = await _paused_in_a(tmp_path, nc)
    try:
        assert await b.mirror.adopt(await _take_over(b))
        late = InboundMessage("#ops", "M2", "T1", "alice", "!approve k3x9ab")
        assert await a.desk.handle(late)
        assert a.jobs == []
        [said] = a.publisher.sent
        assert said.text == "Request k3x9ab was already decided, or its thread moved."
        mine = await a.store.approvals.get_approval("k3x9ab")
        assert mine is not None
        assert (mine.status, mine.decided_by) == ("stopped", "cluster")
        assert mine.resumed is not None  # never resumed here, after a restart either

        deny = InboundMessage("#ops", "M3", "T1", "alice", "!deny k3x9ab no")
        assert await b.desk.handle(deny)
        [job] = b.jobs
        assert job.outcome == "denied"
        stored = await b.store.approvals.get_approval("k3x9ab")
        assert stored is not None
        assert stored.status == "denied"
        assert await b.mirror.decide(stored, "approved") == "moved"  # once
        entry = await b.leases.get("#ops", "T1")
        assert entry is not None
        assert entry.paused is not None
        assert entry.paused.decided == "denied"
        assert entry.mutating is None
        await a.desk.close()
        await b.desk.close()
    finally:
        await a.store.aclose()
        await b.store.aclose()


async def test_tampered_or_misplaced_state_is_refused_and_not_adopted(
    tmp_path: Path, nc: Client
) -> None:
    """Changed bytes, the genuine bytes under another thread's name, another scope.key,
    a broken header: each refused with its reason; adopt() then returns False (the
    prompts run again) and nothing is written to the new holder's SQLite."""
    a, b = await _paused_in_a(tmp_path, nc)
    try:
        raw_bucket = await nc.jetstream().object_store(bucket_name("asyncai"))
        [name] = [o.name for o in await raw_bucket.list()]
        raw = bytes((await raw_bucket.get(name)).data or b"")
        assert await b.states.get("#ops", "T1", "k3x9ab")  # intact: loads
        await raw_bucket.put(name, raw.replace(b"alice", b"mallo"))
        with pytest.raises(PausedRejected, match="MAC does not match"):
            await b.states.get("#ops", "T1", "k3x9ab")
        moved = await _take_over(b)
        assert not await b.mirror.adopt(moved)
        assert await b.store.approvals.get_approval("k3x9ab") is None
        assert b.held == []

        await raw_bucket.put(name.replace(".T1.", ".T2."), raw)  # genuine, another thread
        with pytest.raises(PausedRejected, match="MAC does not match"):
            await b.states.get("#ops", "T2", "k3x9ab")
        await raw_bucket.put(name, raw)
        other = await PausedStates(nc.jetstream(), "asyncai", b"o" * 32).open()
        with pytest.raises(PausedRejected, match=r"another scope\.key"):
            await other.get("#ops", "T1", "k3x9ab")
        await raw_bucket.put(name, json.dumps({"v": 1}).encode() + b"\n{}")
        with pytest.raises(PausedRejected, match="not a paused state"):
            await b.states.get("#ops", "T1", "k3x9ab")
        with pytest.raises(PausedRejected, match="no paused state"):
            await b.states.get("#ops", "T1", "nope")
    finally:
        await a.store.aclose()
        await b.store.aclose()


async def test_a_taken_over_threads_request_goes_before_its_prompts_and_they_are_not_rerun(
    tmp_path: Path, nc: Client
) -> None:
    """The router taking a thread over from a daemon that is gone hands the moved request
    first, with the paused run's prompt (not run again), then the thread's newer ones."""
    a, b = await _paused_in_a(tmp_path, nc)
    try:
        leases = await Leases(nc.jetstream(), "asyncai", "b", member_ttl=0.2).open()
        router = ThreadRouter(leases)
        await router.beat()
        await asyncio.sleep(0.25)  # steady for a whole key lifetime: takeovers allowed
        await router.beat()
        paused = InboundMessage("#ops", "M1", "T1", "alice", "append")
        newer = InboundMessage("#ops", "M2", "T1", "alice", "and then?")
        assert await router.route(paused, "asyncai") == [
            MovedApproval("#ops", "T1", PausedEntry("k3x9ab", "R1", ("M1",)), (paused,))
        ]
        assert await router.route(newer, "asyncai") == [newer]
        entry = await leases.get("#ops", "T1")
        assert entry is not None
        assert (entry.owner, entry.paused) == ("b", PausedEntry("k3x9ab", "R1", ("M1",)))
    finally:
        await a.store.aclose()
        await b.store.aclose()


async def test_a_run_resumed_after_a_restart_still_moves_the_threads_marker(
    tmp_path: Path,
) -> None:
    """A run this process did not start (a paused run resumed after a restart) is looked
    up in the database: its mutating calls and its answered prompts reach the entry."""
    async with NatsServer() as broker, Store(tmp_path / "a.db") as store:
        node = await ClusterNode.open(
            broker.url,
            store,
            token=None,
            nick="asyncai",
            takeover_seconds=6.0,
            scope_key=KEY,
            max_scope_bytes=1 << 20,
            scope_retention=0.0,
            state_dir=tmp_path,
        )
        try:
            wrapped = node.wrap(SessionsRuntimeStore(store))
            await store.runs.record_prompt(
                "#ops", "T1", "M1", "alice", "append", "2026-11-30T08:00:00Z"
            )
            await store.runs.start_run("R1", "#ops", "T1", ["M1"])  # by the process before
            await node.leases.claim("#ops", "T1")
            assert await wrapped.known_run("R1") == (("#ops", "T1"), ["M1"])
            assert await wrapped.known_run("R9") is None
            await wrapped.finish_run("R1", RunResult(reply="ok", status="done"), ["M1"], "done")
            entry = await node.leases.get("#ops", "T1")
            assert entry is not None
            assert entry.answered == "M1"
        finally:
            await node.close()
