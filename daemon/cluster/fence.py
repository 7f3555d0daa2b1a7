"""A daemon that lost a thread publishes nothing in it (issue 26 §2.6).

A daemon whose lease lapsed (a stall, a partition) can come back to a run
that another daemon has meanwhile taken over and answered. Two things keep
it from acting in the thread, each where the effect happens:

- its next mutating call is refused where the call is recorded: the
  revision-checked write of the thread's entry (:meth:`.Leases.mark_mutating`)
  fails with :class:`.ThreadMoved`, and code mode does not make the call;
- its messages in the thread (the reply, a notice, an approval request) are
  held back here: :class:`FencedPublisher` reads the thread's entry just
  before each publish and drops the message, with one log line
  (``cluster.publish_suppressed``), when another daemon holds the thread.

What is left between that read and the publish (a stall of exactly that
moment) is covered by the reply's ``client_id``: the holder's reply to the
same prompt has the same one (``Nats-Msg-Id``), and the broker keeps the
first of the two within its duplicate window.
"""

from __future__ import annotations

import structlog

from daemon.cluster.leases import Leases
from daemon.runtime.ports import RuntimePublisher

__all__ = ["FencedPublisher"]

log = structlog.get_logger("asyncai.cluster")


class FencedPublisher:
    """:class:`daemon.runtime.RuntimePublisher` over ``inner`` that publishes in a
    thread only while this daemon holds it (or nobody does)."""

    def __init__(self, inner: RuntimePublisher, leases: Leases):
        self._inner = inner
        self._leases = leases
        self.suppressed = 0  # messages held back since the start

    @property
    def nick(self) -> str:
        """The inner publisher's nick."""
        return self._inner.nick

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Publish through the inner publisher; the new message's id, or "" when the
        thread is another daemon's (nothing was published). A broker that cannot be
        read raises :class:`.ClusterError`, as a failed publish would."""
        claim = await self._leases.get(channel, thread)
        if claim is not None and claim.owner != self._leases.member:
            self.suppressed += 1
            log.warning(
                "cluster.publish_suppressed",
                channel=channel,
                thread=thread,
                reply_to=reply_to,
                owner=claim.owner,
                chars=len(text),
            )
            return ""
        return await self._inner.publish(
            channel, text, thread=thread, reply_to=reply_to, client_id=client_id
        )
