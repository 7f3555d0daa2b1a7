"""A run paused for approval moves with its thread: two real daemons on a real nats-server,
the holder SIGKILLed while the request is pending, ``!approve ID`` with the original id
answered by the daemon that took the thread over (issue 18)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from daemon.runtime.interrupted import INTERRUPTED_HEAD, INTERRUPTED_TAIL
from tests.fakes.fake_openai import FakeOpenAI, Reply, Step, ToolCalls
from tests.test_cluster_process import TAKEOVER, daemons_on_a_broker, member, thread_entry
from tests.test_daemon import WAIT

pytestmark = pytest.mark.slow


def _settled(db: Path, prompt: str, request: str) -> tuple[str, str, str | None] | None:
    """(prompt status, request status, decided_by) once the prompt is done, else None."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        [[status]] = conn.execute("SELECT status FROM prompts WHERE id = ?", (prompt,)).fetchall()
        [row] = conn.execute(
            "SELECT status, decided_by FROM approvals WHERE id = ?", (request,)
        ).fetchall()
    return (status, *row) if status == "done" else None


async def test_a_pending_approval_moves_and_the_original_id_resumes_it_once(
    tmp_path: Path,
) -> None:
    """SIGKILL the holder while its run waits for approval; once the other daemon holds
    the thread, ``!approve ID`` (the id the dead daemon published) resumes the stored
    snapshot there: the call is made exactly once, the model is not asked the prompt
    again, and the reply arrives."""
    effects = tmp_path / "effects.txt"
    code = f"r = await append_line(path={str(effects)!r}, line='once')\nr"

    def model(body: dict) -> Step:
        if body["messages"][-1]["role"] == "tool":
            return Reply("Appended it once.")
        return ToolCalls(("run_code", {"code": code}))

    async with (
        FakeOpenAI(fallback=model) as fake,
        daemons_on_a_broker(tmp_path, fake) as (broker, alice, daemons),
    ):
        prompt, thread = await alice.say("append a line")
        await alice.answered([prompt])
        [asked] = alice.replies[prompt]
        *_, approve, _deny = asked.text.splitlines()
        assert approve.startswith("!approve ")
        rid = approve.split()[1]
        entry = await thread_entry(broker.url, thread)
        assert entry.paused is not None
        assert (entry.paused.approval, entry.paused.prompts) == (rid, (prompt,))
        [holder] = [d for d in daemons if member(d) == entry.owner]
        [other] = [d for d in daemons if d is not holder]
        assert not effects.exists()

        holder.kill_all()
        async with asyncio.timeout(WAIT):
            # the broker's entry is the only witness of the takeover: poll it
            while (await thread_entry(broker.url, thread)).owner != member(other):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        await alice.say(f"!approve {rid}", thread=thread)
        async with asyncio.timeout(WAIT):
            while len(alice.replies[prompt]) < 2:  # noqa: ASYNC110 -- the watcher's list grows
                await asyncio.sleep(0.05)
        assert [m.text for m in alice.replies[prompt]] == [asked.text, "Appended it once."]
        assert effects.read_text() == "once\n"  # exactly once
        assert len(fake.requests) == 2  # the prompt, then the call's result: not asked again
        assert fake.requests[-1]["messages"][-1]["content"] == "appended once"
        db = other.config.parent / "asyncai.db"
        async with asyncio.timeout(WAIT):
            # the reply is published before the prompt is recorded done
            while _settled(db, prompt, rid) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert _settled(db, prompt, rid) == ("done", "approved", "alice")
        settled = await thread_entry(broker.url, thread)
        assert (settled.paused, settled.mutating, settled.answered) == (None, None, prompt)
        await asyncio.sleep(TAKEOVER)  # nothing more comes: no second reply, no second call
        assert len(alice.replies[prompt]) == 2
        assert effects.read_text() == "once\n"
        assert other.proc is not None
        other.proc.send_signal(15)
        assert await other.wait() == 0


async def test_a_holder_killed_after_the_approval_was_taken_is_not_resumed_again(
    tmp_path: Path,
) -> None:
    """``!approve`` taken and the approved call started, then the holder is SIGKILLed: the
    decision is in the thread's entry, so the daemon taking over neither resumes the run
    nor asks again; it posts the interrupted notice naming the call, made once."""
    effects = tmp_path / "effects.txt"
    code = f"await append_and_block(path={str(effects)!r})"

    def model(body: dict) -> Step:
        if body["messages"][-1]["role"] == "tool":
            return Reply("never sent")
        return ToolCalls(("run_code", {"code": code}))

    async with (
        FakeOpenAI(fallback=model) as fake,
        daemons_on_a_broker(tmp_path, fake) as (broker, alice, daemons),
    ):
        prompt, thread = await alice.say("append and wait")
        await alice.answered([prompt])
        [asked] = alice.replies[prompt]
        rid = asked.text.splitlines()[-2].split()[1]
        entry = await thread_entry(broker.url, thread)
        [holder] = [d for d in daemons if member(d) == entry.owner]
        await alice.say(f"!approve {rid}", thread=thread)
        async with asyncio.timeout(WAIT):
            # another process writes the file: there is no event to wait on, so poll it
            while not effects.exists():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        decided = await thread_entry(broker.url, thread)
        assert decided.paused is not None
        assert decided.paused.decided == "approved"
        holder.kill_all()
        async with asyncio.timeout(WAIT):
            while len(alice.replies[prompt]) < 2:  # noqa: ASYNC110 -- the watcher's list grows
                await asyncio.sleep(0.05)
        notice = alice.replies[prompt][1].text

        head, call, tail = notice.splitlines()
        assert (head, tail) == (INTERRUPTED_HEAD, INTERRUPTED_TAIL)
        assert call.startswith("- append_and_block(path='/")
        assert effects.read_text() == "called\n"  # exactly once
        assert len(fake.requests) == 1  # never resumed, never asked again
        [other] = [d for d in daemons if d is not holder]
        assert other.proc is not None
        other.proc.send_signal(15)
        assert await other.wait() == 0
