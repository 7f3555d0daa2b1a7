"""Per-sender limits: runs per hour and tokens per day, counted from the store.

``[runtime] max_runs_per_sender_per_hour`` and ``max_tokens_per_sender_per_day``
(unset: unlimited). They are checked as a run is about to start, from the
runs table, so a restart does not reset them:

- a sender's runs are the runs that answered at least one of their prompts
  and started within the last hour (a coalesced run that answered two
  senders counts once for each of them, whatever its status; a run cut off
  by a shutdown or a crash, whose prompts a later run answers, is not one);
- a sender's tokens are the prompt and completion tokens of every run
  started for their prompts within the last 24 hours, however it ended:
  stopped, paused for approval, cut off at shutdown or by a crash (all of a
  coalesced run's tokens count for each of its senders). The tokens are
  durable as they are spent: each model response's usage is added to the
  run's row as it arrives (:mod:`daemon.runtime.usage`). A run is not cut
  off when it goes over: the limit stops the next one.

Per channel (issue 29): a channel whose ``[channel."#name"]`` section exists
has its limits (its own keys, else ``[runtime]``'s) counted over its own runs
only, with a limiter of its own (``SenderLimiter(channel=...)``): a sender's
runs in ``#help`` never count against ``#ops``. The channels without a
section share ``[runtime]``'s limits counted over every channel, as before.

The counts are read through :class:`SenderUsage` and written through the
runtime's store (``add_run_tokens``). In a cluster (``nats://``) they are
counted on the broker instead, across the daemons: :mod:`daemon.cluster.usage`
plugs in behind :meth:`SenderLimiter.admit` and the store's ``add_run_tokens``.

The prompts of a sender who reached a limit are not run: they are marked
``failed`` and the thread gets one line saying which limit and when it frees
up. The other senders' prompts of the same run go on. The check and the run
row are written under one lock, so runs starting at once cannot overshoot
the run limit together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from daemon.runtime.complete import complete
from daemon.runtime.context import Run, RunContext
from daemon.runtime.deliver import publish_quietly
from daemon.runtime.ports import InboundMessage
from sessions.ids import iso_utc
from sessions.model import SenderRun

__all__ = [
    "RUN_WINDOW",
    "TOKEN_WINDOW",
    "LimitReached",
    "SenderLimiter",
    "SenderLimits",
    "SenderUsage",
    "limit_reached",
    "start_within_limits",
]

RUN_WINDOW = timedelta(hours=1)
TOKEN_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class SenderLimits:
    """The two limits; None is unlimited."""

    max_runs_per_hour: int | None = None
    max_tokens_per_day: int | None = None

    @property
    def unlimited(self) -> bool:
        """True when neither limit is set (nothing to check)."""
        return self.max_runs_per_hour is None and self.max_tokens_per_day is None


@dataclass(frozen=True)
class LimitReached:
    """A sender at a limit: which one, how much was used, and when it frees up."""

    sender: str
    key: str  # the config key, as the operator knows it
    used: int
    limit: int
    unit: str  # "run", "token"
    window: str  # "the last hour"
    frees_at: datetime
    section: str = "[runtime]"  # where the limit is set: [channel."#help"] for a channel's

    def reply(self) -> str:
        """The one line the thread gets instead of a run."""
        when = self.frees_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        used = f"{self.used} {self.unit}{'' if self.used == 1 else 's'} in {self.window}"
        return (
            f"Not run: {self.sender} reached {self.section} {self.key} = {self.limit} "
            f"({used}); it frees up at {when}."
        )


def _moment(started: str) -> datetime:
    return datetime.fromisoformat(started.replace("Z", "+00:00"))


def limit_reached(
    sender: str,
    limits: SenderLimits,
    runs: Sequence[SenderRun],
    now: datetime,
    section: str = "[runtime]",
) -> LimitReached | None:
    """The first limit ``sender`` has reached, given their runs of the last day (oldest
    first), or None; ``section``: where the limits are set, for the reply. Pure: the
    store reads and the clock are the caller's."""
    recent = [r for r in runs if r.answered and _moment(r.started) >= now - RUN_WINDOW]
    cap = limits.max_runs_per_hour
    if cap is not None and len(recent) >= cap:
        # Free once enough of the oldest have left the window to be under the cap.
        oldest_to_leave = recent[len(recent) - cap]
        return LimitReached(
            sender,
            "max_runs_per_sender_per_hour",
            len(recent),
            cap,
            "run",
            "the last hour",
            _moment(oldest_to_leave.started) + RUN_WINDOW,
            section,
        )
    cap = limits.max_tokens_per_day
    day = [r for r in runs if _moment(r.started) >= now - TOKEN_WINDOW]
    used = sum(r.tokens for r in day)
    if cap is not None and used >= cap:
        left = used
        frees_at = now + TOKEN_WINDOW
        for run in day:
            left -= run.tokens
            if left < cap:
                frees_at = _moment(run.started) + TOKEN_WINDOW
                break
        return LimitReached(
            sender,
            "max_tokens_per_sender_per_day",
            used,
            cap,
            "token",
            "the last 24 hours",
            frees_at,
            section,
        )
    return None


