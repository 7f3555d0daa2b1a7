"""The cluster's errors: the broker could not be reached or refused what was asked.

::

    daemon.errors.AsyncaiError
    └── ClusterError            the NATS broker failed a cluster operation (leases,
        │                       scopes, audit); carries what was being done
        └── ThreadMoved         another daemon holds the thread now (this one's
                                lease lapsed: a stall, a partition); it makes no
                                more calls and publishes nothing in it
"""

from __future__ import annotations

import asyncio

from daemon.errors import AsyncaiError

__all__ = ["ClusterError", "ThreadMoved", "honour_cancel"]


class ClusterError(AsyncaiError):
    """A cluster operation on the NATS broker failed; the message says which one."""


class ThreadMoved(ClusterError):
    """This daemon no longer holds the thread: another one took it over."""

    def __init__(self, thread: str, owner: str):
        super().__init__(
            f"thread {thread} is held by another daemon now ({owner}): "
            "this daemon's lease lapsed and it took the thread over"
        )
        self.thread = thread
        self.owner = owner


def honour_cancel() -> None:
    """Raise the CancelledError of a cancel that the NATS client swallowed.

    On Python 3.11, ``asyncio.wait_for`` (which nats-py's requests use) returns
    instead of raising when its inner future ends as the task is cancelled
    (gh-86296); a cluster loop then went on, and the daemon's shutdown waited
    for it for ever (tests/test_cluster_process.py, about one full cluster run
    in three). Each cluster loop calls this once a round, so it stops at the next.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
