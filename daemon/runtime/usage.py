"""The tokens a run spends, made durable as each model response reports them.

The per-sender token limit (:mod:`daemon.runtime.limits`) reads the run rows'
token counts. A run's :class:`~daemon.runtime.runs.RunResult` carries its
tokens only when the run returns, so a run stopped by ``!stop``, paused for
approval and then stopped or denied, cut off at shutdown or killed would
count nothing (issue 26: ten stopped runs of 100 000 tokens each passed a
limit of 150 000). So the scheduler runs every run (and every resumed run)
under a :class:`TokenMeter` (:func:`metering`), and the model's endpoint
reports each response's usage through :func:`tokens_spent` as it arrives;
the meter adds it to the run's row at once (``add_run_tokens``) and keeps
the sum, which the scheduler puts in the record of a cancelled run. The
store never lowers a run's token counts when the run finishes.

Like ``current_progress``, the meter is a context variable: the run's task
sets it and the tasks it starts inherit it; outside a run reporting does
nothing (the warm-up request).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

import structlog

from sessions.model import RunMetrics

__all__ = ["TokenMeter", "TokenSink", "current_meter", "metering", "tokens_spent"]

log = structlog.get_logger("asyncai.runtime")


class TokenSink(Protocol):
    """Where a run's tokens go as they are spent (the runtime's store)."""

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add them to the run's row now."""
        ...


class TokenMeter:
    """One run's tokens: summed here, and written to ``sink`` as each response reports them."""

    def __init__(self, sink: TokenSink, run_id: str) -> None:
        self.run_id = run_id
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._sink = sink

    async def spent(self, prompt_tokens: int, completion_tokens: int) -> None:
        """One response's usage: counted here first, then on the run's row.

        A write that fails is logged, never raised (the run goes on); the sum
        still reaches the row with the run's end (:meth:`metrics`).
        """
        prompt_tokens, completion_tokens = max(0, prompt_tokens), max(0, completion_tokens)
        if not prompt_tokens and not completion_tokens:
            return
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        try:
            await self._sink.add_run_tokens(self.run_id, prompt_tokens, completion_tokens)
        except Exception as exc:
            log.warning(
                "runtime.tokens_not_recorded",
                run_id=self.run_id,
                tokens=prompt_tokens + completion_tokens,
                error=f"{type(exc).__name__}: {exc}",
            )

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


async def tokens_spent(prompt_tokens: int, completion_tokens: int) -> None:
    """A model response used these tokens (the endpoint calls this for each one)."""
    meter = current_meter.get()
    if meter is not None:
        await meter.spent(prompt_tokens, completion_tokens)
