"""Thread leases on a real nats-server: claim, answered markers, expiry takeover, contenders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from channels.nats import NatsChannel
from daemon.cluster.errors import ClusterError
from daemon.cluster.history import stream_replied
from daemon.cluster.leases import Leases, bucket_names, thread_key
from daemon.cluster.router import ThreadRouter
from daemon.runtime.ports import InboundMessage, reply_client_id
from sessions.model import InterruptedRun
from tests.fakes.nats_server import NatsServer


@pytest.fixture
async def broker() -> AsyncIterator[NatsServer]:
    async with NatsServer() as server:
        yield server


@pytest.fixture
async def nc(broker: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(broker.url)
    yield client
    await client.close()


async def _leases(nc: Client, member: str, ttl: float = 30.0) -> Leases:
    return await Leases(nc.jetstream(), "asyncai", member, member_ttl=ttl).open()


def test_keys_and_bucket_names_are_valid_for_any_channel_and_nick() -> None:
    """A channel with ``#`` and a thread with odd characters still give a KV key."""
    assert thread_key("#asyncai", "000000000042") == "236173796e636169.000000000042"
    assert thread_key("#a", "a b").startswith("2361.x")
    assert bucket_names("asyncai") == ("asyncai_members_asyncai", "asyncai_threads_asyncai")
    assert bucket_names("a.b")[0] == "asyncai_members_" + b"a.b".hex()


async def test_the_first_claim_wins_and_the_second_contender_sees_the_winner(nc: Client) -> None:
    """Two daemons claim the same thread at once: exactly one owns it, both agree who."""
    a, b = await _leases(nc, "a"), await _leases(nc, "b")
    claims = await asyncio.gather(a.claim("#c", "1"), b.claim("#c", "1"))
    assert claims[0].owner == claims[1].owner
    assert claims[0].owner in {"a", "b"}
    stored = await a.get("#c", "1")
    assert stored is not None
    assert stored.owner == claims[0].owner


async def test_answered_moves_forward_only_and_only_by_the_holder(nc: Client) -> None:
    """The marker of answered prompts never goes back; a daemon that does not hold the
    thread does not move it (it published nothing there, issue 26 §2.6)."""
    a, b = await _leases(nc, "a"), await _leases(nc, "b")
    await a.claim("#c", "1")
    assert await a.mark_answered("#c", "1", "000000000005")
    assert await a.mark_answered("#c", "1", "000000000003")  # already past it
    assert not await b.mark_answered("#c", "1", "000000000007")
    claim = await b.get("#c", "1")
    assert claim is not None
    assert (claim.owner, claim.answered) == ("a", "000000000005")


async def test_a_silent_member_expires_and_one_of_two_contenders_takes_its_thread(
    nc: Client,
) -> None:
    """A member that stops beating is gone after its TTL; its thread goes to exactly one."""
    a = await _leases(nc, "a", ttl=1.0)
    b, c = await _leases(nc, "b", ttl=1.0), await _leases(nc, "c", ttl=1.0)
    await a.beat()
    await b.beat()
    await a.claim("#c", "7")
    await a.mark_answered("#c", "7", "000000000009")
    assert await b.alive("a")
    assert await b.live_members() == {"a", "b"}
    while await b.alive("a"):  # the broker deletes the key; no beat from a any more
        await b.beat()
        await asyncio.sleep(0.1)
    old = await b.get("#c", "7")
    assert old is not None
    assert old.owner == "a"
    won = await asyncio.gather(b.take_over("#c", "7", old), c.take_over("#c", "7", old))
    assert won[0].owner == won[1].owner
    assert won[0].owner in {"b", "c"}
    assert won[0].answered == "000000000009"  # the marker moves with the thread


async def test_a_member_that_leaves_is_gone_at_once(nc: Client) -> None:
    """A clean stop removes the member's key: no waiting for its TTL."""
    a, b = await _leases(nc, "a"), await _leases(nc, "b")
    await a.beat()
    assert await b.alive("a")
    await a.leave()
    assert not await b.alive("a")
    assert await b.live_members() == set()


async def test_a_member_that_keeps_beating_stays_alive_past_its_ttl(nc: Client) -> None:
    """Renewal: beats more often than the TTL keep the key; the thread stays its."""
    a, b = await _leases(nc, "a", ttl=1.0), await _leases(nc, "b", ttl=1.0)
    await a.claim("#c", "1")
    for _ in range(8):  # 2 s, twice the TTL
        await a.beat()
        await asyncio.sleep(0.25)
        assert await b.alive("a")


