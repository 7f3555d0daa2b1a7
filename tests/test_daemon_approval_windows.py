"""No ``!approve`` is lost in any state, and a request that cannot be published ends the
run (issue 26 §2.4, §2.5).

The windows a decision may arrive in: during a restart (the daemon down, or just
started with a prompt queued behind the paused run, which must not overtake it),
while the request's own publish still waits for the hub's ack, and while another
run of the thread is active. The daemon tests run a real hub, store, MCP server
over stdio, Monty pool and backend in this process (only the model is scripted);
the channel is the real client, wrapped where a test must hold or fail the
request's publish. The last window is the runtime's own state, reached through
the desk's public ``adopt`` (a request stored for a thread that has a run going).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from channels.client import PublishAck, WebSocketChannel
from channels.errors import ChannelTimeoutError, ProtocolError
from channels.frames import ErrorCode
from daemon.app import Daemon, running
from daemon.approvals import ApprovalPolicy
from daemon.config import load_config
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.ports import InboundMessage, RuntimeOptions
from daemon.runtime.runs import RunResult
from daemon.runtime.scheduler import Runtime
from daemon.runtime.store import SessionsRuntimeStore
from sessions.approvals import NewApproval
from sessions.ids import iso_utc
from sessions.store import Store
from tests.fakes.fake_openai import Reply, ToolCalls
from tests.fakes.runtime_helpers import FakePublisher, ScriptedModel, msg
from tests.test_daemon import WAIT, Person, SwitchedChannel, settled, world
from tests.test_daemon_approvals import approvals_config, lines_of, request_id

REQUEST_MARK = "needs approval"  # in the first line of every approval request
NOW = datetime.now(UTC)


class RequestChannel(SwitchedChannel):
    """The real client; an approval request's publish can be held before its ack
    returns (``hold``), or fail (``fail_with``) instead of going out."""

    def __init__(self, inner: WebSocketChannel):
        super().__init__(inner)
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()  # set once a request went out and waits for hold
        self.fail_with: BaseException | None = None

    async def publish(self, channel: str, text: str, **kwargs: Any) -> PublishAck:
        """As the inner client, but an approval request may be held or fail."""
        if REQUEST_MARK not in text:
            return await self.inner.publish(channel, text, **kwargs)
        if self.fail_with is not None:
            raise self.fail_with
        ack = await self.inner.publish(channel, text, **kwargs)
        if self.hold is not None:
            self.held.set()
            await self.hold.wait()
        return ack


async def until_decided(daemon: Daemon, rid: str, status: str) -> None:
    """Until request ``rid`` is stored with ``status`` (the store signals nothing)."""
    async with asyncio.timeout(WAIT):
        while True:
            approval = await daemon.store.approvals.get_approval(rid)
            if approval is not None and approval.status == status:
                return
            await asyncio.sleep(0.01)


async def until_recorded(daemon: Daemon, prompt_id: str) -> None:
    """Until the daemon stored prompt ``prompt_id``."""
    async with asyncio.timeout(WAIT):
        while not await daemon.store.queries.get_prompts([prompt_id]):  # noqa: ASYNC110 -- bounded polling of the store, which signals nothing
            await asyncio.sleep(0.01)


def daemon_config(tmp_path: Path, hub_url: str, model_url: str) -> Path:
    """A daemon with the test MCP server and [approvals], a short shutdown grace."""
    path = approvals_config(
        tmp_path / "asyncai.toml", hub_url=hub_url, model_url=model_url, expire_after=600
    )
    path.write_text(path.read_text().replace("shutdown_grace = 2.0", "shutdown_grace = 0.2"))
    return path


@pytest.mark.parametrize("approved", ["while down", "after the restart"])
async def test_after_a_restart_the_paused_run_goes_first_and_its_approve_is_honoured(
    tmp_path: Path, approved: str
):
    """A run paused for approval with a prompt queued behind it, the daemon restarted:
    nothing runs before the decision (the queued prompt does not overtake), and the
    !approve, sent while the daemon was down or once it is up again, resumes the
    paused run first, then the queued prompt runs."""
    async with world(tmp_path) as (hub, fake, _):
        path = daemon_config(tmp_path, hub.url, fake.base_url)
        target = tmp_path / "erase.txt"
        fake.add(
            ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})),
            Reply("Erased."),
            Reply("Yes, it is erased."),
        )
        alice = Person(hub.url)
        await alice.start()
        try:
            async with running(Daemon(load_config(path, environ={}), env={})) as first:
                mid, asked = await alice.ask("erase it")
                rid = request_id(asked.text)
                queued, _ = await alice.say("is it erased yet?", thread=mid)
                await until_recorded(first, queued)
            if approved == "while down":
                await alice.say(f"!approve {rid}", thread=mid)
            async with running(Daemon(load_config(path, environ={}), env={})) as second:
                assert second.runtime is not None
                counts = second.runtime.counts()
                assert (counts.active_runs, counts.waiting_threads) == (0, 0)
                assert len(fake.requests) == 1  # the model was not asked for the queued one
                if approved == "after the restart":
                    await alice.say(f"!approve {rid}", thread=mid)
                replies = await alice.reply_in(mid, 3)
            assert [r.text for r in replies] == [asked.text, "Erased.", "Yes, it is erased."]
            assert [r.reply_to for r in replies[1:]] == [mid, queued]
            assert lines_of(target) == ["erased"]
            assert not fake.script
        finally:
            await alice.close()


async def test_an_approve_while_the_requests_publish_waits_for_its_ack_is_honoured(
    tmp_path: Path,
):
    """The hub delivered the request, but its ack has not reached the daemon yet when
    alice's !approve is taken: once the ack comes, the run resumes and answers."""
    async with world(tmp_path) as (hub, fake, _):
        path = daemon_config(tmp_path, hub.url, fake.base_url)
        target = tmp_path / "erase.txt"
        fake.add(
            ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})),
            Reply("Erased."),
        )
        channel = RequestChannel(WebSocketChannel(hub.url, nick="asyncai"))
        channel.hold = asyncio.Event()
        await channel.inner.connect()
        alice = Person(hub.url)
        await alice.start()
        try:
            config = load_config(path, environ={})
            async with running(Daemon(config, channel=channel, env={})) as daemon:
                mid, asked = await alice.ask("erase it")
                assert channel.held.is_set()
                rid = request_id(asked.text)
                await alice.say(f"!approve {rid}", thread=mid)
                await until_decided(daemon, rid, "approved")
                channel.hold.set()  # now the request's ack arrives
                [_, reply] = await alice.reply_in(mid, 2)
                assert reply.text == "Erased."
                assert lines_of(target) == ["erased"]
        finally:
            await alice.close()


