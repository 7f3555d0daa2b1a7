"""A ``Backoff`` that waits nothing and records what it was asked."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.backoff import Backoff


@dataclass(frozen=True)
class RecordingBackoff(Backoff):
    """Every delay is 0; ``asked`` lists each ``(attempt, retry_after)`` in order."""

    initial: float = 0.0
    maximum: float = 0.0
    asked: list[tuple[int, float | None]] = field(default_factory=list)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Record the question; answer 0 seconds."""
        self.asked.append((attempt, retry_after))
        return 0.0
