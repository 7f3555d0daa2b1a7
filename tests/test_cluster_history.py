"""A follow-up's earlier turns, read back from a real JetStream channel."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from channels.nats import NatsChannel, mapping
from daemon.cluster import store as cluster_store
from daemon.cluster.errors import ClusterError
from daemon.cluster.history import bounded, stream_history, stream_replied
from daemon.runtime.ports import notice_client_id, reply_client_id
from daemon.runtime.runs import HistoryTurn
from daemon.runtime.store import SessionsRuntimeStore
from sessions.store import Store
from tests.fakes.nats_server import NatsServer


@pytest.fixture
async def broker() -> AsyncIterator[NatsServer]:
    async with NatsServer() as server:
        yield server


async def test_the_turns_before_the_current_prompt_come_back_in_order(broker: NatsServer) -> None:
    """Root, reply, a command, a long reply split in chunks, another thread's message, the
    current prompt: the turns are the texts before it, chunks joined, commands left out."""
    alice = NatsChannel(broker.url, nick="alice", max_text=20)
    daemon = NatsChannel(broker.url, nick="asyncai", max_text=20)
    nc: Client = await nats.connect(broker.url)
    try:
        root = await alice.publish("#ops", "set v to 7")
        await daemon.publish("#ops", "done", thread=root.thread, reply_to=root.id)
        await alice.publish("#ops", "!stop", thread=root.thread)
        await alice.publish("#ops", "elsewhere")  # another thread
        long = "a long answer that is split into chunks"
        await daemon.publish("#ops", long, thread=root.thread, reply_to=root.id)
        current = await alice.publish("#ops", "what is v?", thread=root.thread)
        await alice.publish("#ops", "after it", thread=root.thread)
        turns = await stream_history(nc.jetstream(), "#ops", root.thread, current.id, "asyncai")
        assert turns == [
            HistoryTurn("user", "set v to 7"),
            HistoryTurn("assistant", "done"),
            HistoryTurn("assistant", long),
        ]
        assert await stream_history(nc.jetstream(), "#ops", root.thread, root.id, "asyncai") == []
        hub_id = "01JDXK3M2ZP7Q9R8S7T6V5W4X3"  # not an id of this stream: nothing to read
        assert await stream_history(nc.jetstream(), "#ops", hub_id, current.id, "asyncai") == []
    finally:
        await nc.close()
        await alice.close()
        await daemon.close()


async def test_the_newest_prompt_with_its_reply_whole_in_the_stream(broker: NatsServer) -> None:
    """What the hub keeps once counts: the nick's reply stored under the reply's
    client_id (a split one by its last chunk). An approval request, another nick's
    message, a notice under another client_id, a split reply whose last chunk never
    arrived and the answer to a command do not; the notice of a refused reply does."""
    alice = NatsChannel(broker.url, nick="alice")
    daemon = NatsChannel(broker.url, nick="asyncai", max_text=20)
    nc: Client = await nats.connect(broker.url)
    js = nc.jetstream()

    async def replied(thread: str) -> str:
        return await stream_replied(js, "#ops", thread, "asyncai")

    def reply_id(prompt: str) -> str:
        return reply_client_id("#ops", prompt)

    try:
        root = await alice.publish("#ops", "set v to 7")
        assert await replied(root.thread) == ""  # nothing in the thread but its root
        await daemon.publish(
            "#ops", "ok?", thread=root.thread, reply_to=root.id, client_id=reply_id("approval:r1")
        )
        await alice.publish(
            "#ops", "mine", thread=root.thread, reply_to=root.id, client_id=reply_id(root.id)
        )
        await daemon.publish("#ops", "busy", thread=root.thread, reply_to=root.id)
        assert await replied(root.thread) == ""
        await daemon.publish(
            "#ops", "done", thread=root.thread, reply_to=root.id, client_id=reply_id(root.id)
        )
        assert await replied(root.thread) == root.id

        await alice.publish("#ops", "and then?", thread=root.thread)
        p2 = await alice.publish("#ops", "and more?", thread=root.thread)
        long = "a long answer that is split into chunks"
        ack = await daemon.publish(
            "#ops", long, thread=root.thread, reply_to=p2.id, client_id=reply_id(p2.id)
        )
        assert len(ack.ids) > 1
        assert await replied(root.thread) == p2.id  # p1 ran in the same run as p2

        # a split reply cut off after its first chunk: not whole, not counted
        p3 = await alice.publish("#ops", "last one", thread=root.thread)
        first = mapping.chunks(long, reply_id(p3.id), 20)[0]
        headers = mapping.message_headers("asyncai", first, thread=root.thread, reply_to=p3.id)
        await js.publish(
            mapping.message_subject("#ops", root.thread),
            first.text.encode(),
            stream=mapping.stream_name("#ops"),
            headers=headers,
        )
        assert await replied(root.thread) == p2.id
        # a command after p3, answered at once: its answer says nothing of p3
        status = await alice.publish("#ops", " !tools", thread=root.thread)
        await daemon.publish(
            "#ops", "idle", thread=root.thread, reply_to=status.id, client_id=reply_id(status.id)
        )
        assert await replied(root.thread) == p2.id
        # a reply the hub refused after storing its first chunk, and the notice in its place
        p4 = await alice.publish("#ops", "one more", thread=root.thread)
        await daemon.publish(
            "#ops", "refused", thread=root.thread, reply_to=p4.id,
            client_id=notice_client_id("#ops", p4.id),
        )  # fmt: skip
        assert await replied(root.thread) == p4.id
        hub_id = "01JDXK3M2ZP7Q9R8S7T6V5W4X3"  # not an id of this stream: nothing to read
        assert await replied(hub_id) == ""
    finally:
        await nc.close()
        await alice.close()
        await daemon.close()


def test_bounded_keeps_the_newest_turns_within_both_limits() -> None:
    """At most N turns and C characters, the newest ones, in order."""
    turns = [HistoryTurn("user", "x" * 10), HistoryTurn("assistant", "y" * 10)] * 3
    assert bounded(turns, 20, 1000) == turns
    assert bounded(turns, 2, 1000) == turns[-2:]
    assert bounded(turns, 20, 25) == turns[-2:]
    assert bounded(turns, 0, 1000) == []


async def test_a_follow_up_waits_for_its_turns_through_failed_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the stream that fails is tried again, twice; after the third failure
    the run goes on with the local turns (here none)."""
    monkeypatch.setattr(cluster_store, "_HISTORY_RETRIES", (0.01, 0.01))
    turns = [HistoryTurn("user", "set v to 7"), HistoryTurn("assistant", "done")]
    failures = [2]
    calls: list[tuple[str, str, str]] = []

    async def earlier(channel: str, thread: str, before: str) -> list[HistoryTurn]:
        calls.append((channel, thread, before))
        if failures[0]:
            failures[0] -= 1
            raise ClusterError("nats: timeout")
        return turns

    async with Store(tmp_path / "a.db") as store:
        wrapped = cluster_store.ClusterRuntimeStore(
            SessionsRuntimeStore(store),
            leases=None,  # type: ignore[arg-type]  # history reads neither
            router=None,  # type: ignore[arg-type]
            earlier=earlier,
        )
        thread, prompt = "01JDXK3M2ZP7Q9R8S7T6V5W4X0", "01JDXK3M2ZP7Q9R8S7T6V5W4X3"
        wrapped.resuming("r1", ("#ops", thread), [prompt])
        assert await wrapped.history("#ops", thread) == turns
        assert calls == [("#ops", thread, prompt)] * 3
        failures[0] = 3
        assert await wrapped.history("#ops", thread) == []
        assert len(calls) == 6
        # a thread's root has nothing earlier: no read at all
        wrapped.resuming("r2", ("#ops", prompt), [prompt])
        assert await wrapped.history("#ops", prompt) == []
        assert len(calls) == 6