class SenderUsage(Protocol):
    """Where a sender's runs are read (``sessions.Store.sender_runs``)."""

    async def sender_runs(
        self, sender: str, since: str, channel: str | None = None
    ) -> list[SenderRun]:
        """Runs started at or after ``since`` that answered a prompt of ``sender`` (in
        ``channel`` only, when given)."""
        ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


class SenderLimiter:
    """Checks senders against :class:`SenderLimits` from their stored runs.

    ``channel``: count only that channel's runs, and name its section in the
    reply (a channel with a section of its own, issue 29); None: every channel's.
    """

    def __init__(
        self,
        usage: SenderUsage,
        limits: SenderLimits,
        *,
        clock: Callable[[], datetime] = _utc_now,
        channel: str | None = None,
    ):
        self.limits = limits
        self.channel = channel
        self._usage = usage
        self._clock = clock
        self.lock = asyncio.Lock()  # held from the check until the run row is written

    def now(self) -> datetime:
        """The limiter's clock (UTC)."""
        return self._clock()

    async def admit(
        self, run_id: str, prompts: Sequence[InboundMessage]
    ) -> dict[str, LimitReached]:
        """The senders of ``prompts`` at a limit now; for the others, ``run_id`` is
        about to start. Here the run counts once its row is written (the caller
        does that under :attr:`lock`); a cluster's limiter counts it on the broker
        in the same step as the check (:mod:`daemon.cluster.usage`)."""
        return await self.check({m.sender for m in prompts})

    async def check(self, senders: set[str]) -> dict[str, LimitReached]:
        """The senders (of ``senders``) at a limit now, each with the limit reached."""
        if self.limits.unlimited:
            return {}
        now = self._clock()
        since = iso_utc(now - max(RUN_WINDOW, TOKEN_WINDOW))
        reached: dict[str, LimitReached] = {}
        for sender in sorted(senders):
            if self.channel is None:
                runs = await self._usage.sender_runs(sender, since)
            else:
                runs = await self._usage.sender_runs(sender, since, self.channel)
            found = limit_reached(sender, self.limits, runs, now, self.section)
            if found is not None:
                reached[sender] = found
        return reached

    @property
    def section(self) -> str:
        """Where its limits are set, as the reply names it."""
        return "[runtime]" if self.channel is None else f'[channel."{self.channel}"]'


async def start_within_limits(
    context: RunContext, limiter: SenderLimiter | None, run: Run
) -> list[InboundMessage]:
    """Write the run row for the prompts whose senders are within their limits; those
    prompts (none: no run row). The others are marked failed, each sender's last one
    answered with :meth:`LimitReached.reply`."""
    store, prompts = context.store, run.prompts
    run_id, channel, thread_id, bound = run.run_id, run.channel, run.thread_id, run.log
    if limiter is None:
        # Nothing reads the row before the run's own next write, which carries it (a
        # transaction fewer a prompt, issue 31); a limiter counts runs, so it waits for it.
        await store.start_run(run_id, channel, thread_id, [m.id for m in prompts], defer=True)
        return prompts
    async with limiter.lock:
        reached = await limiter.admit(run_id, prompts)
        admitted = [m for m in prompts if m.sender not in reached]
        if admitted:
            await store.start_run(run_id, channel, thread_id, [m.id for m in admitted])
    for sender, limit in reached.items():
        refused = [m for m in prompts if m.sender == sender]
        bound.warning(
            "runtime.sender_limited",
            sender=sender,
            limit=limit.key,
            used=limit.used,
            frees_at=limit.frees_at.isoformat(),
            prompts=[m.id for m in refused],
        )
        await complete(store.set_prompt_status([m.id for m in refused], "failed"))
        await complete(
            publish_quietly(
                context.publisher,
                context.options.publish_timeout,
                channel,
                thread_id,
                refused[-1].id,
                limit.reply(),
            )
        )
    return admitted
