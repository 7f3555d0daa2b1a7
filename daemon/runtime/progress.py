"""A run's progress, shown in its thread while it works ("thinking", "running code …").

The daemon wraps each run (and each resumed run) in :func:`showing_progress`,
which sets :data:`current_progress` for the run's task; the tasks it starts
inherit it, as they inherit ``current_tool_use``. The model code reports
through the module functions, which do nothing outside a run:

- :func:`model_request` as each model request starts: "thinking", or
  "answering" for the final round that withdraws the tools;
- :func:`tool_call_started` as the model's tool call starts: "running code"
  for ``run_code``, "calling TOOL" in direct mode;
- :func:`progress_observer` wraps the code-mode audit observer and counts
  each nested call as it starts: "running code (3 tool calls so far)".

Each text goes out as a channel ``status`` frame (not stored by the hub), at
most one per :data:`PROGRESS_INTERVAL` per run (one run per thread at a time,
so per thread), and none in the run's first :data:`PROGRESS_GRACE`:
:class:`Throttle`, pure and clocked from outside, keeps the newest text that
came too soon and lets it go once the interval (or the grace) is over; texts
that were overtaken meanwhile are never sent. A run that replies within the
grace shows no status at all: one drawn for milliseconds before the reply is
noise to the reader, and each costs the daemon a frame out and its echo in
(about 0.4 ms of CPU measured alone; issue 31, docs/benchmarks). Best effort: a status
that cannot be sent is logged at debug and forgotten, never failing the run.
The run's sender task is cancelled when the run returns, before its reply is
published, so no status ever follows the reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar

import structlog

from daemon.tools import AuditEntry, AuditObserver

__all__ = [
    "PROGRESS_GRACE",
    "PROGRESS_INTERVAL",
    "RunProgress",
    "Throttle",
    "current_progress",
    "model_request",
    "progress_observer",
    "running_code",
    "showing_progress",
    "tool_call_started",
]

log = structlog.get_logger("asyncai.daemon")

PROGRESS_INTERVAL = 1.0
"""Seconds between two statuses of one run, at least."""

PROGRESS_GRACE = 0.5
"""Seconds a run works before its first status may go."""


def running_code(calls: int) -> str:
    """``running code``, then how many nested tool calls the snippets made so far."""
    if calls == 0:
        return "running code"
    return f"running code ({calls} tool call{'' if calls == 1 else 's'} so far)"


class Throttle:
    """At most one text per ``interval`` seconds of ``clock``, none in the first
    ``grace`` seconds after it is made; the newest waiting text wins.

    Pure: it only says what may go when. :meth:`offer` a text, ask
    :meth:`delay` how long until it may go, :meth:`take` it when that is 0.
    A text equal to the one last taken is not offered again.
    """

    def __init__(
        self, interval: float, clock: Callable[[], float] = time.monotonic, grace: float = 0.0
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._first_at = clock() + grace  # when the first text may go
        self._last_at: float | None = None
        self._last: str | None = None
        self.pending: str | None = None

    def offer(self, text: str) -> None:
        """Make ``text`` the one to send next, replacing any still waiting."""
        self.pending = None if text == self._last else text

    def delay(self) -> float | None:
        """Seconds until the waiting text may go (0.0: now); None when none waits."""
        if self.pending is None:
            return None
        if self._last_at is None:
            return max(0.0, self._first_at - self._clock())
        return max(0.0, self._last_at + self.interval - self._clock())

    def take(self) -> str | None:
        """The waiting text if it may go now (it counts as sent from now), else None."""
        if self.delay() != 0.0:
            return None
        text, self.pending = self.pending, None
        self._last, self._last_at = text, self._clock()
        return text


class RunProgress:
    """One run's progress: what the run reports, throttled, handed to ``send``.

    ``send(text)`` publishes one status (the channel's ``status``). Its one
    task is owned here and ends in :meth:`aclose`; a report made in the grace
    starts it only when the grace is over (a timer, cancelled by :meth:`aclose`),
    so a run that replies within the grace starts no task at all.
    """

    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        grace: float = PROGRESS_GRACE,
    ) -> None:
        self._send = send
        self._throttle = Throttle(interval, clock, grace)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._later: asyncio.TimerHandle | None = None  # starts the task after the grace
        self._closed = False
        self.nested_calls = 0  # nested tool calls started by this run's snippets
        self.sent: list[str] = []  # what went out, for the logs and the tests

    def report(self, text: str) -> None:
        """Show ``text`` as the run's progress, as soon as the throttle lets it."""
        if self._closed:
            return
        self._throttle.offer(text)
        self._wake.set()
        if self._task is None and self._later is None:
            delay = self._throttle.delay()
            if delay:  # in the grace: nothing can go before it ends
                self._later = asyncio.get_running_loop().call_later(delay, self._start)
            else:
                self._start()

    def _start(self) -> None:
        self._later = None
        if not self._closed and self._task is None:
            self._task = asyncio.create_task(self._pump(), name="asyncai-progress")

    def nested_call_started(self) -> None:
        """A snippet started one more nested tool call."""
        self.nested_calls += 1
        self.report(running_code(self.nested_calls))

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while (delay := self._throttle.delay()) is not None:
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                text = self._throttle.take()
                if text is not None:
                    await self._deliver(text)

    async def _deliver(self, text: str) -> None:
        try:
            await self._send(text)
        except Exception as exc:  # best effort: progress never fails a run
            log.debug("daemon.progress_not_sent", status=text, error=f"{type(exc).__name__}: {exc}")
        else:
            self.sent.append(text)

    async def aclose(self) -> None:
        """Send nothing more: the waiting text is dropped, a send under way cancelled."""
        self._closed = True
        if self._later is not None:
            self._later.cancel()
            self._later = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


current_progress: ContextVar[RunProgress | None] = ContextVar("current_progress", default=None)
"""The progress of the run whose task this is (None outside a run)."""


@contextlib.asynccontextmanager
async def showing_progress(
    send: Callable[[str], Awaitable[None]],
    *,
    interval: float = PROGRESS_INTERVAL,
    grace: float = PROGRESS_GRACE,
) -> AsyncIterator[RunProgress]:
    """Within the block, the run's reports go to ``send``; none in its first ``grace``
    seconds, none after it ends."""
    progress = RunProgress(send, interval=interval, grace=grace)
    token = current_progress.set(progress)
    try:
        yield progress
    finally:
        current_progress.reset(token)
        await progress.aclose()


def model_request(*, final: bool) -> None:
    """A model request starts: "answering" for the final round, else "thinking"."""
    progress = current_progress.get()
    if progress is not None:
        progress.report("answering" if final else "thinking")


def tool_call_started(tool: str) -> None:
    """The model's call of ``tool`` starts (``run_code``, or an MCP tool in direct mode)."""
    progress = current_progress.get()
    if progress is not None:
        progress.report(
            running_code(progress.nested_calls) if tool == "run_code" else f"calling {tool}"
        )


def progress_observer(inner: AuditObserver | None) -> AuditObserver:
    """The code-mode observer that counts nested calls as they start, then hands on to ``inner``."""

    def observe(thread_id: str | None, entry: AuditEntry) -> Awaitable[None] | None:
        if entry.outcome == "started":
            progress = current_progress.get()
            if progress is not None:
                progress.nested_call_started()
        return inner(thread_id, entry) if inner is not None else None

    return observe
