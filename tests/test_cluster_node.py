"""One daemon's cluster part on a real broker: what it claims, and what it leaves alone."""

from __future__ import annotations

from pathlib import Path

from daemon.cluster.node import ClusterNode
from daemon.runtime.ports import InboundMessage
from sessions.store import Store
from tests.fakes.nats_server import NatsServer
from tests.fakes.runtime_helpers import FakePublisher


def _id(n: int) -> str:
    return f"01M8NY6P17T0CK{n:012d}"


async def test_messages_no_daemon_answers_claim_no_thread(tmp_path: Path) -> None:
    """A sender outside allowed_senders, or a shared channel's message that mentions
    nobody in a thread nobody holds, goes to the runtime as it is (which ignores it):
    no thread entry is made for it and nothing is remembered; the rest is claimed."""
    async with NatsServer() as broker, Store(tmp_path / "a.db") as store:
        node = await ClusterNode.open(
            broker.url,
            store,
            token=None,
            nick="asyncai",
            takeover_seconds=6.0,
            scope_key=b"k" * 32,
            max_scope_bytes=1 << 20,
            scope_retention=0.0,
            state_dir=tmp_path,
        )
        node.shared_channels = frozenset({"#dev"})
        node.allowed_senders = frozenset({"alice"})
        got: list[InboundMessage] = []

        async def submit(message: InboundMessage) -> bool:
            got.append(message)
            return True

        node.start(submit, FakePublisher())
        try:
            chat = InboundMessage("#dev", _id(1), _id(1), "alice", "just chatting")
            asked = InboundMessage("#dev", _id(2), _id(2), "alice", "@asyncai which pods?")
            more = InboundMessage("#dev", _id(3), _id(2), "alice", "and the services")
            stranger = InboundMessage("#ops", _id(4), _id(4), "mallory", "hello")
            for message in (chat, asked, more, stranger):
                await node.feed(message, "asyncai")
            assert got == [chat, asked, more, stranger]
            assert await node.leases.get("#dev", _id(1)) is None
            assert await node.leases.get("#ops", _id(4)) is None
            claim = await node.leases.get("#dev", _id(2))
            assert claim is not None
            assert claim.owner == node.leases.member
            assert node.router.remembered == 0
            assert node.router.cursor_cap("#dev") is None
        finally:
            await node.close()
