"""Per-sender limits counted across the daemons of a cluster (issue 26 §5).

Alone, a daemon counts a sender's runs and tokens in its own SQLite
(:mod:`daemon.runtime.limits`); N daemons on one broker would allow N times
each limit. In a cluster the counts live on the broker: a key-value bucket
``asyncai_usage_<nick>`` with one entry per sender (the key is the nick in
hex), listing the runs started for that sender within the token window (a
day), oldest first::

    {"runs": [[run id, started, tokens, answered, [prompt ids], channel], ...]}

- Admitting a run (:meth:`ClusterSenderLimiter.admit`) reads the sender's
  entry, checks it with the rule one daemon uses
  (:func:`daemon.runtime.limits.limit_reached`) and, within the limits, adds
  the run with an update of the very revision it checked. Two daemons
  admitting runs of one sender at once cannot both pass a limit that only
  one of them fits under: the loser's update is refused, it reads again and
  checks again.
- A run whose prompts a later run answers (it was cut off by a crash or a
  shutdown, its thread taken over) no longer counts as a run
  (``answered`` false): the later run counts instead, as alone.
- The tokens of each model response are added to the run in each of its
  senders' entries as they are spent (:meth:`SenderCounts.add_tokens`, from
  the runtime store's ``add_run_tokens``), however the run ends.

Why one entry per sender rather than a key per run: the check reads one
value and the admission writes one (a round trip each), and one
compare-and-set decides a race. The entry is pruned to the window at each
write; the bucket's ``max_age`` drops the entry of a sender silent for longer.

Per channel (issue 29): each run keeps its channel (an entry written before
has none: it counts for every channel's limiter as for none). A channel with
a section of its own has a limiter of its own (``channel=``) that checks only
that channel's runs of the sender's entry, and names its section in the
refusal; the others check them all, as before.

With the broker unreachable when a run is admitted, the daemon checks its own
database instead, as it would alone (one log line, ``cluster.limits_local``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from daemon.cluster.errors import ClusterError
from daemon.cluster.leases import Write, bucket_name, compare_and_set
from daemon.runtime.limits import (
    RUN_WINDOW,
    TOKEN_WINDOW,
    LimitReached,
    SenderLimiter,
    SenderLimits,
    SenderUsage,
    limit_reached,
)
from daemon.runtime.ports import InboundMessage
from sessions.ids import iso_utc
from sessions.model import SenderRun

__all__ = ["ClusterSenderLimiter", "SenderCounts", "usage_bucket"]

log = structlog.get_logger("asyncai.cluster")

T = TypeVar("T")
_REMEMBERED_RUNS = 10_000  # run → senders kept for the token reports (bounded)


def usage_bucket(nick: str) -> str:
    """The key-value bucket of the per-sender counts of the daemons sharing ``nick``."""
    return bucket_name("usage", nick)


@dataclass
class _Run:
    run: str
    started: str  # the store's ISO format, so text order is time order
    tokens: int
    answered: bool
    prompts: list[str]
    channel: str | None = None  # None: written before runs kept their channel

    def as_json(self) -> list[Any]:
        return [self.run, self.started, self.tokens, self.answered, self.prompts, self.channel]

    def counts_in(self, channel: str | None) -> bool:
        """Whether the run counts for a limiter of ``channel`` (None: every channel's)."""
        return channel is None or self.channel is None or self.channel == channel


def _decode(value: bytes | None) -> list[_Run]:
    try:
        data: Any = json.loads(value or b"{}")
        return [
            _Run(
                str(r[0]),
                str(r[1]),
                int(r[2]),
                bool(r[3]),
                [str(p) for p in r[4]],
                str(r[5]) if len(r) > 5 and r[5] is not None else None,
            )
            for r in data.get("runs", [])
        ]
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise ClusterError(f"a sender's usage entry is not what this daemon writes: {exc}") from exc


def _encode(runs: list[_Run]) -> bytes:
    return json.dumps({"runs": [r.as_json() for r in runs]}).encode()


def _sender_runs(runs: list[_Run]) -> list[SenderRun]:
    return [SenderRun(started=r.started, tokens=r.tokens, answered=r.answered) for r in runs]


class SenderCounts:
    """The usage bucket: each sender's runs of the last day, shared by the daemons."""

    def __init__(self, js: JetStreamContext, nick: str):
        self._js = js
        self._name = usage_bucket(nick)
        self._bucket: KeyValue | None = None

    async def open(self) -> SenderCounts:
        """Create (or bind to) the bucket."""
        ttl = (TOKEN_WINDOW + RUN_WINDOW).total_seconds()
        try:
            self._bucket = await self._js.create_key_value(
                KeyValueConfig(bucket=self._name, history=1, ttl=ttl)
            )
        except nats.js.errors.BadRequestError:
            self._bucket = await self._js.key_value(self._name)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot open the usage bucket: {exc}") from exc
        return self

    @property
    def _kv(self) -> KeyValue:
        if self._bucket is None:
            raise ClusterError("the usage bucket is not open")
        return self._bucket

    async def _read(self, sender: str) -> tuple[list[_Run], int | None]:
        """The sender's runs and the entry's revision (None: no entry)."""
        try:
            entry = await self._kv.get(sender.encode().hex())
        except nats.js.errors.KeyNotFoundError:
            return [], None
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot read the usage of {sender}: {exc}") from exc
        return _decode(entry.value), entry.revision

    async def _change(
        self,
        sender: str,
        step: Callable[[list[_Run]], Write[T] | T],
        *,
        changing: str,
    ) -> T:
        """:func:`daemon.cluster.leases.compare_and_set` on the sender's entry."""
        return await compare_and_set(
            self._kv,
            sender.encode().hex(),
            lambda: self._read(sender),
            step,
            failing=f"cannot write the usage of {sender}",
            kept_changing=f"the usage of {sender} kept changing while {changing}",
        )

    async def runs(self, sender: str, now: datetime, channel: str | None = None) -> list[SenderRun]:
        """The sender's runs within the token window, oldest first (``channel``'s only)."""
        since = iso_utc(now - TOKEN_WINDOW)
        runs, _ = await self._read(sender)
        return _sender_runs([r for r in runs if r.started >= since and r.counts_in(channel)])

    async def admit(
        self,
        sender: str,
        run_id: str,
        prompt_ids: list[str],
        limits: SenderLimits,
        now: datetime,
        *,
        channel: str | None = None,
        only: str | None = None,
        section: str = "[runtime]",
    ) -> LimitReached | None:
        """The limit ``sender`` has reached, or None after ``run_id`` (of ``channel``) was
        added to their runs, in one compare-and-set with the check (see the module
        docstring); ``only``: check the runs of that channel only, ``section`` naming it."""
        since, started = iso_utc(now - TOKEN_WINDOW), iso_utc(now)
        asked = set(prompt_ids)

        def step(stored: list[_Run]) -> Write[LimitReached | None] | LimitReached | None:
            runs = [r for r in stored if r.started >= since and r.run != run_id]
            for run in runs:
                if asked.intersection(run.prompts):
                    run.answered = False  # its prompts are answered by this run now
            counted = _sender_runs([r for r in runs if r.counts_in(only)])
            reached = limit_reached(sender, limits, counted, now, section)
            if reached is not None:
                return reached
            runs.append(_Run(run_id, started, 0, True, sorted(asked), channel))
            return Write(_encode(runs), None)

        return await self._change(sender, step, changing="a run was admitted")

    async def add_tokens(self, sender: str, run_id: str, tokens: int, now: datetime) -> None:
        """Add ``tokens`` to ``run_id`` among ``sender``'s runs (added now if it is not)."""
        since = iso_utc(now - TOKEN_WINDOW)

        def step(stored: list[_Run]) -> Write[None] | None:
            runs = [r for r in stored if r.started >= since or r.run == run_id]
            run = next((r for r in runs if r.run == run_id), None)
            if run is None:
                run = _Run(run_id, iso_utc(now), 0, True, [])
                runs.append(run)
            run.tokens += tokens
            return Write(_encode(runs), None)

        await self._change(sender, step, changing="tokens were added")


# run id → the senders of its prompts, from the database (a run not admitted by this process)
RunSenders = Callable[[str], Awaitable[set[str]]]


class ClusterSenderLimiter(SenderLimiter):
    """:class:`daemon.runtime.limits.SenderLimiter` counting on the broker
    (:class:`SenderCounts`); ``local`` is this daemon's own database, checked
    when the broker cannot be reached."""

    def __init__(
        self,
        counts: SenderCounts,
        local: SenderUsage,
        limits: SenderLimits,
        *,
        run_senders: RunSenders,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        channel: str | None = None,
    ):
        super().__init__(local, limits, clock=clock, channel=channel)
        self._counts = counts
        self._run_senders = run_senders
        self._senders: dict[str, set[str]] = {}  # admitted here: run → its counted senders

    async def admit(
        self, run_id: str, prompts: Sequence[InboundMessage]
    ) -> dict[str, LimitReached]:
        """Each sender checked and, within the limits, the run counted for them on
        the broker in one compare-and-set; the senders at a limit."""
        if self.limits.unlimited:
            return {}
        now = self.now()
        reached: dict[str, LimitReached] = {}
        admitted: set[str] = set()
        try:
            run_channel = prompts[0].channel if prompts else None
            for sender in sorted({m.sender for m in prompts}):
                ids = [m.id for m in prompts if m.sender == sender]
                found = await self._counts.admit(
                    sender,
                    run_id,
                    ids,
                    self.limits,
                    now,
                    channel=run_channel,
                    only=self.channel,
                    section=self.section,
                )
                if found is None:
                    admitted.add(sender)
                else:
                    reached[sender] = found
        except ClusterError as exc:
            log.warning("cluster.limits_local", run_id=run_id, error=str(exc))
            return await super().admit(run_id, prompts)
        if len(self._senders) >= _REMEMBERED_RUNS:
            self._senders.clear()  # bounded; a forgotten run's senders are read from the database
        self._senders[run_id] = admitted
        return reached

    async def check(self, senders: set[str]) -> dict[str, LimitReached]:
        """The senders at a limit now, counted on the broker (else locally)."""
        if self.limits.unlimited:
            return {}
        now = self.now()
        reached: dict[str, LimitReached] = {}
        try:
            for sender in sorted(senders):
                runs = await self._counts.runs(sender, now, self.channel)
                found = limit_reached(sender, self.limits, runs, now, self.section)
                if found is not None:
                    reached[sender] = found
        except ClusterError as exc:
            log.warning("cluster.limits_local", error=str(exc))
            return await super().check(senders)
        return reached

    async def spent(self, run_id: str, tokens: int) -> None:
        """A run's tokens, added in each of its senders' entries (raises ClusterError)."""
        if tokens <= 0 or self.limits.max_tokens_per_day is None:
            return
        senders = self._senders.get(run_id)
        if senders is None:
            senders = await self._run_senders(run_id)
        now = self.now()
        for sender in sorted(senders):
            await self._counts.add_tokens(sender, run_id, tokens, now)