@pytest.mark.parametrize(
    ("failure", "shown"),
    [
        (ChannelTimeoutError("no ack from the hub within 60s"), "ChannelTimeoutError: no ack"),
        (
            ProtocolError(ErrorCode.TOO_LARGE, "frame too large"),
            "PublishRefused: the hub refused the message",
        ),
    ],
)
async def test_a_request_that_cannot_be_published_fails_the_run_with_a_notice(
    tmp_path: Path, failure: BaseException, shown: str
):
    """The request's publish fails (no ack within publish_timeout, or refused): the
    run ends failed with a one-line notice saying so, its prompt is failed, the
    request is closed (stopped, never resumed) and the call is never made; the
    thread takes the next prompt."""
    async with world(tmp_path) as (hub, fake, _):
        path = daemon_config(tmp_path, hub.url, fake.base_url)
        target = tmp_path / "erase.txt"
        fake.add(ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})))
        channel = RequestChannel(WebSocketChannel(hub.url, nick="asyncai"))
        channel.fail_with = failure
        await channel.inner.connect()
        alice = Person(hub.url)
        await alice.start()
        try:
            config = load_config(path, environ={})
            async with running(Daemon(config, channel=channel, env={})) as daemon:
                mid, notice = await alice.ask("erase it")
                assert notice.text.startswith(
                    "Sorry, this run failed: the approval request could not be published (" + shown
                ), notice.text
                await settled(daemon, mid)  # the notice is published before the run is recorded
                [prompt] = await daemon.store.queries.get_prompts([mid])
                assert prompt.status == "failed"
                [approval] = await daemon.store.approvals.approvals()
                assert (approval.status, approval.decided_by) == ("stopped", "asyncai")
                assert approval.resumed is not None
                assert lines_of(target) == []
                fake.add(Reply("Still here."))
                _, reply = await alice.ask("are you there?", thread=mid)
                assert reply.text == "Still here."
        finally:
            await alice.close()


