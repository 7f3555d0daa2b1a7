"""Each channel's approvals and the ``!approve ID always`` rules, end to end (issue 29).

A real hub, store, MCP server over stdio, Monty pool and backend in this
process; only the model is scripted. ``#ops`` has its own approvers
(``[channel."#ops".approvals]``); ``#dev`` has no section, so the global
``[approvals]`` (no approvers: each prompt's author decides) applies there.
The side effect of a mutating call is a line the test MCP server writes to a
file, so "made" and "never made" are read from the file.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from channels.client import Message
from channels.hub import Hub
from daemon.app import Daemon
from daemon.approvals import ApprovalPolicy
from daemon.config import load_config
from daemon.runtime.context import ResumeJob
from daemon.runtime.desk import RULES_REFRESH, ApprovalDesk
from daemon.runtime.runs import RunResult
from sessions import NewApproval, NewRule, Store, StoredRule
from sessions.ids import iso_utc
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.fakes.runtime_helpers import FakePublisher, msg
from tests.test_daemon import WAIT, Person, write_config
from tests.test_daemon_approvals import lines_of, request_id

ASYNCAI = Path(sys.executable).with_name("asyncai")
NOW = datetime.now(UTC)
OPS_APPROVERS = '\n[channel."#ops".approvals]\napprovers = ["alice", "carol"]\n'


def rules_config(path: Path, *, hub_url: str, model_url: str, ops: str = OPS_APPROVERS) -> Path:
    """The test daemon in #ops and #dev; ``ops``: the lines of #ops' approvals table."""
    config = write_config(path, hub_url=hub_url, model_url=model_url)
    text = config.read_text().replace('channels = ["#ops"]', 'channels = ["#ops", "#dev"]')
    config.write_text(text + "\n[approvals]\nexpire_after = 600\n" + ops)
    return config


class Member(Person):
    """A person in one channel (``#ops`` or ``#dev``)."""

    def __init__(self, url: str, nick: str, channel: str = "#ops"):
        super().__init__(url, nick=nick)
        self.channel = channel

    async def start(self) -> None:
        """Connect and follow the channel."""
        await self.client.connect()
        await self.client.subscribe(self.channel)
        self._reader = asyncio.create_task(self._read())

    async def say(self, text: str, thread: str | None = None) -> tuple[str, str]:
        """Publish in the channel; the new message's ``(id, thread)``."""
        ack = await self.client.publish(self.channel, text, thread=thread)
        return ack.id, ack.thread


async def people(url: str, *who: tuple[str, str]) -> list[Member]:
    """Members (nick, channel), connected."""
    members = [Member(url, nick, channel) for nick, channel in who]
    for member in members:
        await member.start()
    return members


def append(target: Path, line: str) -> ToolCalls:
    """The model's snippet that appends ``line`` to ``target`` (a not-read-only call)."""
    code = f"await append_line(path={str(target)!r}, line={line!r})\n'ok'"
    return ToolCalls(("run_code", {"code": code}))


