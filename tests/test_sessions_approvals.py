"""The approvals table: a paused run stored whole, its decision taken once, kept over restarts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sessions import Store, StoreError
from sessions.approvals import NewApproval
from sessions.rules import NewRule
from sessions.schema import MIGRATIONS

CALLS = [{"call_id": 1, "tool": "delete_object", "server": "kcp", "arguments": {"name": "web"}}]
CONVERSATION = {"messages": [{"role": "user", "content": "delete web"}], "rounds": 1}


@pytest.fixture
async def store(tmp_path: Path):
    """A store with one running run R1 in thread #ops/T1."""
    async with Store(tmp_path / "a.db") as store:
        await store.runs.record_prompt(
            "#ops", "T1", "M1", "alice", "delete web", "2026-11-30T08:00:00Z"
        )
        await store.runs.start_run("R1", "#ops", "T1", ["M1"])
        yield store


def request(id_: str = "k3x9ab", **changes: object) -> NewApproval:
    """A request of run R1 with a 3-byte snapshot."""
    fields: dict = {
        "id": id_,
        "run_id": "R1",
        "channel": "#ops",
        "thread_id": "T1",
        "requested_by": "alice",
        "expires": "2026-12-01T08:00:00Z",
        "calls": CALLS,
        "conversation": CONVERSATION,
        "snapshot": b"\x00\x01\xff",
        "requested": "2026-11-30T08:00:01Z",
    }
    return NewApproval(**{**fields, **changes})


async def test_a_request_is_stored_whole_and_read_back(store: Store) -> None:
    """Calls, snapshot bytes, conversation and who asked come back as they went in."""
    await store.approvals.add_approval(request())
    got = await store.approvals.get_approval("k3x9ab")
    assert got is not None
    assert (got.channel, got.thread_id, got.run_id, got.requested_by) == (
        "#ops",
        "T1",
        "R1",
        "alice",
    )
    assert (got.calls, got.conversation, got.snapshot) == (CALLS, CONVERSATION, b"\x00\x01\xff")
    assert (got.status, got.decided_by, got.resumed) == ("pending", None, None)
    assert got.expires == "2026-12-01T08:00:00.000Z"
    assert await store.approvals.get_approval("nope") is None


async def test_a_request_of_an_unknown_run_is_refused(store: Store) -> None:
    """No half-written row: the run must exist in that thread."""
    with pytest.raises(StoreError, match="no run 'R9'"):
        await store.approvals.add_approval(request(run_id="R9"))
    with pytest.raises(StoreError, match="no run 'R1' in thread #ops T2"):
        await store.approvals.add_approval(request(thread_id="T2"))
    assert await store.approvals.approvals() == []


async def test_a_decision_is_taken_once(store: Store) -> None:
    """The first decision wins; a second one changes nothing and says so."""
    await store.approvals.add_approval(request())
    assert await store.approvals.decide_approval("k3x9ab", "approved", by="alice", scope="run")
    assert not await store.approvals.decide_approval("k3x9ab", "denied", by="bob", reason="no")
    assert not await store.approvals.decide_approval("unknown", "denied", by="bob")
    got = await store.approvals.get_approval("k3x9ab")
    assert got is not None
    assert (got.status, got.decided_by, got.scope, got.reason) == ("approved", "alice", "run", None)
    assert got.decided is not None


async def test_pending_and_unresumed_requests_are_found_after_a_restart(tmp_path: Path) -> None:
    """A request pending, and one decided but not acted on, survive closing the store."""
    path = tmp_path / "a.db"
    async with Store(path) as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-30T08:00:00Z")
        await store.runs.start_run("R1", "#ops", "T1", ["M1"])
        await store.approvals.add_approval(request("aaaaaa", expires="2026-12-02T00:00:00Z"))
        await store.approvals.add_approval(request("bbbbbb", expires="2026-12-01T00:00:00Z"))
        await store.approvals.add_approval(request("cccccc"))
        await store.approvals.decide_approval("cccccc", "denied", by="alice", reason="not now")
    async with Store(path) as again:
        assert [a.id for a in await again.approvals.pending_approvals()] == ["bbbbbb", "aaaaaa"]
        assert [a.id for a in await again.approvals.unresumed_decisions()] == ["cccccc"]
        await again.approvals.mark_resumed("cccccc")
        assert await again.approvals.unresumed_decisions() == []
        assert {a.id for a in await again.approvals.approvals(pending=True)} == {"aaaaaa", "bbbbbb"}
        assert len(await again.approvals.approvals()) == 3


