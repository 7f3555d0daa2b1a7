"""The client's pending requests: the futures that wait for the hub's answers.

A subscribe waits for ``subscribed`` (by channel), a publish for its ``ack``
(by ``client_id``). :meth:`Pending.settle` resolves them from the events of
the :class:`~channels.client.protocol.ClientProtocol`; an answer nobody waits
for any more (a timeout, a cancellation, a retry) is logged or dropped.

Every subscribe waiter ends: several callers subscribing to one channel at
once all get its ``subscribed`` (or its refusal); an ``unsubscribe`` meanwhile
fails them with :class:`~channels.errors.ChannelClosedError`, never leaves them
to their timeout nor cancels their task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from channels.client.protocol import (
    Event,
    PublishAcked,
    PublishRefused,
    SubscriptionConfirmed,
    SubscriptionRefused,
)
from channels.errors import ChannelClosedError
from channels.frames import Ack, Subscribed

__all__ = ["Pending", "SessionLost"]

log = structlog.get_logger("channels.client")


class SessionLost(Exception):
    """Internal: the connection a publish was sent on is gone; send it again."""


class Pending:
    """The futures of subscribes and publishes that wait for the hub."""

    def __init__(self) -> None:
        self._subscribes: dict[str, list[asyncio.Future[Subscribed]]] = {}
        self._acks: dict[str, asyncio.Future[Ack]] = {}

    def subscribe(self, channel: str) -> asyncio.Future[Subscribed]:
        """A future for ``channel``'s ``subscribed``, beside any earlier subscribe's."""
        waiter: asyncio.Future[Subscribed] = asyncio.get_running_loop().create_future()
        self._subscribes.setdefault(channel, []).append(waiter)
        return waiter

    def unsubscribe(self, channel: str) -> None:
        """Fail whoever waits for ``channel``'s ``subscribed``: it was unsubscribed meanwhile.

        Not ``cancel()``: a cancelled future would raise CancelledError in the
        caller's task, which looks like that task being cancelled.
        """
        for waiter in self._subscribes.pop(channel, []):
            if not waiter.done():
                waiter.set_exception(
                    ChannelClosedError(f"{channel} was unsubscribed before the hub confirmed it")
                )

    def forget_subscribe(self, channel: str, waiter: asyncio.Future[Subscribed]) -> None:
        """Stop waiting with ``waiter`` (timed out or cancelled); others for ``channel`` stay."""
        waiters = self._subscribes.get(channel)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._subscribes[channel]

    def publish(self, client_id: str) -> asyncio.Future[Ack]:
        """A future for the ack of ``client_id`` (replacing any earlier one)."""
        fut: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._acks[client_id] = fut
        return fut

    def forget(self, client_id: str, fut: asyncio.Future[Ack]) -> None:
        """Stop waiting for ``client_id``'s ack with ``fut`` (if it is still the one waiting)."""
        if self._acks.get(client_id) is fut:
            del self._acks[client_id]

    def session_lost(self) -> None:
        """Fail every waiting publish with :class:`SessionLost`: it is sent again."""
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(SessionLost())

    def fail_all(self, make: Callable[[], BaseException]) -> None:
        """Fail every waiting call with a fresh ``make()`` (closed, or broken for good)."""
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(make())
        for waiters in self._subscribes.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(make())
        self._subscribes.clear()

    def settle(self, event: Event) -> None:
        """Resolve the futures an event of the protocol answers."""
        match event:
            case PublishAcked(ack=ack):
                fut = self._acks.get(ack.client_id)
                if fut is not None and not fut.done():
                    fut.set_result(ack)
            case PublishRefused(client_id=client_id, error=error):
                fut = self._acks.get(client_id)
                if fut is not None and not fut.done():
                    fut.set_exception(error)
                else:
                    log.warning("channels.error_from_hub", code=error.code, message=error.message)
            case SubscriptionConfirmed(subscribed=subscribed):
                for waiter in self._subscribes.pop(subscribed.channel, []):
                    if not waiter.done():
                        waiter.set_result(subscribed)
            case SubscriptionRefused(channel=channel, error=error):
                waiters = self._subscribes.pop(channel, [])
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(error)
                if not waiters:
                    log.error("channels.subscription_refused", channel=channel, error=str(error))
