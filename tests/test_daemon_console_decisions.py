"""Decisions taken outside the thread (the console, issue 30) go through the desk's own
``!approve`` / ``!deny`` code: the same rights, the same effects, once; the thread
reads who decided, then what follows as if the command had been typed there.

In this process: a real hub, store, MCP server over stdio, Monty pool and backend;
only the model is scripted. The side effect is a line the test MCP server writes.
"""

from __future__ import annotations

import asyncio

from daemon.runtime.desk import ApprovalDesk, Decided
from tests.fakes.fake_openai import Reply, ToolCalls
from tests.test_daemon_approval_rules import append as append_snippet
from tests.test_daemon_approvals import lines_of, request_id, settled, world

__all__ = ["world"]  # the fixture, shared with test_daemon_approvals


def desk_of(daemon) -> ApprovalDesk:  # type: ignore[no-untyped-def]
    """The running daemon's approval desk."""
    desk = daemon.desk
    assert desk is not None
    return desk


async def test_approve_from_the_console_makes_the_call_once_and_the_thread_says_so(world):
    """The console's approve: the call is made once, the thread reads "alice approved
    request ID from the console." before the run's answer; a second decision (from the
    console or the chat) is refused with the chat's words and changes nothing."""
    daemon, fake, alice, _, tmp = world
    target = tmp / "console-approve.txt"
    fake.add(append_snippet(target, "one"), Reply("Appended one line."))
    mid, asked = await alice.ask("append a line")
    rid = request_id(asked.text)
    decided = await desk_of(daemon).decide(f"!approve {rid}", by="alice")
    assert decided == Decided(True, [f"alice approved request {rid} from the console."])
    [_, said, answer] = await alice.reply_in(mid, 3)
    assert said.text == f"alice approved request {rid} from the console."
    assert answer.text == "Appended one line."
    assert lines_of(target) == ["one"]
    again = await desk_of(daemon).decide(f"!deny {rid}", by="alice")
    assert again == Decided(False, [f"Request {rid} was already approved by alice."])
    _, chat = await alice.ask(f"!approve {rid}", thread=mid)
    assert chat.text == f"Request {rid} was already approved by alice."
    await settled(daemon, mid)
    assert lines_of(target) == ["one"]
    [row] = await daemon.store.audit.entries(thread=mid)
    assert (row.decision, row.decided_by, row.outcome) == ("approved", "alice", "ok")


async def test_deny_from_the_console_never_makes_the_call_and_gives_the_reason(world):
    """The console's deny with a reason: the model reads the chat's refusal with it."""
    daemon, fake, alice, _, tmp = world
    target = tmp / "console-deny.txt"
    fake.add(
        ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})),
        Reply("Not erased."),
    )
    mid, asked = await alice.ask("erase the file")
    rid = request_id(asked.text)
    decided = await desk_of(daemon).decide(f"!deny {rid} not  today", by="alice")
    assert decided.decided
    assert decided.lines == [f"alice denied request {rid} from the console: not today"]
    [_, said, answer] = await alice.reply_in(mid, 3)
    assert said.text == decided.lines[0]
    assert "PermissionError: denied by alice: not today" in answer.text
    assert lines_of(target) == []
    stored = await daemon.store.approvals.get_approval(rid)
    assert stored is not None
    assert (stored.status, stored.decided_by, stored.reason) == ("denied", "alice", "not today")
    await settled(daemon, mid)


async def test_a_nick_that_may_not_decide_is_refused_from_the_console_too(world):
    """bob may not decide alice's request: the console gets the chat's refusal, the thread
    nothing, the call waits; 'always' where the channel lists no approvers is refused with
    the chat's line; an unknown id and a command that is no decision are refused."""
    daemon, fake, alice, _, tmp = world
    target = tmp / "console-refused.txt"
    fake.add(append_snippet(target, "x"), Reply("Done."))
    mid, asked = await alice.ask("append x")
    rid = request_id(asked.text)
    desk = desk_of(daemon)
    refused = await desk.decide(f"!approve {rid}", by="bob")
    assert refused == Decided(False, [f"bob may not decide request {rid}: only alice may."])
    always = await desk.decide(f"!approve {rid} always", by="alice")
    assert not always.decided
    assert always.lines[0].startswith("alice may not say 'always' here: #ops has no approvers")
    assert (await desk.decide("!approve zzzzzz", by="alice")).lines == [
        "There is no approval request zzzzzz."
    ]
    assert not (await desk.decide(f"!show {rid}", by="alice")).decided
    assert not (await desk.decide("hello", by="alice")).decided
    await asyncio.sleep(0.2)
    assert len(alice.replies[mid]) == 1  # the request only: nothing said in the thread
    assert lines_of(target) == []
    stored = await daemon.store.approvals.get_approval(rid)
    assert stored is not None
    assert stored.status == "pending"
    assert (await desk.decide(f"!approve {rid}", by="alice")).decided
    [*_, answer] = await alice.reply_in(mid, 3)
    assert answer.text == "Done."
    assert lines_of(target) == ["x"]
    await settled(daemon, mid)


async def test_the_console_and_the_chat_deciding_at_once_make_the_call_once(world):
    """An approve from the console and one typed in the thread at the same moment: one of
    them decides, the other is told it was decided; the call is made once."""
    daemon, fake, alice, _, tmp = world
    target = tmp / "console-race.txt"
    fake.add(append_snippet(target, "race"), Reply("Raced."))
    mid, asked = await alice.ask("append race")
    rid = request_id(asked.text)
    decided, _ = await asyncio.gather(
        desk_of(daemon).decide(f"!approve {rid}", by="alice"),
        alice.say(f"!approve {rid}", thread=mid),
    )
    # the console won: the request, who decided, the chat's "already", the answer; the
    # chat won: the request and the answer (the console alone is told); in any order
    texts = [m.text for m in await alice.reply_in(mid, 4 if decided.decided else 2)]
    await settled(daemon, mid)
    assert "Raced." in texts
    already = f"Request {rid} was already"  # read before or after the other's decision
    if decided.decided:
        assert any(t.startswith(already) for t in texts)
    else:
        assert [line[: len(already)] for line in decided.lines] == [already]
    assert lines_of(target) == ["race"]


async def test_approve_for_this_run_from_the_console_covers_the_runs_later_calls(world):
    """The console's "Approve for this run" is !approve ID run: the thread reads it, and
    the run's second call of the same tool does not ask again."""
    daemon, fake, alice, _, tmp = world
    target = tmp / "console-run.txt"
    code = (
        f"await append_line(path={str(target)!r}, line='a')\n"
        f"await append_line(path={str(target)!r}, line='b')\n'ok'"
    )
    fake.add(ToolCalls(("run_code", {"code": code})), Reply("Two lines."))
    mid, asked = await alice.ask("append two lines")
    rid = request_id(asked.text)
    decided = await desk_of(daemon).decide(f"!approve {rid} run", by="alice")
    assert decided.lines == [
        f"alice approved request {rid} for the rest of the run from the console."
    ]
    [_, said, answer] = await alice.reply_in(mid, 3)
    assert said.text == decided.lines[0]
    assert answer.text == "Two lines."
    assert lines_of(target) == ["a", "b"]
    stored = await daemon.store.approvals.get_approval(rid)
    assert stored is not None
    assert (stored.status, stored.scope) == ("approved", "run")
    await settled(daemon, mid)
