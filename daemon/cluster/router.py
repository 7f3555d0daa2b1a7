"""Which daemon answers which thread: each inbound message is run here, or remembered.

Every daemon of a cluster reads every message of its channels. For each one,
:class:`ThreadRouter` decides from the thread's entry (:mod:`.leases`):

- a thread this daemon holds: the message goes to the runtime now;
- a thread nobody holds yet: the member that rendezvous hashing prefers
  among the live ones (:func:`preferred`) claims it, so new threads spread
  evenly over the daemons without any coordination beyond the claim; the
  others remember the message until the claim shows;
- a thread another live daemon holds: remembered, not run;
- a thread whose holder is no longer live: taken over (one contender wins),
  and its remembered prompts after the entry's ``answered`` go to the
  runtime first, in thread order, then the message. The old holder may have
  died between its reply's ack and its marker: ``answered`` is taken at least
  up to the newest prompt whose reply the channel's stream holds
  (``replied``, :func:`daemon.cluster.history.stream_replied`), so such a
  prompt is not run again (nor coalesced with a follow-up into a run whose
  reply the hub would not know for a repeat). The prompts of a run
  the old holder had cut off after starting a mutating call are not run
  again: :attr:`ThreadRouter.cut_off` lists them for the interrupted notice.
  The prompts of a run that waits for approval (the entry's undecided
  ``paused``) are not run again either: a :class:`MovedApproval` goes first,
  and the request is loaded here (:mod:`.approvals`).

A daemon whose heartbeat had a gap (the broker restarted, the network broke)
takes nothing over until it has beaten without a gap for a whole member TTL:
the others' keys may be missing only because they have not beaten again yet.

Remembered messages are dropped as soon as the entry says they were answered
(:meth:`ThreadRouter.scan`, every few seconds), so memory holds only the
prompts other daemons have not answered yet; commands (``!stop``,
``!approve``, ...) are for the daemon holding the thread and are not
remembered. :meth:`ThreadRouter.scan` is also what moves the threads of a
daemon that died: within ``member_ttl`` plus one scan interval.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import structlog

from daemon.cluster.errors import ClusterError
from daemon.cluster.history import is_command
from daemon.cluster.leases import Claim, Leases, MutatingRun, PausedEntry
from daemon.runtime.ports import InboundMessage
from sessions.model import InterruptedRun, StartedCall

__all__ = ["MovedApproval", "Routed", "ThreadRouter", "preferred"]

log = structlog.get_logger("asyncai.cluster")

ThreadKey = tuple[str, str]


@dataclass(frozen=True)
class MovedApproval:
    """A taken-over thread's run waiting for approval, with its remembered prompts."""

    channel: str
    thread: str
    paused: PausedEntry
    prompts: tuple[InboundMessage, ...]


Routed = InboundMessage | InterruptedRun | MovedApproval  # what goes to the runtime's side
MAX_REMEMBERED = 100_000  # messages of other daemons' threads kept at most (oldest dropped)


def preferred(channel: str, thread: str, members: Iterable[str]) -> str | None:
    """The member that should claim a new thread: highest hash of (member, thread)."""

    def weight(member: str) -> bytes:
        return hashlib.sha256(f"{member}\0{channel}\0{thread}".encode()).digest()

    return max(members, key=weight, default=None)


