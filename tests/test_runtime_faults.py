"""Faults an attack campaign found in the runtime (issue 15), each with its fix's test.

The store is the real one over a SQLite file; the channel's publish side and
the model are the fakes of tests/fakes/runtime_helpers.py. The end-to-end
versions (a real hub, restarts of the whole daemon) are in tests/test_daemon.py.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.client import Message
from daemon.runtime.intake import ChunkJoiner, inbound
from daemon.runtime.ports import PublishRefused, RuntimeOptions, notice_client_id, valid_text
from daemon.runtime.runs import RunRequest, RunResult
from daemon.runtime.scheduler import Runtime
from daemon.runtime.store import SessionsRuntimeStore
from sessions.store import Store
from tests.fakes.runtime_helpers import FakePublisher, ScriptedModel, msg


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A real store over a fresh SQLite file."""
    async with Store(tmp_path / "asyncai.db") as sessions:
        yield sessions


class RefusingPublisher(FakePublisher):
    """Refuses (as the hub refuses a bad frame) every text that contains ``refuse``."""

    def __init__(self, refuse: str) -> None:
        super().__init__()
        self.refuse = refuse

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Refuse the marked texts; ack the rest."""
        if self.refuse in text:
            raise PublishRefused("the hub refused the message: bad_frame: refused by the test")
        return await super().publish(
            channel, text, thread=thread, reply_to=reply_to, client_id=client_id
        )


# ---- a reply that cannot be published --------------------------------------------------


async def test_a_refused_reply_fails_the_prompt_with_a_notice(store):
    """A reply the hub refuses for what it is: the prompt ends failed (not queued for a
    next start that would fail the same way), the run row says why, and the thread gets
    a one-line notice under a client_id of its own."""
    pub, model = RefusingPublisher("re: "), ScriptedModel(hold=False)
    rt = Runtime(store=SessionsRuntimeStore(store), publisher=pub, run=model)
    m = msg("hello")
    await rt.submit(m)
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    [notice] = pub.sent
    assert notice.text.startswith("Sorry, this run failed: the reply could not be published")
    assert "\n" not in notice.text
    assert (notice.reply_to, notice.client_id) == (m.id, notice_client_id("#ops", m.id))
    [prompt] = await store.queries.get_prompts([m.id])
    assert prompt.status == "failed"
    status, _, error = await store.queries.run_metrics(model.requests[0].run_id)
    assert status == "failed"
    assert error == "reply refused: the hub refused the message: bad_frame: refused by the test"


@given(st.text())
def test_valid_text_always_encodes_and_keeps_valid_text(text):
    """Any str comes out encodable as UTF-8; a text that already was comes out as it is."""
    fixed = valid_text(text)
    fixed.encode("utf-8")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert "\ufffd" in fixed or len(fixed) < len(text)  # replaced, or a pair joined
    else:
        assert fixed is text


def test_valid_text_replaces_lone_surrogates_and_joins_pairs():
    """A lone surrogate becomes U+FFFD; a high+low pair the character it encodes."""
    assert valid_text("\ud800") == "\ufffd"
    assert valid_text("a\udc00b\ud800") == "a\ufffdb\ufffd"
    assert valid_text("\ud83d\ude00") == "\U0001f600"


# ---- chunks of a split prompt ----------------------------------------------------------

_names = st.sampled_from(["a", "b"])
_chunks = st.lists(
    st.tuples(
        st.sampled_from(["#ops", "#dev"]),
        _names,  # thread
        _names,  # sender
        st.text(string.ascii_letters, max_size=3),
        st.booleans(),  # more
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(_chunks, st.integers(min_value=-1, max_value=6))
def test_chunk_joiner_joins_or_drops_and_never_raises(chunks, limit):
    """Any sequence of chunks and whole messages, under any bound: each message gives
    None (held) or the joined message; a joined text is the held chunks of its sender in
    its thread plus the last one, unless the bound dropped them; never more than the
    bound is held; ``holds`` says exactly which channels have chunks held."""
    joiner = ChunkJoiner(limit=limit)
    model: dict[tuple[str, str, str], list[str]] = {}
    for n, (channel, thread, sender, text, more) in enumerate(chunks):
        message = Message(channel, f"{n:026d}", thread, None, sender, text, "t", more)
        out = joiner.feed(message)
        key = (channel, thread, sender)
        if more:
            assert out is None
            model.setdefault(key, []).append(text)
        else:
            assert out is not None
            assert (out.id, out.channel, out.thread, out.sender) == (
                message.id,
                channel,
                thread,
                sender,
            )
            held = "".join(model.pop(key, []))
            if limit >= len(chunks):  # nothing can have been dropped: joined whole
                assert out.text == held + text
            else:  # the chunks held since the last drop of this key, then the last one
                assert out.text.endswith(text)
                assert (held + text).endswith(out.text)
        assert 0 <= joiner.held_chunks <= max(limit, 0)
        if limit >= len(chunks):  # nothing can have been dropped
            for ch in ("#ops", "#dev"):
                assert joiner.holds(ch) == any(k[0] == ch for k in model)


async def test_the_cursor_stays_before_held_chunks(store):
    """While chunks are held in a channel, recording other prompts there does not move its
    cursor (a restart then replays the chunks); once the joined prompt is recorded, it moves
    to it. Other channels are not held back."""
    joiner = ChunkJoiner()
    runtime_store = SessionsRuntimeStore(store, hold_cursor=joiner.holds)
    pub, model = FakePublisher(), ScriptedModel(hold=False)
    rt = Runtime(store=runtime_store, publisher=pub, run=model)

    def chunk(mid: str, text: str, more: bool, sender: str = "alice", channel: str = "#ops"):
        return Message(channel, mid, mid if sender == "bob" else "a1", None, sender, text, "", more)

    assert joiner.feed(chunk("a1", "first, ", True)) is None
    bob = joiner.feed(chunk("b1", "other prompt", False, sender="bob"))
    dev = joiner.feed(chunk("c1", "elsewhere", False, sender="bob", channel="#dev"))
    for whole in (bob, dev):
        assert whole is not None
        await rt.submit(inbound(whole))
    await store.connection.flush()  # the records put off to their runs' writes (issue 31)
    assert await store.cursors.get_cursor("#ops") is None
    assert await store.cursors.get_cursor("#dev") == "c1"
    whole = joiner.feed(chunk("d1", "last", False))
    assert whole is not None
    await rt.submit(inbound(whole))
    await store.connection.flush()
    assert await store.cursors.get_cursor("#ops") == "d1"
    await pub.wait_for(3)
    await rt.shutdown(grace=1)
    assert sorted(p.text for p in pub.sent) == [
        "re: elsewhere",
        "re: first, last",
        "re: other prompt",
    ]


# ---- a wedged runtime ------------------------------------------------------------------


async def test_a_run_active_past_every_bound_makes_the_runtime_wedged(store):
    """A run still active after its deadline, the publish timeout and the slack (here the
    run is merely held and the clock moved: no real waiting) counts as wedged; once it
    ends, the runtime is not wedged any more."""
    now = [1000.0]
    gate = asyncio.Event()

    async def stuck(request: RunRequest) -> RunResult:
        await gate.wait()
        return RunResult(reply="late")

    pub = FakePublisher()
    rt = Runtime(
        store=SessionsRuntimeStore(store),
        publisher=pub,
        run=stuck,
        options=RuntimeOptions(max_run_seconds=10, publish_timeout=5),
        clock=lambda: now[0],
    )
    assert not rt.wedged()
    await rt.submit(msg("hang"))
    now[0] += 10 + 5 + 1
    assert not rt.wedged(slack=2)
    assert rt.wedged(slack=0)
    gate.set()
    await pub.wait_for(1)
    await rt.shutdown(grace=1)
    assert not rt.wedged(slack=0)