async def test_after_a_gap_in_the_heartbeat_nothing_is_taken_over_for_a_ttl(
    broker: NatsServer,
) -> None:
    """The broker restarts: a daemon whose beats failed does not take over the threads of
    a member whose key expired meanwhile until that member had a whole TTL to beat again;
    a member that never comes back loses its thread after that."""
    nc = await nats.connect(broker.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
    try:
        a, b = await _leases(nc, "a", ttl=1.0), await _leases(nc, "b", ttl=1.0)
        router = ThreadRouter(b)
        await a.beat()
        await router.beat()
        await a.claim("#c", "000000000001")
        await broker.kill()
        with pytest.raises(ClusterError):
            await router.beat()  # the broker is away: the heartbeat has a gap
        await broker.start()
        while True:  # until the client is back (it reconnects by itself)
            try:
                await router.beat()
                break
            except ClusterError:
                await asyncio.sleep(0.05)
        while await b.alive("a"):  # noqa: ASYNC110 -- the broker expires it; nothing signals that
            await asyncio.sleep(0.05)
        message = InboundMessage("#c", "000000000002", "000000000001", "alice", "more")
        assert await router.route(message, "asyncai") == []  # deferred, remembered
        claim = await b.get("#c", "000000000001")
        assert claim is not None
        assert claim.owner == "a"
        ready: list[object] = []
        while not ready:  # b beats on; after a whole TTL without a gap, it takes over
            await asyncio.sleep(0.2)
            await router.beat()
            await router.scan(ready.append)
        assert ready == [message]
        claim = await b.get("#c", "000000000001")
        assert claim is not None
        assert claim.owner == "b"
    finally:
        await nc.close()


async def _taken_over(b: Leases, router: ThreadRouter) -> list[object]:
    """What b's router hands on once a's key expired and b took a's thread over."""
    while await b.alive("a"):  # noqa: ASYNC110 -- the broker expires it; nothing signals that
        await asyncio.sleep(0.05)
    ready: list[object] = []
    while not ready:  # b beats on; after a whole TTL without a gap, it takes over
        await asyncio.sleep(0.2)
        await router.beat()
        await router.scan(ready.append)
    return ready


async def test_a_prompt_read_late_after_the_takeover_that_noticed_it_is_not_run(
    nc: Client,
) -> None:
    """a dies inside a mutating call of prompt 3's run; b takes the thread over from a
    remembered earlier message, posts the notice for prompt 3, and then reads prompt 3
    itself, late (its intake was behind): it is not run again; a newer one is."""
    a, b = await _leases(nc, "a", ttl=1.0), await _leases(nc, "b", ttl=1.0)
    router = ThreadRouter(b)
    await a.beat()
    await router.beat()
    thread = "000000000001"
    await a.claim("#c", thread)
    await a.mark_answered("#c", thread, "000000000002")
    await a.mark_mutating("#c", thread, "run-3", ["000000000003"], ("append_line", {}))
    earlier = InboundMessage("#c", "000000000002", thread, "alice", "count 0")
    assert await router.route(earlier, "asyncai") == []  # a's thread: remembered
    ready = await _taken_over(b, router)
    [notice] = ready
    assert isinstance(notice, InterruptedRun)
    assert notice.prompt_ids == ("000000000003",)
    late = InboundMessage("#c", "000000000003", thread, "alice", "count 1")
    assert await router.route(late, "asyncai") == []
    newer = InboundMessage("#c", "000000000004", thread, "alice", "show")
    assert await router.route(newer, "asyncai") == [newer]


@pytest.mark.parametrize("stream_readable", [True, False])
async def test_a_reply_in_the_stream_before_the_marker_moved_is_not_run_again(
    broker: NatsServer, nc: Client, stream_readable: bool
) -> None:
    """a's run of prompt 0 made a mutating call and published its reply, then a died
    before its marker moved; a follow-up came meanwhile. b takes the thread over with
    the marker at prompt 0 (read from the stream), in the same write: only the follow-up
    runs, and no notice is posted for a run that ended. When the stream cannot be read,
    b goes on as before: the notice (which the broker drops as the reply's repeat), then
    the follow-up."""
    alice = NatsChannel(broker.url, nick="alice")
    daemon = NatsChannel(broker.url, nick="asyncai")
    js = nc.jetstream()

    async def replied(channel: str, thread: str) -> str:
        if not stream_readable:
            raise ClusterError("cannot read thread from the stream: timeout")
        return await stream_replied(js, channel, thread, "asyncai")

    a, b = await _leases(nc, "a", ttl=1.0), await _leases(nc, "b", ttl=1.0)
    router = ThreadRouter(b, replied=replied)
    try:
        await a.beat()
        await router.beat()
        root = await alice.publish("#c", "count 0")
        thread = root.thread
        await a.claim("#c", thread)
        await a.mark_mutating("#c", thread, "run-0", [root.id], ("append_line", {}))
        await daemon.publish(
            "#c", "result: 1", thread=thread, reply_to=root.id,
            client_id=reply_client_id("#c", root.id),
        )  # fmt: skip
        first = InboundMessage("#c", root.id, thread, "alice", "count 0")
        assert await router.route(first, "asyncai") == []  # a's thread: remembered
        follow = await alice.publish("#c", "show", thread=thread)
        follow_up = InboundMessage("#c", follow.id, thread, "alice", "show")
        assert await router.route(follow_up, "asyncai") == []
        ready = await _taken_over(b, router)
        entry = await b.get("#c", thread)
        assert entry is not None
        assert entry.owner == "b"
        if stream_readable:
            assert ready == [follow_up]
            assert (entry.answered, entry.mutating) == (root.id, None)
            assert await router.route(first, "asyncai") == []  # a late copy: not run
        else:
            notice, then = ready
            assert isinstance(notice, InterruptedRun)
            assert notice.prompt_ids == (root.id,)
            assert then == follow_up
            assert entry.answered == ""
    finally:
        await alice.close()
        await daemon.close()
