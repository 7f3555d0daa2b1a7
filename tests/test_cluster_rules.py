"""The ``!approve ID always`` rules across a cluster, and the channel policies its members
must share (issue 29), on a real nats-server and real SQLite.

A rule one daemon grants is on the broker before its decision, so the other
daemon applies it at its next refresh and keeps a copy in its SQLite; a rule
revoked in one daemon's SQLite (``asyncai approvals --revoke``) leaves the
broker, and then the other daemon's copy; a member whose policy digests
differ is refused at join with the channel named (a real daemon exits 1 with
that line).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from daemon.app import Daemon
from daemon.approvals import ApprovalPolicy
from daemon.cluster.errors import ClusterError
from daemon.cluster.node import ClusterNode
from daemon.cluster.policies import (
    PolicyMismatch,
    check_join,
    differing,
    presence,
    read_presence,
    read_started,
)
from daemon.cluster.rules import REVOKED_ELSEWHERE, ClusterRules
from daemon.config import load_config
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.ports import InboundMessage
from daemon.runtime.runs import RunResult
from sessions import NewRule, Store
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.nats_server import NatsServer
from tests.test_cluster_approvals import Daemon as Member
from tests.test_cluster_approvals import _request


def rule(rule_id: str, tool: str = "test.append_line", channel: str = "#ops") -> NewRule:
    """A rule alice granted with request k3x9ab."""
    return NewRule(rule_id, channel, tool, "alice", "2026-12-01T22:00:00Z", "k3x9ab")


async def test_a_rule_granted_on_one_daemon_applies_on_the_other_until_revoked(
    tmp_path: Path,
) -> None:
    """Shared on the broker, then decided in A's SQLite; B reads it and copies it in;
    revoked in B's SQLite, it leaves the broker at B's next refresh and A's copy at
    A's; a rule A held before joining (never shared) is put on the broker."""
    async with (
        NatsServer() as broker,
        Store(tmp_path / "a.db") as store_a,
        Store(tmp_path / "b.db") as store_b,
    ):
        nc = Client()
        await nc.connect(broker.url)
        try:
            js = nc.jetstream()
            a = await ClusterRules(js, "asyncai", store_a.rules).open()
            b = await ClusterRules(js, "asyncai", store_b.rules).open()
            granted = rule("r4ule2")
            assert await a.share([granted])  # before the decision
            await store_a.rules.add_rules([granted])  # the decision's transaction, here
            assert [r.id for r in await b.in_force()] == ["r4ule2"]
            [copy] = await store_b.rules.rules()
            assert (copy.id, copy.tool, copy.granted_by) == ("r4ule2", "test.append_line", "alice")
            assert copy.shared is not None
            assert [r.id for r in await a.in_force()] == ["r4ule2"]
            [mine] = await store_a.rules.rules()
            assert mine.shared is not None  # known to be on the broker now

            # a second grant for the same tool elsewhere: the first one stands
            assert await b.share([rule("second")])
            assert [r.id for r in await a.in_force()] == ["r4ule2"]

            # revoked in B's database (the CLI): off the broker, then off A
            assert await store_b.rules.revoke_rule("r4ule2", by="root")
            assert await b.in_force() == []
            assert await a.in_force() == []
            [gone] = await store_a.rules.rules(revoked=True)
            assert (gone.id, gone.revoked_by) == ("r4ule2", REVOKED_ELSEWHERE)

            # a rule A kept from before it joined: put on the broker at its refresh
            await store_a.rules.add_rules([rule("before", tool="test.erase")])
            assert [r.id for r in await a.in_force()] == ["before"]
            assert [r.id for r in await b.in_force()] == ["before"]

            # a decision lost after its rule was shared: the rule is withdrawn
            lost = rule("lostrl", channel="#dev")
            assert await a.share([lost])
            await a.withdraw([lost])
            assert [r.id for r in await b.in_force()] == ["before"]
        finally:
            await nc.close()


