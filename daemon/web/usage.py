"""Page 6, usage: tokens, runs, nested calls and bytes kept out of the context per day,
per sender and per channel, as charts; and each sender's per-sender limits and how
close they are.

The sums are :meth:`sessions.queries.Queries.usage` over this daemon's store
(``?days=N``, 30 by default). The limits are ``[runtime]``'s and each channel
section's (``max_runs_per_sender_per_hour``, ``max_tokens_per_sender_per_day``),
counted as the limiter counts them: a sender's answered runs of the last hour
and the tokens of their runs of the last 24 hours (:class:`LimitUse`). In a
cluster the limiter counts on the broker, across the daemons; this page shows
this daemon's own runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.web.charts import bar_chart
from daemon.web.console import Console
from sessions import UsageRow
from sessions.ids import iso_utc

__all__ = ["LimitUse", "routes"]

DEFAULT_DAYS = 30
MAX_DAYS = 366


@dataclass(frozen=True)
class LimitUse:
    """One sender against one scope's limits (``scope``: "[runtime]" or a channel)."""

    sender: str
    scope: str
    runs_last_hour: int
    max_runs_per_hour: int | None
    tokens_last_day: int
    max_tokens_per_day: int | None

    @staticmethod
    def _share(used: int, limit: int | None) -> float | None:
        return None if not limit else min(1.0, used / limit)

    @property
    def runs_share(self) -> float | None:
        """How much of the run limit is used (0..1; None: unlimited)."""
        return self._share(self.runs_last_hour, self.max_runs_per_hour)

    @property
    def tokens_share(self) -> float | None:
        """How much of the token limit is used (0..1; None: unlimited)."""
        return self._share(self.tokens_last_day, self.max_tokens_per_day)


def _charts(rows: list[UsageRow], what: str) -> dict[str, Markup]:
    # the SVG is built from escaped text (daemon.web.charts): safe to put in the page
    return {
        "tokens": Markup(bar_chart(f"tokens per {what}", [(r.key, r.tokens) for r in rows])),
        "runs": Markup(bar_chart(f"runs per {what}", [(r.key, r.runs) for r in rows])),
        "nested": Markup(
            bar_chart(f"nested calls per {what}", [(r.key, r.nested_calls) for r in rows])
        ),
        "kept": Markup(
            bar_chart(
                f"bytes kept out of the context per {what}",
                [(r.key, r.bytes_kept_out) for r in rows],
            )
        ),
    }


def routes(console: Console) -> list[BaseRoute]:
    """``/usage``, and the nav entry."""
    console.page("Usage", "/usage")
    store = console.sources.store
    config = console.sources.config

    async def limit_uses(now: datetime) -> list[LimitUse]:
        hour, day = iso_utc(now - timedelta(hours=1)), iso_utc(now - timedelta(days=1))
        scopes: list[tuple[str, str | None, int | None, int | None]] = []
        runtime = config.runtime
        if runtime.max_runs_per_sender_per_hour or runtime.max_tokens_per_sender_per_day:
            scopes.append(
                (
                    "[runtime]",
                    None,
                    runtime.max_runs_per_sender_per_hour,
                    runtime.max_tokens_per_sender_per_day,
                )
            )
        for channel in config.channels.channels:
            policy = config.policy(channel)
            if policy.channel and (
                policy.max_runs_per_sender_per_hour or policy.max_tokens_per_sender_per_day
            ):
                scopes.append(
                    (
                        channel,
                        channel,
                        policy.max_runs_per_sender_per_hour,
                        policy.max_tokens_per_sender_per_day,
                    )
                )
        if not scopes:
            return []
        senders = [r.key for r in await store.queries.usage("sender", since=day)]
        uses = []
        for scope, only, max_runs, max_tokens in scopes:
            for sender in senders:
                runs = await store.queries.sender_runs(sender, since=day, channel=only)
                if not runs:
                    continue
                uses.append(
                    LimitUse(
                        sender,
                        scope,
                        sum(1 for r in runs if r.answered and r.started >= hour),
                        max_runs,
                        sum(r.tokens for r in runs),
                        max_tokens,
                    )
                )
        return uses

    async def page(request: Request) -> Response:
        try:
            days = max(1, min(MAX_DAYS, int(request.query_params.get("days", DEFAULT_DAYS))))
        except ValueError:
            days = DEFAULT_DAYS
        now = datetime.now(UTC)
        since = iso_utc(now - timedelta(days=days))
        by_day = await store.queries.usage("day", since=since)
        by_sender = await store.queries.usage("sender", since=since)
        by_channel = await store.queries.usage("channel", since=since)
        context = {
            "days": days,
            "groups": [
                ("day", by_day, _charts(by_day, "day")),
                ("sender", by_sender, _charts(by_sender, "sender")),
                ("channel", by_channel, _charts(by_channel, "channel")),
            ],
            "limits": await limit_uses(now),
        }
        return console.render(request, "usage.html", context)

    return [Route("/usage", page, methods=["GET"])]
