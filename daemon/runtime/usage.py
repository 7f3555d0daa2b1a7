"""The tokens a run spends, made durable as the run goes on.

The per-sender token limit (:mod:`daemon.runtime.limits`) reads the run rows'
token counts. A run's :class:`~daemon.runtime.runs.RunResult` carries its
tokens only when the run returns, so a run stopped by ``!stop``, paused for
approval and then stopped or denied, cut off at shutdown or killed would
count nothing (issue 26: ten stopped runs of 100 000 tokens each passed a
limit of 150 000). So the scheduler runs every run (and every resumed run)
under a :class:`TokenMeter` (:func:`metering`), and the model's endpoint
reports each response's usage through :func:`tokens_spent` as it arrives.
The meter keeps the sum, which the scheduler puts in the record of a
cancelled run, and adds each response's tokens to the run's row before the
run's next model request (:func:`tokens_before_request`), or
:data:`TOKENS_DELAY` after the response if the run is still going on then
(running code, calling tools, waiting for an approval). The store never
lowers a run's token counts when the run finishes.

Why not at once, as before (issue 31): most runs end with the response that
answers, and their end writes the run's token totals in its own
transaction, so a write of that response's tokens a moment before was a
store job of its own on every prompt. What a write at once covered beyond
this: a crash in the moment between the last response and the run's end
(a few milliseconds; at most :data:`TOKENS_DELAY` where the run goes on)
loses that one response's count, as a crash before the write did before.
Where the store counts the tokens elsewhere too (a cluster with per-sender
limits adds them on the broker, and a run's end does not), it says so
(``tokens_with_end`` False) and each response's tokens are written at once.

Like ``current_progress``, the meter is a context variable: the run's task
sets it and the tasks it starts inherit it; outside a run reporting does
nothing (the warm-up request).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

import structlog

from sessions.model import RunMetrics

__all__ = [
    "TOKENS_DELAY",
    "TokenMeter",
    "TokenSink",
    "current_meter",
    "metering",
    "tokens_before_request",
    "tokens_spent",
]

log = structlog.get_logger("asyncai.runtime")

TOKENS_DELAY = 0.25
"""Seconds after a response that its tokens reach the run's row, at the latest, while
the run goes on (its next model request writes them sooner; its end, with the rest)."""


class TokenSink(Protocol):
    """Where a run's tokens go as they are spent (the runtime's store)."""

    @property
    def tokens_with_end(self) -> bool:
        """Whether a response's tokens may wait for the run's end, whose transaction
        writes the run's sums (else each response's are written at once)."""
        ...

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add them to the run's row now."""
        ...


class TokenMeter:
    """One run's tokens: summed here, and written to ``sink`` as the run goes on."""

    def __init__(self, sink: TokenSink, run_id: str) -> None:
        self.run_id = run_id
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._sink = sink
        self._pending = (0, 0)  # counted here, not yet on the row
        self._timer: asyncio.TimerHandle | None = None
        self._writes: set[asyncio.Task[None]] = set()  # the timer's, until done
        self._closed = False

    async def spent(self, prompt_tokens: int, completion_tokens: int) -> None:
        """One response's usage: counted here now, on the run's row before the run's
        next request or within :data:`TOKENS_DELAY` (the run's end writes the sum)."""
        prompt_tokens, completion_tokens = max(0, prompt_tokens), max(0, completion_tokens)
        if not prompt_tokens and not completion_tokens:
            return
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        pending_prompt, pending_completion = self._pending
        self._pending = (pending_prompt + prompt_tokens, pending_completion + completion_tokens)
        if not self._sink.tokens_with_end:
            await self.write()
        elif self._timer is None and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(TOKENS_DELAY, self._write_soon)

    def _write_soon(self) -> None:
        self._timer = None
        task = asyncio.create_task(self._write_unless_closed())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write_unless_closed(self) -> None:
        # A task that had not started when the run ended writes nothing: its write
        # would land after the end's, adding to the sums the end wrote.
        if not self._closed:
            await self.write()

    async def write(self) -> None:
        """The tokens counted since the last write, added to the run's row now.

        A write that fails is logged, never raised (the run goes on); the sum
        still reaches the row with the run's end (:meth:`metrics`).
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        prompt_tokens, completion_tokens = self._pending
        if not prompt_tokens and not completion_tokens:
            return
        self._pending = (0, 0)
        try:
            await self._sink.add_run_tokens(self.run_id, prompt_tokens, completion_tokens)
        except Exception as exc:
            log.warning(
                "runtime.tokens_not_recorded",
                run_id=self.run_id,
                tokens=prompt_tokens + completion_tokens,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def returned(self, metrics: RunMetrics, *, ending: bool) -> None:
        """The run returned with ``metrics``: the tokens not written yet go with its end
        when it ends now (``ending``) and ``metrics`` carry the meter's sums; else (a
        run paused for approval, recorded apart from its end) they are written now.
        :func:`metering` closes the meter as the run's block ends, right after."""
        covered = (
            metrics.prompt_tokens >= self.prompt_tokens
            and metrics.completion_tokens >= self.completion_tokens
        )
        if not (ending and covered):
            await self.write()

    def close(self) -> None:
        """The run returned or was cut off: what is not written yet goes with its end
        (whose transaction writes the run's sums). A write that started before lands
        before the end's: the store takes its writes in the order they were asked."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = (0, 0)

    def metrics(self) -> RunMetrics:
        """The tokens counted so far, as the metrics of a run that did not return its own."""
        return RunMetrics(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens
        )


current_meter: ContextVar[TokenMeter | None] = ContextVar("current_meter", default=None)
"""The meter of the run whose task this is (None outside a run)."""


@contextlib.contextmanager
def metering(meter: TokenMeter) -> Iterator[TokenMeter]:
    """Within the block, the run's responses report their tokens to ``meter``."""
    token = current_meter.set(meter)
    try:
        yield meter
    finally:
        current_meter.reset(token)
        meter.close()


async def tokens_spent(prompt_tokens: int, completion_tokens: int) -> None:
    """A model response used these tokens (the endpoint calls this for each one)."""
    meter = current_meter.get()
    if meter is not None:
        await meter.spent(prompt_tokens, completion_tokens)


async def tokens_before_request() -> None:
    """A model request of the run is about to go out: the tokens of its earlier
    responses on the run's row first (the endpoint calls this for each request)."""
    meter = current_meter.get()
    if meter is not None:
        await meter.write()