class ThreadRouter:
    """Routes inbound messages by thread ownership; see the module docstring."""

    def __init__(self, leases: Leases, replied: Callable[[str, str], Awaitable[str]] | None = None):
        self._leases = leases
        # (channel, thread) → the newest prompt the stream holds a reply to ("": none)
        self._replied = replied
        self.member = leases.member
        self._mine: set[ThreadKey] = set()
        self._remembered: dict[ThreadKey, list[InboundMessage]] = {}
        self._count = 0
        self.live: set[str] = {self.member}
        self._beat_ok = time.monotonic()
        self._steady_since: float | None = None  # beating without a gap since then
        self.taken_over = 0  # threads taken over from a daemon that was gone
        self._cut: dict[ThreadKey, MutatingRun] = {}  # taken over with a run cut off
        self._moved: dict[ThreadKey, PausedEntry] = {}  # taken over with a run paused
        self.notices: list[InterruptedRun | MovedApproval] = []  # found while recovering
        self._last_seen: dict[str, str] = {}  # channel → the newest message id routed
        self._before: dict[str, tuple[str, str]] = {}  # remembered id → (channel, the id before)
        # taken-over threads → the newest prompt dealt with at the takeover (answered, noticed,
        # or resumed from its request): a late copy of one of those is not run again
        self._floor: dict[ThreadKey, str] = {}
        # told of each thread taken over, before any of its messages goes on: a REPL
        # this daemon still holds of it is older than the stored one
        self.on_taken: Callable[[ThreadKey], Awaitable[None]] | None = None

    @property
    def remembered(self) -> int:
        """How many messages of other daemons' threads are remembered now."""
        return self._count

    def holds(self, channel: str, thread: str) -> bool:
        """Whether this daemon holds the thread (as far as it knows)."""
        return (channel, thread) in self._mine

    async def beat(self) -> None:
        """The heartbeat, and the live members read again."""
        try:
            await self._leases.beat()
            members = await self._leases.live_members()
        except ClusterError:
            self._steady_since = None
            raise
        now = time.monotonic()
        if self._steady_since is None:
            self._steady_since = now
        if now - self._beat_ok > self._leases.member_ttl / 2:
            # a gap (the process stalled, the broker was away): others may have taken
            # threads meanwhile, so every one is looked up again, whatever this beat says
            self._mine.clear()
        self._beat_ok = now
        self.live = members | {self.member}

    def _may_take_over(self) -> bool:
        # After a gap in the heartbeat (the broker restarted, the network broke) the
        # others' keys may be missing only because they have not beaten again yet:
        # nothing is taken over until each of them has had a whole TTL to do so.
        steady = self._steady_since
        return steady is not None and time.monotonic() - steady >= self._leases.member_ttl

    def _trust_cache(self) -> bool:
        # Unable to beat for half the TTL: others may already count this daemon
        # as gone and take its threads, so every thread is looked up again.
        if time.monotonic() - self._beat_ok > self._leases.member_ttl / 2:
            self._mine.clear()
            return False
        return True

    def cursor_cap(self, channel: str) -> str | None:
        """The furthest the channel's cursor may move: the message before the oldest one
        remembered (a restart must read it again); None: no limit; "": not at all."""
        caps = [before for ch, before in self._before.values() if ch == channel]
        return min(caps) if caps else None

    def seen(self, message: InboundMessage) -> None:
        """A message of the channel that is not routed (no daemon answers it)."""
        if message.id > self._last_seen.get(message.channel, ""):
            self._last_seen[message.channel] = message.id

    async def route(
        self, message: InboundMessage, own_nick: str, *, live: bool = True
    ) -> list[Routed]:
        """The messages to give the runtime now (in order); the rest is remembered.

        ``live``: read from the channel now (not a prompt recovered from the
        database), so the cursor must stay before it while it is remembered.
        """
        key = (message.channel, message.thread)
        before = self._last_seen.get(message.channel, "")
        if live and message.id > before:
            self._last_seen[message.channel] = message.id
        if message.sender == own_nick:
            return [message]  # the runtime skips it and moves the cursor
        if message.id <= self._floor.get(key, ""):
            return []  # read late, after the takeover that dealt with it
        if key in self._mine and self._trust_cache():
            return [message]
        if message.id == message.thread and self._someone_else_claims(key):
            claim = None  # a new thread another live member claims: no need to ask
        else:
            claim = await self._acquire(message.channel, message.thread)
        if claim is None or claim.owner != self.member:
            if not is_command(message.text):
                self._remember(key, message, before if live else None)
            return []
        return self._runnable(key, [*self._release(key), message], claim)

    async def scan(self, emit: Callable[[Routed], None]) -> None:
        """Look at every thread with remembered messages: drop the answered ones,
        take over the threads of daemons that are gone. The prompts to run now go
        to ``emit`` as each thread is won, before anything else can be routed."""
        for channel, thread in list(self._remembered):
            key = (channel, thread)
            claim = await self._acquire(channel, thread)
            if claim is None:
                continue
            if claim.owner == self.member:
                for ready in self._runnable(key, self._release(key), claim):
                    emit(ready)
                continue
            held = self._remembered.pop(key, [])
            kept = [m for m in held if m.id > claim.answered]
            self._forget(m for m in held if m.id <= claim.answered)
            self._count -= len(held) - len(kept)
            if kept:
                self._remembered[key] = kept

    def _someone_else_claims(self, key: ThreadKey) -> bool:
        first = preferred(key[0], key[1], self.live)
        return first is not None and first != self.member

    async def _acquire(self, channel: str, thread: str) -> Claim | None:
        """The entry after claiming or taking the thread over when this daemon should.

        None: nobody holds it and another live member should claim it.
        """
        if time.monotonic() - self._beat_ok > self._leases.member_ttl / 4:
            await self.beat()  # never claim with a key that may have expired meanwhile
        claim: Claim
        if not self._someone_else_claims((channel, thread)):
            claim = await self._leases.claim(channel, thread)  # or learn who holds it
        else:
            found = await self._leases.get(channel, thread)
            if found is None:
                return None
            claim = found
        if claim.owner != self.member and claim.owner not in self.live:
            if await self._leases.alive(claim.owner):
                self.live.add(claim.owner)  # joined since the last beat
            elif not self._may_take_over():
                log.info("cluster.takeover_deferred", thread=thread, owner=claim.owner)
            else:
                replied = await self._replied_in_stream(channel, thread)
                claim = await self._leases.take_over(channel, thread, claim, replied=replied)
                if claim.owner == self.member:
                    self.taken_over += 1
                    if self.on_taken is not None:
                        await self.on_taken((channel, thread))
                    if claim.mutating is not None:
                        self._cut[(channel, thread)] = claim.mutating
                    if claim.paused is not None and not claim.paused.decided:
                        self._moved[(channel, thread)] = claim.paused
                    log.warning(
                        "cluster.thread_taken_over",
                        channel=channel,
                        thread=thread,
                        answered=claim.answered,
                        replied=replied,
                    )
        if claim.owner == self.member:
            self._mine.add((channel, thread))
        else:
            self._mine.discard((channel, thread))
        return claim

    async def _replied_in_stream(self, channel: str, thread: str) -> str:
        """The newest prompt of the thread with its reply in the stream; "" when the
        stream cannot be read: its prompts then run again, and a reply that went out
        unchanged is dropped by the hub as a repeat (same ``client_id``)."""
        if self._replied is None:
            return ""
        try:
            return await self._replied(channel, thread)
        except ClusterError as exc:
            log.warning("cluster.replies_not_read", thread=thread, error=str(exc))
            return ""

    def _runnable(
        self, key: ThreadKey, messages: list[InboundMessage], claim: Claim
    ) -> list[Routed]:
        """What of a held thread's messages to run, in order: those not answered yet,
        after the notice of a run the old holder cut off (whose prompts are not run),
        or the request its run waits for (whose prompts resume from it)."""
        fresh = [m for m in messages if m.id > claim.answered]
        cut = self._cut.pop(key, None)
        paused = self._moved.pop(key, None)
        floor = max(
            claim.answered,
            max(cut.prompts, default="") if cut is not None else "",
            max(paused.prompts, default="") if paused is not None else "",
        )
        if floor and floor > self._floor.get(key, ""):
            self._floor.pop(key, None)
            self._floor[key] = floor  # newest last: the oldest go first past the bound
            while len(self._floor) > MAX_REMEMBERED:
                del self._floor[next(iter(self._floor))]
        first: list[Routed] = []
        if paused is not None and max(paused.prompts, default="") > claim.answered:
            waiting = tuple(m for m in fresh if m.id in paused.prompts)
            first.append(MovedApproval(key[0], key[1], paused, waiting))
            fresh = [m for m in fresh if m.id not in paused.prompts]
            if cut is not None and cut.run == paused.run:
                cut = None  # its calls before the pause ended; the request goes on here
        if cut is None or max(cut.prompts, default="") <= claim.answered:
            return [*first, *fresh]
        run = InterruptedRun(
            run_id=cut.run,
            channel=key[0],
            thread_id=key[1],
            prompt_ids=cut.prompts,
            calls=tuple(StartedCall(t, a, True, "unknown") for t, a in cut.calls),
        )
        return [run, *first, *(m for m in fresh if m.id not in cut.prompts)]

    def _remember(self, key: ThreadKey, message: InboundMessage, before: str | None) -> None:
        held = self._remembered.setdefault(key, [])
        if any(m.id == message.id for m in held):
            return  # a replay
        held.append(message)
        if before is not None:
            self._before[message.id] = (message.channel, before)
        self._count += 1
        while self._count > MAX_REMEMBERED:
            oldest = next(iter(self._remembered))
            dropped = self._remembered.pop(oldest)
            self._forget(dropped)
            self._count -= len(dropped)
            log.error("cluster.remembered_dropped", thread=oldest[1], messages=len(dropped))

    def _forget(self, messages: Iterable[InboundMessage]) -> None:
        for message in messages:
            self._before.pop(message.id, None)

    def _release(self, key: ThreadKey) -> list[InboundMessage]:
        held = self._remembered.pop(key, [])
        self._forget(held)
        self._count -= len(held)
        return held

    async def recovered(
        self, pending: list[InboundMessage]
    ) -> tuple[list[InboundMessage], list[InboundMessage]]:
        """Of the prompts this daemon's database has not answered (after a restart),
        those it should run now, and those another daemon answered meanwhile; the
        rest are remembered (their thread is held by another live daemon)."""
        keep: list[InboundMessage] = []
        resumed: set[str] = set()  # the prompts of a moved request: not answered elsewhere
        for message in pending:
            for ready in await self.route(message, own_nick="", live=False):
                if isinstance(ready, InboundMessage):
                    keep.append(ready)
                else:
                    self.notices.append(ready)
                    if isinstance(ready, MovedApproval):
                        resumed.update(ready.paused.prompts)
        kept = {m.id for m in keep} | resumed
        waiting = {m.id for held in self._remembered.values() for m in held}
        elsewhere = [m for m in pending if m.id not in kept and m.id not in waiting]
        return keep, elsewhere
