"""The ``Channel`` interface: what the daemon needs from any pub/sub transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from channels.frames import Message, Subscribed

__all__ = ["Channel", "PublishAck"]


@dataclass(frozen=True)
class PublishAck:
    """The hub's answer to a publish: the message's id and its thread.

    For a text split into several messages, ``id`` is the first one's and
    ``ids`` lists them all, in order.
    """

    id: str
    thread: str
    ids: tuple[str, ...]


@runtime_checkable
class Channel(Protocol):
    """A pub/sub connection: what the daemon needs from any transport."""

    @property
    def nick(self) -> str | None:
        """The client's own nick, as the hub knows it (from ``welcome``); None before."""
        ...

    @property
    def broken(self) -> bool:
        """True once the channel is broken for good: its calls raise ChannelBrokenError.

        Cheap (no I/O), for a watchdog: a process whose channel is broken
        should stop pinging systemd so that it gets restarted.
        """
        ...

    async def subscribe(self, channel: str, since: str | None = None) -> Subscribed:
        """Receive ``channel``'s messages: those stored after ``since`` first, then live ones."""
        ...

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel``."""
        ...

    async def publish(
        self,
        channel: str,
        text: str,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
        client_id: str | None = None,
    ) -> PublishAck:
        """Publish and wait for the ack. ``client_id`` (default: a new UUID) makes it idempotent."""
        ...

    async def status(self, channel: str, text: str, *, thread: str) -> None:
        """Show ``text`` (one short line) as progress in ``thread``; not stored, no ack."""
        ...

    async def receive(self) -> Message:
        """The next message of any subscribed channel."""
        ...

    def __aiter__(self) -> AsyncIterator[Message]:
        """Iterate over messages until the channel is closed."""
        ...

    async def close(self) -> None:
        """Close the channel (idempotent)."""
        ...