async def test_a_broker_that_is_away_shares_nothing(tmp_path: Path) -> None:
    """share() says False when the broker does not take the rule (nothing is decided
    then); in_force() raises, and the desk keeps the rules it had."""
    async with NatsServer() as broker, Store(tmp_path / "a.db") as store:
        nc = Client()
        await nc.connect(broker.url)
        rules = await ClusterRules(nc.jetstream(), "asyncai", store.rules).open()
        await nc.close()
        assert not await rules.share([rule("r4ule2")])
        with pytest.raises(ClusterError):
            await rules.in_force()


def test_policies_differ_by_channel_and_a_missing_section_means_the_global_one() -> None:
    """A channel with a section on one side only is compared with the other's global
    policy; the refusal names the channel and the member."""
    mine = {"": "g1", "#ops": "o1"}
    assert differing(mine, {"": "g1", "#ops": "o1"}) == []
    assert differing(mine, {"": "g1", "#ops": "o2"}) == ["#ops"]
    assert differing(mine, {"": "g1"}) == ["#ops"]
    assert differing({"": "g1", "#dev": "g1"}, {"": "g1"}) == []  # the same as the global
    assert differing(mine, {"": "g2", "#ops": "o1"}) == [""]
    with pytest.raises(PolicyMismatch, match=r"channel #ops differs from member 0123abcd's"):
        check_join(mine, {"0123abcdef": presence({"": "g1", "#ops": "o2"})}, me="me")
    check_join(mine, {"me": presence({"": "x"}), "old": b"alive"}, me="me")  # not compared


async def test_a_member_with_other_channel_policies_is_refused_at_join(tmp_path: Path) -> None:
    """The second daemon's #ops policy differs: it does not join (and leaves no member
    key); one with the same policies joins."""
    async with NatsServer() as broker, Store(tmp_path / "a.db") as store:

        async def join(name: str, policies: dict[str, str]) -> ClusterNode:
            state = tmp_path / name
            state.mkdir()
            return await ClusterNode.open(
                broker.url,
                store,
                token=None,
                nick="asyncai",
                takeover_seconds=6.0,
                scope_key=b"k" * 32,
                max_scope_bytes=1 << 20,
                scope_retention=0.0,
                state_dir=state,
                policies=policies,
            )

        first = await join("one", {"": "g", "#ops": "ops-v1"})
        try:
            with pytest.raises(PolicyMismatch) as refused:
                await join("two", {"": "g", "#ops": "ops-v2"})
            assert "channel #ops differs from member" in str(refused.value)
            assert await first.leases.live_members() == {first.leases.member}
            third = await join("three", {"": "g", "#ops": "ops-v1"})
            await third.close()
        finally:
            await first.close()


def _daemon_config(state: Path, url: str, model_url: str, ops: str) -> Path:
    """A daemon of the cluster; ``ops``: its #ops approvals table's lines."""
    state.mkdir()
    path = state / "asyncai.toml"
    path.write_text(f"""
[model]
base_url = "{model_url}"
model = "fake-model"
api_key = "test-key"
retries = 0

[channels]
url = "{url}"
nick = "asyncai"
channels = ["#ops", "#dev"]

[runtime]
shutdown_grace = 1

[sessions]
db = "{state / "asyncai.db"}"

[channel."#ops".approvals]
{ops}
""")
    return path


async def test_a_daemon_with_other_approvers_in_ops_does_not_start(tmp_path: Path, capsys) -> None:
    """Two daemons on one broker: the second one's #ops approvers differ, so it exits 1
    with one line naming #ops (and is no member); a third with the first's policies
    starts and joins."""
    async with NatsServer() as broker, FakeOpenAI() as fake:

        def daemon(name: str, ops: str) -> Daemon:
            path = _daemon_config(tmp_path / name, broker.url, fake.base_url, ops)
            return Daemon(load_config(path, environ={}), executor=FakeToolExecutor(), env={})

        first = daemon("one", 'approvers = ["alice"]')
        await first.start()
        try:
            second = daemon("two", 'approvers = ["alice", "mallory"]')
            assert await second.run() == 1
            err = capsys.readouterr().err
            assert "asyncai: the daemon did not start: not joining the cluster: channel #ops" in (
                err
            )
            third = daemon("three", 'approvers = ["alice"]')
            await third.start()
            await third.aclose()
        finally:
            await first.aclose()


