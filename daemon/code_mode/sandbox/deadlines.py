"""One timer for the ``tool_timeout`` of every nested call of a run (issue 17).

``asyncio.timeout`` per call costs a timer handle pushed on the loop's heap
and cancelled again: in the bench's loop of small calls about 11 µs a call,
a sixth of our part of it. Every call of a run has the same timeout, so
deadlines arrive in the order calls start: a dict in insertion order is
already sorted, and one timer, set for the first deadline, serves them all.
A call costs a dict insert and delete; the timer fires at most once per
call that outlives its deadline's predecessor, and reschedules itself for
the next one. Expiry cancels the call's task and marks it, so the call's
``CancelledError`` can become ``TimeoutError`` as ``asyncio.timeout`` does
(``Task.uncancel()`` tells our cancel from one of outside).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Deadlines"]


class Deadlines:
    """Deadlines ``timeout`` seconds after each :meth:`start`, in start order."""

    def __init__(self, timeout: float):
        self._timeout = timeout
        self._due: dict[object, tuple[float, asyncio.Task[Any], list[bool]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: Callable[[], float] = time.monotonic

    def start(self, task: asyncio.Task[Any], expired: list[bool]) -> object:
        """Watch ``task`` from now (expiry sets ``expired[0]``); the token for :meth:`done`."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            # asyncio's own clock is time.monotonic, behind a Python method: a call saved
            if type(loop).time is not asyncio.BaseEventLoop.time:
                self._clock = loop.time
        token = object()
        deadline = self._clock() + self._timeout
        self._due[token] = (deadline, task, expired)
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._fire)
        return token

    def done(self, token: object) -> None:
        """Stop watching the call of ``token`` (it ended, whatever way)."""
        self._due.pop(token, None)

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._due:
            token = next(iter(self._due))
            deadline, task, expired = self._due[token]
            if deadline > now:
                self._timer = loop.call_at(deadline, self._fire)
                return
            del self._due[token]
            expired[0] = True
            task.cancel()
