"""The runtime's side of the channel: inbound messages, split texts joined, replies published.

Adapters between :mod:`channels.client` and :mod:`daemon.runtime.scheduler`;
no I/O of their own beyond the channel they are handed.
"""

from __future__ import annotations

from collections import OrderedDict

import structlog

from channels.client import Channel, Message
from daemon.runtime.ports import InboundMessage

__all__ = ["MAX_PENDING_CHUNKS", "ChannelPublisher", "ChunkJoiner", "inbound"]

log = structlog.get_logger("asyncai.daemon")

# A held back chunked prompt whose last chunk never comes is dropped after this many.
MAX_PENDING_CHUNKS = 64


def inbound(message: Message) -> InboundMessage:
    """A channel message as the runtime takes it."""
    return InboundMessage(
        channel=message.channel,
        id=message.id,
        thread=message.thread,
        sender=message.sender,
        text=message.text,
        reply_to=message.reply_to,
        ts=message.ts,
    )


class ChunkJoiner:
    """Joins a text that its sender split into several messages (``more``) back into one.

    Chunks of one sender in one thread are held until the chunk without
    ``more``; the joined prompt carries the last chunk's id. The number of
    held chunks is bounded: past :data:`MAX_PENDING_CHUNKS` the oldest held
    text is dropped, with a log line.
    """

    def __init__(self, limit: int = MAX_PENDING_CHUNKS):
        self._limit = limit
        self._held: OrderedDict[tuple[str, str, str], list[Message]] = OrderedDict()
        self._count = 0

    def feed(self, message: Message) -> Message | None:
        """The complete message, or None while its text is still arriving."""
        key = (message.channel, message.thread, message.sender)
        if message.more:
            self._held.setdefault(key, []).append(message)
            self._count += 1
            while self._count > self._limit:
                old_key, old = self._held.popitem(last=False)
                self._count -= len(old)
                log.warning("daemon.chunks_dropped", channel=old_key[0], thread=old_key[1])
            return None
        held = self._held.pop(key, None)
        if not held:
            return message
        self._count -= len(held)
        text = "".join(m.text for m in held) + message.text
        return Message(
            channel=message.channel,
            id=message.id,
            thread=message.thread,
            reply_to=held[0].reply_to,
            sender=message.sender,
            text=text,
            ts=held[0].ts,
        )


class ChannelPublisher:
    """:class:`daemon.runtime.RuntimePublisher` over a :class:`channels.client.Channel`."""

    def __init__(self, channel: Channel, nick: str):
        self._channel = channel
        self._configured_nick = nick

    @property
    def nick(self) -> str:
        """The nick the hub knows the daemon by (``welcome``), else the configured one."""
        return self._channel.nick or self._configured_nick

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Publish in the thread and wait for the hub's ack; the new message's id."""
        ack = await self._channel.publish(
            channel, text, thread=thread, reply_to=reply_to, client_id=client_id
        )
        return ack.id