async def test_the_prompts_of_a_paused_run_are_found_by_its_id(store: Store) -> None:
    """What the run answers, to resume it after a restart."""
    prompts = await store.approvals.run_prompts("R1")
    assert [(p.id, p.sender, p.text, p.status) for p in prompts] == [
        ("M1", "alice", "delete web", "running")
    ]
    assert await store.approvals.run_prompts("R9") == []


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """``asyncai ARGS`` in this process: the exit status and the lines printed."""
    from daemon.cli import main

    status = main(list(args))
    return status, capsys.readouterr().out.splitlines()


async def test_asyncai_approvals_lists_requests_and_their_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table row per pending call with the decision; --pending; --json without the
    snapshot's bytes; a clear line when there is nothing."""
    path = tmp_path / "a.db"
    async with Store(path) as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-30T08:00:00Z")
        await store.runs.start_run("R1", "#ops", "T1", ["M1"])
        await store.approvals.add_approval(request("aaaaaa", requested="2026-11-30T08:00:01Z"))
        await store.approvals.add_approval(request("bbbbbb", requested="2026-11-30T08:00:02Z"))
        await store.approvals.decide_approval("aaaaaa", "denied", by="alice", reason="no")
    status, lines = await asyncio.to_thread(run_cli, capsys, "approvals", "--db", str(path))
    assert status == 0
    assert lines[0].split() == [
        "REQUESTED",
        "ID",
        "THREAD",
        "TOOL",
        "ARGUMENTS",
        "DECISION",
        "BY",
        "DECIDED",
    ]
    newest, oldest = lines[1].split(), lines[2].split()
    assert newest[2:5] == ["bbbbbb", "#ops/T1", "kcp.delete_object"]
    assert newest[-3:] == ["pending", "-", "-"]
    assert oldest[2:4] == ["aaaaaa", "#ops/T1"]
    assert oldest[-4:-2] == ["denied", "alice"]
    _, pending = await asyncio.to_thread(
        run_cli, capsys, "approvals", "--db", str(path), "--pending", "--json"
    )
    [only] = [json.loads(line) for line in pending]
    assert (only["id"], only["status"], only["snapshot_bytes"]) == ("bbbbbb", "pending", 3)
    assert "snapshot" not in only
    assert "conversation" not in only


async def test_asyncai_approvals_on_an_empty_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No request yet is one line, not an empty table."""
    path = tmp_path / "a.db"
    async with Store(path):
        pass
    _, lines = await asyncio.to_thread(run_cli, capsys, "approvals", "--db", str(path))
    assert lines == ["no approval requests yet"]
    _, lines = await asyncio.to_thread(run_cli, capsys, "approvals", "--db", str(path), "--pending")
    assert lines == ["no pending approval requests"]


# ---- "always" rules (issue 29) -----------------------------------------------------------


def always(rule_id: str = "r4ule2", tool: str = "kcp.delete_object", **changes: str) -> NewRule:
    """A rule !approve k3x9ab always leaves in #ops."""
    fields = {
        "id": rule_id,
        "channel": "#ops",
        "tool": tool,
        "granted_by": "alice",
        "granted": "2026-11-30T08:01:00Z",
        "request_id": "k3x9ab",
    }
    return NewRule(**{**fields, **changes})


