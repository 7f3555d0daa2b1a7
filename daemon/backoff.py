"""``Backoff``: how long to wait before retry number ``attempt``, for every retry in daemon/.

One type for the model endpoint's retries (``[model] backoff_initial`` /
``backoff_max``, honouring a server's Retry-After) and the MCP servers'
restarts. It only computes delays; the caller sleeps, so tests inject a
``Backoff(0, 0)`` (or a subclass that records the attempts) and never really
wait. ``channels/`` keeps its own reconnect backoff: it imports nothing of
daemon/.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """``initial · 2^(attempt-1)`` seconds, at most ``maximum``.

    ``jitter`` takes up to that fraction off at random, so that clients retrying
    together spread out. A server's Retry-After, when given, is waited out
    (still at most ``maximum``).
    """

    initial: float = 0.5
    maximum: float = 30.0
    jitter: float = 0.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt`` (1 for the first retry)."""
        delay = min(self.maximum, self.initial * 2 ** max(0, attempt - 1))
        if self.jitter:
            delay *= random.uniform(1.0 - self.jitter, 1.0)
        if retry_after is not None:
            delay = min(self.maximum, max(delay, retry_after))
        return max(0.0, delay)
