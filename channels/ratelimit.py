"""A per-connection token bucket that tells a burst from a flood.

Pure: the caller passes the time, so tests need no clock.

Every frame costs one token; the bucket holds ``burst`` tokens and refills at
``rate`` per second. A frame without a token is refused (``rate_limited``),
and still costs one: the bucket goes into debt. A client that backs off when
refused pays the debt back and recovers; one that keeps sending sinks below
``-burst``, which is a flood, and the hub closes that connection.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TokenBucket", "Verdict"]


class Verdict(Enum):
    """What to do with one frame."""

    OK = "ok"
    LIMITED = "limited"  # refuse it with a rate_limited error, keep the connection
    FLOOD = "flood"  # close the connection


class TokenBucket:
    """``rate`` frames per second on average, bursts of up to ``burst``."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self._at = now

    def take(self, now: float) -> Verdict:
        """Charge one frame at time ``now`` (seconds, monotonic)."""
        self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        self._at = now
        self.tokens -= 1
        if self.tokens >= 0:
            return Verdict.OK
        if self.tokens < -self.burst:
            return Verdict.FLOOD
        return Verdict.LIMITED