async def test_a_rule_is_stored_with_its_decision_in_one_transaction(store: Store) -> None:
    """!approve ID always: the decision and its rule, both or neither; a request decided
    already leaves no rule behind."""
    await store.approvals.add_approval(request())
    assert await store.approvals.decide_approval("k3x9ab", "approved", by="alice", rules=[always()])
    [rule] = await store.rules.rules()
    assert (rule.id, rule.channel, rule.tool, rule.granted_by, rule.request_id) == (
        "r4ule2",
        "#ops",
        "kcp.delete_object",
        "alice",
        "k3x9ab",
    )
    assert rule.granted == "2026-11-30T08:01:00.000Z"
    assert (rule.revoked, rule.shared) == (None, None)
    # decided already: the second decision and its rule are not stored
    second = always("zzzzzz", tool="kcp.scale_object")
    assert not await store.approvals.decide_approval("k3x9ab", "approved", by="bob", rules=[second])
    assert [r.id for r in await store.rules.rules()] == ["r4ule2"]


async def test_a_bad_rule_rolls_its_decision_back(store: Store) -> None:
    """A rule that cannot be stored leaves the request pending (the approval waits for it)."""
    await store.approvals.add_approval(request())
    with pytest.raises(StoreError):
        await store.approvals.decide_approval(
            "k3x9ab", "approved", by="alice", rules=[always(granted="not a time")]
        )
    got = await store.approvals.get_approval("k3x9ab")
    assert got is not None
    assert got.status == "pending"
    assert await store.rules.rules() == []


async def test_one_rule_in_force_per_channel_and_tool_and_revoked_ones_are_kept(
    store: Store,
) -> None:
    """A second rule for the same channel and tool is skipped; revoking keeps the row,
    and the tool may then be allowed again."""
    await store.rules.add_rules([always()])
    await store.rules.add_rules([always("second")])
    await store.rules.add_rules([always("devrule", channel="#dev")])
    assert [r.id for r in await store.rules.rules()] == ["devrule", "r4ule2"]
    assert await store.rules.revoke_rule("r4ule2", by="root")
    assert not await store.rules.revoke_rule("r4ule2", by="root")  # once
    assert not await store.rules.revoke_rule("nope", by="root")
    assert [r.id for r in await store.rules.rules()] == ["devrule"]
    await store.rules.add_rules([always("again")])
    every = {r.id: r for r in await store.rules.rules(revoked=True)}
    assert set(every) == {"devrule", "r4ule2", "again"}
    assert every["r4ule2"].revoked_by == "root"
    assert every["r4ule2"].revoked is not None
    got = await store.rules.get_rule("again")
    assert got is not None
    assert got.revoked is None


async def test_rules_copied_from_a_broker_are_marked_shared(store: Store) -> None:
    """copy_in stores the broker's rules as shared; mark_shared notes a local one."""
    await store.rules.add_rules([always()])
    await store.rules.copy_in([always("fromb2", tool="kcp.scale_object", granted_by="bob")])
    await store.rules.mark_shared(["r4ule2"])
    assert all(r.shared is not None for r in await store.rules.rules())


async def test_the_rules_table_comes_with_migration_8(tmp_path: Path) -> None:
    """A version-7 database with a decided request gains the empty rules table."""
    path = tmp_path / "old.db"
    async with Store(path, migrations=MIGRATIONS[:7]) as old:
        await old.runs.record_prompt("#ops", "T1", "M1", "a", "x", "2026-11-29T18:00:00Z")
        await old.runs.start_run("R1", "#ops", "T1", ["M1"])
        await old.approvals.add_approval(request())
    async with Store(path) as store:
        assert await store.rules.rules() == []
        got = await store.approvals.get_approval("k3x9ab")
        assert got is not None
        assert await store.approvals.decide_approval(
            "k3x9ab", "approved", by="alice", rules=[always()]
        )
        assert [r.id for r in await store.rules.rules()] == ["r4ule2"]
    assert MIGRATIONS[7].name == "approval_rules"
