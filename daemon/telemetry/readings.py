"""What the metrics' gauges read from the daemon when scraped, as plain callables.

Kept apart from :mod:`daemon.telemetry.metrics` so that the daemon can say
what to read without importing prometheus-client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Readings"]


@dataclass
class Readings:
    """What the gauges read from the daemon when scraped (each None: not reported).

    ``scopes_saved`` is async (a SQLite count), read by :func:`metrics_app`
    before each scrape; the others are plain reads of memory.
    """

    active_runs: Callable[[], int] | None = None
    queued_prompts: Callable[[], int] | None = None
    approvals_pending: Callable[[], int] | None = None
    scopes_live: Callable[[], int] | None = None
    scopes_saved: Callable[[], Awaitable[int]] | None = None
    channel_reconnects: Callable[[], int] | None = None