class RulingMember(Member):
    """One daemon's part (:class:`tests.test_cluster_approvals.Daemon`), its desk keeping
    "always" rules on the broker; alice is #ops' approver."""

    def __init__(self, nc: Client, store: Store, member: str):
        super().__init__(nc, store, member)
        self.rules = ClusterRules(nc.jetstream(), "asyncai", store.rules)
        self.mirror.rules = self.rules

        async def resume(*_: object) -> RunResult:
            raise AssertionError("not resumed in these tests")

        self.desk = ApprovalDesk(
            store=store.approvals,
            publisher=self.publisher,
            policy=ApprovalPolicy(),
            resume=resume,
            mirror=self.mirror,
            policies=lambda channel: ApprovalPolicy(approvers=("alice",)),
            rules=store.rules,
        )
        self.desk.bind(schedule=self.jobs.append, hold=lambda c, t: self.held.append((c, t)))
        self.mirror.bind(self.desk, None)

    async def open(self) -> RulingMember:
        await super().open()
        await self.rules.open()
        return self


async def test_always_on_one_daemon_is_applied_by_the_other(tmp_path: Path, nc: Client) -> None:
    """alice's "!approve k3x9ab always" on a: the rule is on the broker and in a's SQLite
    with the decision, a's gate applies it at once, b's after its next refresh; b's
    SQLite gets a copy that `asyncai approvals --rules` would list there."""
    a = await RulingMember(nc, await Store(tmp_path / "a.db").open(), "a").open()
    b = await RulingMember(nc, await Store(tmp_path / "b.db").open(), "b").open()
    try:
        await a.store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-30T08:00:00Z")
        await a.store.runs.start_run("R1", "#ops", "T1", ["M1"])
        await a.leases.claim("#ops", "T1")
        await a.store.approvals.add_approval(_request())
        await a.mirror.shared(_request(), ["M1"])
        await b.desk.refresh_rules()
        assert len(b.desk.rules) == 0

        always = InboundMessage("#ops", "M2", "T1", "alice", "!approve k3x9ab always")
        assert await a.desk.handle(always)
        [job] = a.jobs
        assert job.outcome == "approved"
        [rule] = await a.store.rules.rules()
        assert (rule.channel, rule.tool, rule.request_id) == ("#ops", "test.append_line", "k3x9ab")
        assert a.desk.rules.find("#ops", "test.append_line") is not None
        [said] = a.publisher.sent
        assert said.text.startswith(f"From now on test.append_line (rule {rule.id})")

        await b.desk.refresh_rules()
        found = b.desk.rules.find("#ops", "test.append_line")
        assert found is not None
        assert found.id == rule.id
        assert [r.id for r in await b.store.rules.rules()] == [rule.id]
        assert b.desk.rules.find("#dev", "test.append_line") is None  # that channel only
        await a.desk.close()
        await b.desk.close()
    finally:
        await a.store.aclose()
        await b.store.aclose()


def test_a_member_key_says_when_its_daemon_started() -> None:
    """The console's Health page reads each member's start from its key; a key without
    it (an older asyncai, or a plain value) says nothing, and the digests read the same."""
    value = presence({"": "g1"}, started=1764633600.25)
    assert read_started(value) == 1764633600.25
    assert read_presence(value) == {"": "g1"}
    assert read_started(presence({"": "g1"})) is None
    assert read_started(b"alive") is None
    assert read_started(b'{"started": "soon"}') is None
