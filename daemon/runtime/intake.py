"""The runtime's side of the channel: inbound messages, split texts joined, replies published.

Adapters between :mod:`channels.client` and :mod:`daemon.runtime.scheduler`;
no I/O of their own beyond the channel they are handed.

Held chunks live only in memory, so a channel's stored cursor must not move
past the first of them: :meth:`ChunkJoiner.holds` tells the store adapter
(:class:`daemon.runtime.store.SessionsRuntimeStore`) to leave the cursor where
it is while a channel has chunks held, and after a crash the hub replays them
from there. What was recorded meanwhile is replayed too and skipped (prompts
are recorded idempotently by id).
"""

from __future__ import annotations

from collections import Counter, OrderedDict

import structlog

from channels.client import Channel, Message
from channels.errors import ProtocolError
from channels.frames import ErrorCode
from daemon.runtime.ports import InboundMessage, PublishRefused, valid_text

__all__ = ["CUT_NOTICE", "MAX_PENDING_CHUNKS", "ChannelPublisher", "ChunkJoiner", "inbound"]

log = structlog.get_logger("asyncai.daemon")

# A held back chunked prompt whose last chunk never comes is dropped after this many.
MAX_PENDING_CHUNKS = 64
CUT_NOTICE = (
    "Your split message could not be put back together (too many split messages were "
    "waiting at once), so it was not run: send it again."
)
"""The reply to the last chunk of a text whose first chunks were dropped."""
# Refusals that a later try can get past: the client backs off from these itself.
_TRANSIENT = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.INTERNAL})


def inbound(message: Message, *, cut: bool = False) -> InboundMessage:
    """A channel message as the runtime takes it (``cut``: :attr:`ChunkJoiner.last_cut`)."""
    return InboundMessage(
        channel=message.channel,
        id=message.id,
        thread=message.thread,
        sender=message.sender,
        text=message.text,
        reply_to=message.reply_to,
        ts=message.ts,
        cut=cut,
    )


class ChunkJoiner:
    """Joins a text that its sender split into several messages (``more``) back into one.

    Chunks of one sender in one thread are held until the chunk without
    ``more``; the joined prompt carries the last chunk's id. The number of
    held chunks is bounded: past the limit (:data:`MAX_PENDING_CHUNKS`) the
    oldest held text is dropped whole, with a log line, so a limit below 1
    holds nothing. Never raises: every message fed gives the complete message
    or None. A text some of whose chunks were dropped is still given at its
    last chunk (what was held since), with :attr:`last_cut` True: it is not
    what its sender wrote, and must not be answered as if it were.
    """

    def __init__(self, limit: int = MAX_PENDING_CHUNKS):
        self._limit = limit
        self._held: OrderedDict[tuple[str, str, str], list[Message]] = OrderedDict()
        self._count = 0
        self._channels: Counter[str] = Counter()  # held texts per channel
        self._cut: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # chunks dropped
        self.last_cut = False
        """Whether the message :meth:`feed` gave last lost chunks to the bound."""

    @property
    def held_chunks(self) -> int:
        """How many chunks are held now (never more than the limit)."""
        return self._count

    def holds(self, channel: str) -> bool:
        """Whether chunks of ``channel`` are held: its cursor must not move past them."""
        return self._channels[channel] > 0

    def feed(self, message: Message) -> Message | None:
        """The complete message, or None while its text is still arriving."""
        key = (message.channel, message.thread, message.sender)
        self.last_cut = False
        if message.more:
            if key not in self._held:
                self._held[key] = []
                self._channels[message.channel] += 1
            self._held[key].append(message)
            self._count += 1
            while self._held and self._count > self._limit:
                oldest = next(iter(self._held))
                self._release(oldest)
                self._cut[oldest] = None
                while len(self._cut) > max(self._limit, 1) * 4:  # bounded: the oldest forgotten
                    self._cut.popitem(last=False)
                log.warning("daemon.chunks_dropped", channel=oldest[0], thread=oldest[1])
            return None
        self.last_cut = key in self._cut
        self._cut.pop(key, None)
        held = self._release(key)
        if not held:
            return message
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

    def _release(self, key: tuple[str, str, str]) -> list[Message]:
        """Stop holding ``key``'s chunks; what was held."""
        held = self._held.pop(key, [])
        if held:
            self._count -= len(held)
            self._channels[key[0]] -= 1
            if not self._channels[key[0]]:
                del self._channels[key[0]]
        return held


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
        """Publish in the thread and wait for the hub's ack; the new message's id.

        Every text is made valid Unicode first (:func:`valid_text`). A refusal
        that no retry can get past raises :class:`PublishRefused`; the rest
        (timeouts, a broken connection, the hub's rate limit or its store)
        raise as the channel raised them.
        """
        try:
            ack = await self._channel.publish(
                channel, valid_text(text), thread=thread, reply_to=reply_to, client_id=client_id
            )
        except ProtocolError as exc:
            if exc.code in _TRANSIENT:
                raise
            raise PublishRefused(f"the hub refused the message: {exc}") from exc
        return ack.id
