"""What every channel transport shares: its lifecycle state, the inbox wait and ``on_status``.

:class:`InboxChannel` is the base of :class:`~channels.client.WebSocketChannel`
and :class:`~channels.nats.NatsChannel`. It keeps the state every transport
goes through (``new`` → ``open`` → ``closed`` | ``broken``) and the errors
it raises in each (:class:`~channels.errors.ChannelClosedError` after you
closed it, :class:`~channels.errors.ChannelBrokenError` with its cause once
it broke), the wait for the next message of the inbox (:meth:`receive`,
iteration, connecting first when it is new), the call of the caller's
``on_status`` (whose bugs are logged, never end the reader) and the async
context manager. A transport says how it connects and closes, how many
messages wait (:attr:`pending`) and how the next one is taken
(:meth:`_take`), and what its wake-up wakes besides the inbox (:meth:`_wake`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Literal, Self

import structlog

from channels.errors import ChannelBrokenError, ChannelClosedError
from channels.frames import Message, Status

__all__ = ["InboxChannel"]

State = Literal["new", "open", "closed", "broken"]


class InboxChannel(ABC):
    """A channel's lifecycle, its inbox wait and its status callback (see the module)."""

    url: str
    _log: structlog.typing.FilteringBoundLogger

    def __init__(self, on_status: Callable[[Status], None] | None) -> None:
        self._on_status = on_status
        self._state: State = "new"
        self._broken_cause: BaseException | None = None
        self._inbox_ready = asyncio.Event()

    # -- what a transport provides --------------------------------------------------------

    @abstractmethod
    async def connect(self, *, retry: bool = True) -> None:
        """Connect (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Close the channel; later calls raise ChannelClosedError (idempotent)."""

    @property
    @abstractmethod
    def pending(self) -> int:
        """Messages received and not yet taken."""

    @abstractmethod
    async def _take(self) -> Message | None:
        """The next message of the inbox (there is one), or None if another taker got it."""

    def _wake(self) -> None:
        """Wake everyone who waits for a message or a state change."""
        self._inbox_ready.set()

    # -- the state --------------------------------------------------------------------------

    @property
    def broken(self) -> bool:
        """True once the channel is broken for good: calls raise ChannelBrokenError (no I/O)."""
        return self._state == "broken"

    def _check_usable(self) -> None:
        if self._state == "closed":
            raise ChannelClosedError("the channel was closed")
        if self._state == "broken":
            raise self._broken_error()

    def _broken_error(self) -> ChannelBrokenError:
        return ChannelBrokenError.of(self.url, self._broken_cause)

    def _set_broken(self, cause: BaseException) -> None:
        """An open channel breaks for good of ``cause``: said once, everyone woken."""
        if self._state != "open":
            return
        self._state = "broken"
        self._broken_cause = cause
        self._log.error("channels.broken", url=self.url, error=str(cause))
        self._wake()

    async def _ensure_open(self) -> None:
        if self._state == "new":
            await self.connect()
        self._check_usable()

    # -- receiving --------------------------------------------------------------------------

    def _status_received(self, status: Status) -> None:
        """Hand a status to ``on_status``; what it raises is logged (the reader goes on)."""
        if self._on_status is None:
            return
        try:
            self._on_status(status)
        except Exception:  # the caller's bug must not end the reader
            self._log.exception("channels.status_callback_failed", channel=status.channel)

    async def receive(self) -> Message:
        """The next message; raises ChannelClosedError / ChannelBrokenError when there is none."""
        while True:
            if self.pending:
                message = await self._take()
                if message is not None:
                    return message
                continue
            await self._ensure_open()
            self._inbox_ready.clear()
            await self._inbox_ready.wait()

    def __aiter__(self) -> AsyncIterator[Message]:
        """Iterate over messages; the iteration ends when the channel is closed."""
        return self

    async def __anext__(self) -> Message:
        """The next message (see :meth:`receive`); StopAsyncIteration once closed."""
        try:
            return await self.receive()
        except ChannelClosedError:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