def _desk(store: Store, pub: FakePublisher, resumed: list[str]) -> ApprovalDesk:
    """The store's desk; a resumed run's id goes to ``resumed``, its reply is "resumed"."""

    async def resume(request: Any, paused: Any, decisions: Any) -> RunResult:
        resumed.append(request.run_id)
        return RunResult(reply="resumed")

    return ApprovalDesk(
        store=store.approvals,
        publisher=pub,
        policy=ApprovalPolicy(),
        resume=resume,
        publish_timeout=5,
    )


async def _paused_run(store: Store) -> InboundMessage:
    """Prompt "first", its run "paused-run" waiting on request abc123 (an erase, pending);
    the prompt."""
    first = msg("first")
    await store.runs.record_prompt("#ops", first.thread, first.id, "alice", "x", iso_utc(NOW))
    await store.runs.start_run("paused-run", "#ops", first.thread, [first.id])
    await store.approvals.add_approval(
        NewApproval(
            id="abc123",
            run_id="paused-run",
            channel="#ops",
            thread_id=first.thread,
            requested_by="alice",
            expires=iso_utc(NOW + timedelta(days=1)),
            calls=[{"call_id": 0, "tool": "erase", "server": "test", "arguments": {}, "why": "x"}],
            conversation={},
        )
    )
    return first


async def test_an_approve_while_another_run_of_the_thread_is_active_runs_after_it(
    tmp_path: Path,
):
    """A request of the thread is pending (adopted, as a cluster hands one over) while
    another run of the thread is active; the !approve taken meanwhile is kept, and
    the paused run goes on as soon as that run ends."""
    resumed: list[str] = []
    pub = FakePublisher()
    model = ScriptedModel()
    async with Store(tmp_path / "asyncai.db") as store:
        desk = _desk(store, pub, resumed)
        runtime = Runtime(
            store=SessionsRuntimeStore(store), publisher=pub, run=model, approvals=desk
        )
        first = await _paused_run(store)
        try:
            active = msg("meanwhile", thread=first.thread)
            assert await runtime.submit(active)
            await model.wait_started(1)
            assert await desk.adopt("abc123")
            await runtime.submit(msg("!approve abc123", thread=first.thread))
            approval = await store.approvals.get_approval("abc123")
            assert approval is not None
            assert approval.status == "approved"
            model.release(0)
            await pub.wait_for(2)
            assert [p.text for p in pub.sent] == ["re: meanwhile", "resumed"]
            assert resumed == ["paused-run"]
        finally:
            await runtime.shutdown(grace=1)
            await desk.close()


async def test_a_stop_of_queued_prompts_keeps_a_decided_run_that_waits_for_a_slot(
    tmp_path: Path,
):
    """One slot, taken by another thread's run; in this thread a request is approved
    (its run waits for the slot) and a prompt queued behind it. !stop drops the
    queued prompt, but the approved run keeps its place and goes on when the slot
    frees: the decision is not lost (nor left to resume at a later restart)."""
    resumed: list[str] = []
    pub = FakePublisher()
    model = ScriptedModel()
    async with Store(tmp_path / "asyncai.db") as store:
        desk = _desk(store, pub, resumed)
        runtime = Runtime(
            store=SessionsRuntimeStore(store),
            publisher=pub,
            run=model,
            approvals=desk,
            options=RuntimeOptions(max_concurrent_runs=1),
        )
        first = await _paused_run(store)
        try:
            assert await desk.adopt("abc123")
            assert await runtime.submit(msg("elsewhere"))  # takes the one slot
            await model.wait_started(1)
            queued = msg("and then?", thread=first.thread)
            assert await runtime.submit(queued)
            await runtime.submit(msg("!approve abc123", thread=first.thread))
            assert runtime.counts().waiting_threads == 1  # the approved run waits for the slot
            await runtime.submit(msg("!stop", thread=first.thread))
            [prompt] = await store.queries.get_prompts([queued.id])
            assert prompt.status == "failed"
            model.release(0)
            await pub.wait_for(3)
            assert [p.text for p in pub.sent] == [
                "Stopped by alice: nothing was run.",
                "re: elsewhere",
                "resumed",
            ]
            assert resumed == ["paused-run"]
            assert len(model.requests) == 1  # the dropped prompt never ran
        finally:
            await runtime.shutdown(grace=1)
            await desk.close()
