"""The hub's counters, shared by its parts: each part bumps the ones it owns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HubStats"]


@dataclass
class HubStats:
    """Counters of a running hub (for tests, the benchmark and the logs)."""

    connections: int = 0
    subscriptions: int = 0
    published: int = 0
    duplicates: int = 0
    slow_closed: int = 0
    flood_closed: int = 0
    statuses: int = 0  # status frames fanned out (each counted once, whatever the subscribers)
    statuses_dropped: int = 0  # status copies not queued: that subscriber's outbox was half full