async def asyncai(*argv: str) -> tuple[int, str]:
    """The real ``asyncai`` command, as the operator runs it beside the daemon."""
    process = await asyncio.create_subprocess_exec(
        ASYNCAI, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(WAIT):
        out, err = await process.communicate()
    assert err == b""
    return process.returncode or 0, out.decode()


async def asks(person: Member, text: str) -> tuple[str, Message]:
    """Publish a prompt whose run asks for approval; (its thread, the request)."""
    mid, request = await person.ask(text)
    assert request.text.splitlines()[0] == "This run wants to make a call that needs approval:"
    return mid, request


async def test_ops_asks_and_only_its_approvers_decide(tmp_path: Path) -> None:
    """In #ops, bob's own request is decided by alice or carol only; in #dev, which has
    no approvers list, bob decides his own and alice may not."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = rules_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        bob, carol, bob_dev, alice_dev = await people(
            hub.url, ("bob", "#ops"), ("carol", "#ops"), ("bob", "#dev"), ("alice", "#dev")
        )
        try:
            target = tmp_path / "ops.txt"
            fake.add(append(target, "ops"), Reply("Appended in ops."))
            mid, request = await asks(bob, "append a line")
            assert "Who may decide: alice, carol." in request.text
            rid = request_id(request.text)
            assert request.text.splitlines()[-3:] == [  # allow once, allow always, deny
                f"!approve {rid}",
                f"!approve {rid} always",
                f"!deny {rid} [reason]",
            ]
            await bob.say(f"!approve {rid}", thread=mid)
            [_, refusal] = await bob.reply_in(mid, 2)
            assert refusal.text == f"bob may not decide request {rid}: only alice, carol may."
            assert lines_of(target) == []
            await carol.say(f"!approve {rid}", thread=mid)
            [*_, reply] = await bob.reply_in(mid, 3)
            assert reply.text == "Appended in ops."
            assert lines_of(target) == ["ops"]

            dev = tmp_path / "dev.txt"
            fake.add(append(dev, "dev"), Reply("Appended in dev."))
            mid, request = await asks(bob_dev, "append a line here")
            assert "Who may decide: bob." in request.text
            rid = request_id(request.text)
            assert "always" not in request.text  # nobody may say it in #dev
            await alice_dev.say(f"!approve {rid}", thread=mid)
            [_, refusal] = await bob_dev.reply_in(mid, 2)
            assert refusal.text == f"alice may not decide request {rid}: only bob may."
            _, reply = await bob_dev.ask(f"!approve {rid}", thread=mid)
            assert reply.text == "Appended in dev."
            assert lines_of(dev) == ["dev"]
        finally:
            for person in (bob, carol, bob_dev, alice_dev):
                await person.close()
            await daemon.aclose()


async def test_always_stops_the_asking_in_that_channel_only_over_a_restart_until_revoked(
    tmp_path: Path,
) -> None:
    """alice's "!approve ID always" in #ops: the call runs, and the next append_line in
    #ops runs without asking, after a restart too; in #dev the same tool still asks,
    and there (no approvers list) "always" is refused with one line and decides
    nothing. `asyncai approvals --revoke` takes the rule out of the running daemon
    within RULES_REFRESH: #ops asks again."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = rules_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        target = tmp_path / "lines.txt"
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice, alice_dev = await people(hub.url, ("alice", "#ops"), ("alice", "#dev"))
        try:
            fake.add(append(target, "first"), Reply("First."))
            mid, request = await asks(alice, "append first")
            rid = request_id(request.text)
            await alice.say(f"!approve {rid} always", thread=mid)
            [_, granted, reply] = await alice.reply_in(mid, 3)
            [rule] = await daemon.store.rules.rules()
            assert (rule.channel, rule.tool, rule.granted_by, rule.request_id) == (
                "#ops",
                "test.append_line",
                "alice",
                rid,
            )
            assert granted.text == (
                f"From now on test.append_line (rule {rule.id}) runs in #ops without asking; "
                f"asyncai approvals --revoke {rule.id} removes it."
            )
            assert reply.text == "First."
            approval = await daemon.store.approvals.get_approval(rid)
            assert approval is not None
            assert (approval.status, approval.decided_by) == ("approved", "alice")

            fake.add(append(target, "second"), Reply("Second, without asking."))
            _, reply = await alice.ask("append second")
            assert reply.text == "Second, without asking."
            assert lines_of(target) == ["first", "second"]

            # #dev: the same tool asks; "always" needs an approvers list there
            fake.add(append(target, "dev"), Reply("Dev."))
            mid, request = await asks(alice_dev, "append in dev")
            rid = request_id(request.text)
            _, refused = await alice_dev.ask(f"!approve {rid} always", thread=mid)
            assert refused.text == (
                "alice may not say 'always' here: #dev has no approvers list "
                "([approvals] approvers), so each prompt's author decides their own requests "
                f"and nobody may allow a tool for the whole channel; !approve {rid} approves "
                "this request only."
            )
            pending = await daemon.store.approvals.get_approval(rid)
            assert pending is not None
            assert pending.status == "pending"
            _, reply = await alice_dev.ask(f"!approve {rid}", thread=mid)
            assert reply.text == "Dev."
            assert [r.id for r in await daemon.store.rules.rules()] == [rule.id]
        finally:
            await alice.close()
            await alice_dev.close()
            await daemon.aclose()

        # a restart: the rule is read back from SQLite
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        (alice,) = await people(hub.url, ("alice", "#ops"))
        try:
            fake.add(append(target, "after restart"), Reply("After the restart."))
            _, reply = await alice.ask("append after the restart")
            assert reply.text == "After the restart."
            assert lines_of(target)[-1] == "after restart"

            db = str(tmp_path / "asyncai.db")
            status, out = await asyncai("approvals", "--db", db, "--rules")
            assert status == 0
            assert rule.id in out
            status, out = await asyncai("approvals", "--db", db, "--revoke", rule.id)
            revoked = time.monotonic()  # committed: the command has returned
            assert status == 0
            assert out.startswith(f"revoked rule {rule.id}")
            desk = daemon.desk
            assert desk is not None
            async with asyncio.timeout(WAIT):
                while True:  # the desk's next refresh reads the rule revoked
                    if desk.rules.find("#ops", "test.append_line") is None:
                        break
                    await asyncio.sleep(0.05)
            # within one refresh, and the read it makes (a loaded machine is slow)
            assert time.monotonic() - revoked < RULES_REFRESH + 2.0

            fake.add(append(target, "asks again"), Reply("Asked again."))
            mid, request = await asks(alice, "append once more")
            _, reply = await alice.ask(f"!deny {request_id(request.text)}", thread=mid)
            assert "asks again" not in lines_of(target)
        finally:
            await alice.close()
            await daemon.aclose()


async def test_a_deny_glob_beats_always(tmp_path: Path) -> None:
    """A rule in force for test.erase in #ops, and #ops' approvals deny test.erase: the
    call is refused, never made (the operator's refusal wins over a chat decision)."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        ops = OPS_APPROVERS + 'deny = ["test.erase"]\n'
        path = rules_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, ops=ops
        )
        async with Store(tmp_path / "asyncai.db") as store:  # granted before the deny glob
            rule = NewRule("r4ule2", "#ops", "test.erase", "alice", "2026-12-01T22:00:00Z", "x")
            await store.rules.add_rules([rule])
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        (alice,) = await people(hub.url, ("alice", "#ops"))
        target = tmp_path / "keep.txt"
        target.write_text("keep\n")
        try:
            desk = daemon.desk
            assert desk is not None
            assert desk.rules.find("#ops", "test.erase") is not None
            fake.add(
                ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})),
                Reply("Could not erase."),
            )
            _, reply = await alice.ask("erase it")
            assert (
                "test.erase is refused by [approvals] deny = 'test.erase'"
                in (fake.requests[-1]["messages"][-1]["content"])
            )
            assert "refused" in reply.text
            assert lines_of(target) == ["keep"]
        finally:
            await alice.close()
            await daemon.aclose()


class StaleRules:
    """The store's rules, read at once but handed back only when ``release`` is set: a
    refresh that read the table before a grant committed."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.release = asyncio.Event()
        self.reading = asyncio.Event()

    async def rules(self, *, revoked: bool = False) -> list[StoredRule]:
        """What the table held when asked, after ``release``."""
        found = await self.inner.rules(revoked=revoked)
        self.reading.set()
        await self.release.wait()
        return found


async def test_a_refresh_read_before_a_grant_does_not_drop_the_rule(tmp_path: Path) -> None:
    """The desk reads its rules while alice's "!approve ID always" commits: the stale
    read is not applied, so the new rule stays in force (no call asks in between)."""
    async with Store(tmp_path / "asyncai.db") as store:
        first = msg("first")
        await store.runs.record_prompt("#ops", first.thread, first.id, "alice", "x", iso_utc(NOW))
        await store.runs.start_run("R1", "#ops", first.thread, [first.id])
        await store.approvals.add_approval(
            NewApproval(
                id="abc123",
                run_id="R1",
                channel="#ops",
                thread_id=first.thread,
                requested_by="alice",
                expires=iso_utc(NOW + timedelta(days=1)),
                calls=[{"call_id": 0, "tool": "erase", "server": "test", "arguments": {}}],
                conversation={},
            )
        )
        stale = StaleRules(store.rules)
        jobs: list[ResumeJob] = []

        async def resume(*_: object) -> RunResult:
            raise AssertionError("not resumed here")

        desk = ApprovalDesk(
            store=store.approvals,
            publisher=FakePublisher(),
            policy=ApprovalPolicy(),
            resume=resume,
            policies=lambda channel: ApprovalPolicy(approvers=("alice",)),
            rules=stale,
        )
        desk.bind(schedule=jobs.append, hold=lambda c, t: None)
        refresh = asyncio.create_task(desk.refresh_rules())
        await stale.reading.wait()  # read: no rule yet
        assert await desk.handle(msg("!approve abc123 always", thread=first.thread))
        assert desk.rules.find("#ops", "test.erase") is not None
        stale.release.set()
        await refresh
        assert desk.rules.find("#ops", "test.erase") is not None
        await desk.refresh_rules()  # the next read has it from the table
        assert desk.rules.find("#ops", "test.erase") is not None
        assert [j.outcome for j in jobs] == ["approved"]
        await desk.close()
