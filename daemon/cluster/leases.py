"""Who holds which thread: members that heartbeat, and per-thread owner entries.

Two JetStream key-value buckets (:class:`Leases` owns both):

- ``members``: one key per live daemon, rewritten every ``beat`` seconds, its
  value the daemon's channel policy digests (:mod:`.policies`). The
  bucket's ``max_age`` is ``member_ttl``, so the broker itself deletes the key
  of a daemon that stopped beating: liveness is judged by one clock (the
  broker's), never by comparing the hosts' clocks.
- ``threads``: one key per thread, ``{"owner": member, "answered": id,
  "mutating": run}``,
  claimed with ``create`` (only one contender can win) and taken over from a
  member that is no longer live with a revision-checked ``update`` (again,
  only one wins). ``answered`` is the id of the newest prompt of the thread
  whose reply was published (moved by the holder only): a daemon that takes
  the thread over runs only the prompts after it. ``mutating`` is the run
  that started a mutating call and has not finished (``{"run", "prompts",
  "calls"}``, written before the call goes out): a daemon that takes the
  thread over must not run those prompts again, it posts the interrupted
  notice instead (the single-daemon rule of :mod:`daemon.runtime.interrupted`).
  Writing it is the fence of a mutating call: a revision-checked update that
  names this daemon as the owner, refused (:class:`ThreadMoved`) once another
  daemon took the thread over, so a daemon whose lease lapsed while its
  snippet ran makes no call after that.
- ``paused``: the run of the thread that waits for approval
  (``{"approval", "run", "prompts", "decided"}``, written after its state
  was put in the approvals object store, :mod:`.approvals`): a daemon that
  takes the thread over loads that request instead of running its prompts
  again. ``decided`` is set (revision-checked, so once across the daemons)
  before the decided run goes on; it is then never resumed elsewhere, and
  its approved calls are written to ``mutating`` as they start, like any run's.

Why one entry per thread and one heartbeat per daemon rather than a lease per
thread renewed by its holder: renewing costs one write per held thread every
few seconds, while a heartbeat costs one write per daemon whatever it holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from daemon.cluster.errors import ClusterError, ThreadMoved

__all__ = [
    "Claim",
    "Leases",
    "MutatingRun",
    "PausedEntry",
    "Write",
    "bucket_name",
    "bucket_names",
    "compare_and_set",
    "thread_key",
]

_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_TRIES = 20  # revision-checked writes of one change, each lost to another write, before giving up

T = TypeVar("T")
S = TypeVar("S")


def bucket_name(kind: str, nick: str) -> str:
    """The ``kind`` bucket of the daemons sharing ``nick`` (a nick that is no
    bucket name goes in hex)."""
    safe = nick if _SAFE.fullmatch(nick) else nick.encode().hex()
    return f"asyncai_{kind}_{safe}"


def bucket_names(nick: str) -> tuple[str, str]:
    """The members and threads buckets of the daemons sharing ``nick``."""
    return bucket_name("members", nick), bucket_name("threads", nick)


def thread_key(channel: str, thread: str) -> str:
    """The KV key of a thread: the channel in hex (``#`` is no key character), then the id."""
    tail = thread if _SAFE.fullmatch(thread) else "x" + thread.encode().hex()
    return f"{channel.encode().hex()}.{tail}"


@dataclass(frozen=True)
class MutatingRun:
    """A run of the thread that started mutating calls and has not finished."""

    run: str
    prompts: tuple[str, ...]
    calls: tuple[tuple[str, dict[str, Any]], ...]  # (tool, arguments), in order

    def as_json(self) -> dict[str, Any]:
        """The entry's ``mutating`` value."""
        return {"run": self.run, "prompts": list(self.prompts), "calls": list(self.calls)}


@dataclass(frozen=True)
class PausedEntry:
    """The thread's run that waits for approval ``approval`` (``decided``: "" while it waits)."""

    approval: str
    run: str
    prompts: tuple[str, ...]
    decided: str = ""

    def as_json(self) -> dict[str, Any]:
        """The entry's ``paused`` value."""
        return {
            "approval": self.approval,
            "run": self.run,
            "prompts": list(self.prompts),
            "decided": self.decided,
        }


@dataclass(frozen=True)
class Claim:
    """A thread's entry: who holds it, the newest prompt answered, the entry's revision,
    the run cut off after a mutating call, if any, and the run waiting for approval."""

    owner: str
    answered: str
    revision: int
    mutating: MutatingRun | None = None
    paused: PausedEntry | None = None


def _decode(value: bytes | None, revision: int) -> Claim:
    try:
        data: Any = json.loads(value or b"{}")
        run = data.get("mutating")
        mutating = (
            MutatingRun(
                str(run["run"]),
                tuple(str(p) for p in run["prompts"]),
                tuple((str(t), dict(a)) for t, a in run["calls"]),
            )
            if run
            else None
        )
        waits = data.get("paused")
        paused = (
            PausedEntry(
                str(waits["approval"]),
                str(waits["run"]),
                tuple(str(p) for p in waits["prompts"]),
                str(waits.get("decided") or ""),
            )
            if waits
            else None
        )
        return Claim(str(data["owner"]), str(data.get("answered", "")), revision, mutating, paused)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ClusterError(f"a thread entry is not valid JSON with an owner: {value!r}") from exc


def _encode(
    owner: str,
    answered: str,
    mutating: MutatingRun | None = None,
    paused: PausedEntry | None = None,
) -> bytes:
    entry: dict[str, Any] = {"owner": owner, "answered": answered}
    if mutating is not None:
        entry["mutating"] = mutating.as_json()
    if paused is not None:
        entry["paused"] = paused.as_json()
    return json.dumps(entry).encode()


def _covered(claim: Claim, through: str) -> tuple[str, MutatingRun | None, PausedEntry | None]:
    """The entry's ``answered``, cut-off run and paused run once the prompts up to
    ``through`` are answered: a run whose prompts it covers has ended (answered,
    or its notice posted), so the entry no longer lists it."""
    mutating = claim.mutating
    if mutating is not None and max(mutating.prompts, default="") <= through:
        mutating = None
    paused = claim.paused
    if paused is not None and max(paused.prompts, default="") <= through:
        paused = None
    return max(through, claim.answered), mutating, paused


@dataclass(frozen=True)
class Write(Generic[T]):
    """What a compare-and-set step writes into the entry, and returns once written."""

    value: bytes
    result: T


async def compare_and_set(
    kv: KeyValue,
    key: str,
    read: Callable[[], Awaitable[tuple[S, int | None]]],
    step: Callable[[S], Write[T] | T],
    *,
    failing: str,
    kept_changing: str,
) -> T:
    """Compare-and-set ``key``: ``read`` gives the entry as it is now and its revision
    (None: no entry), ``step`` either answers at once or returns the :class:`Write` to
    make; the write is revision-checked (a ``create`` when there is no entry), and
    when another write came between, it all goes again from a fresh read.

    ClusterError ``"{failing}: ..."`` when the broker fails, and ``kept_changing``
    after :data:`_TRIES` writes that each lost the race.
    """
    for _ in range(_TRIES):
        current, revision = await read()
        decided = step(current)
        if not isinstance(decided, Write):
            return decided
        try:
            if revision is None:
                await kv.create(key, decided.value)
            else:
                await kv.update(key, decided.value, last=revision)
            return decided.result
        except nats.js.errors.KeyWrongLastSequenceError:
            continue
        except nats.errors.Error as exc:
            raise ClusterError(f"{failing}: {exc}") from exc
    raise ClusterError(kept_changing)


class Leases:
    """This daemon (``member``) among the others, over the two buckets.

    ``member_ttl``: seconds after its last beat that a silent daemon's key is
    gone (its threads may then be taken over).
    """

    def __init__(self, js: JetStreamContext, nick: str, member: str, *, member_ttl: float):
        self._js = js
        self.member = member
        self.member_ttl = member_ttl
        self._names = bucket_names(nick)
        self.presence = b"alive"  # the member key's value (the policy digests, .policies)
        self._members: KeyValue | None = None
        self._threads: KeyValue | None = None

    async def open(self) -> Leases:
        """Create (or bind to) both buckets."""
        members_name, threads_name = self._names
        try:
            self._members = await self._js.create_key_value(
                KeyValueConfig(bucket=members_name, history=1, ttl=self.member_ttl)
            )
        except nats.js.errors.BadRequestError:
            # created by a daemon with another takeover_seconds: its TTL rules
            self._members = await self._js.key_value(members_name)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot open the members bucket: {exc}") from exc
        try:
            self._threads = await self._js.create_key_value(
                KeyValueConfig(bucket=threads_name, history=1)
            )
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot open the threads bucket: {exc}") from exc
        return self

    @property
    def _kv_members(self) -> KeyValue:
        if self._members is None:
            raise ClusterError("the leases are not open")
        return self._members

    @property
    def _kv_threads(self) -> KeyValue:
        if self._threads is None:
            raise ClusterError("the leases are not open")
        return self._threads

    # ---- members ----

    async def beat(self) -> None:
        """Say this daemon is alive (once per ``member_ttl / 4`` or more often)."""
        try:
            await self._kv_members.put(self.member, self.presence)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot write the heartbeat: {exc}") from exc

    async def leave(self) -> None:
        """Remove this daemon's key now: its threads may be taken over at once."""
        try:
            await self._kv_members.delete(self.member)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot remove the member key: {exc}") from exc

    async def live_members(self) -> set[str]:
        """The members whose key has not expired."""
        try:
            return set(await self._kv_members.keys())
        except nats.js.errors.NoKeysError:
            return set()
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot list the members: {exc}") from exc

    async def member_values(self) -> dict[str, bytes | None]:
        """The live members' keys and what each carries (:mod:`.policies`)."""
        values: dict[str, bytes | None] = {}
        for member in await self.live_members():
            try:
                entry = await self._kv_members.get(member)
            except nats.js.errors.KeyNotFoundError:
                continue  # gone since the listing
            except nats.errors.Error as exc:
                raise ClusterError(f"cannot read member {member}: {exc}") from exc
            values[member] = entry.value
        return values

    async def alive(self, member: str) -> bool:
        """Whether ``member``'s key is still there."""
        try:
            await self._kv_members.get(member)
        except nats.js.errors.KeyNotFoundError:
            return False  # KeyDeletedError is a subclass: a member that left
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot read member {member}: {exc}") from exc
        return True

    # ---- threads ----

    async def get(self, channel: str, thread: str) -> Claim | None:
        """The thread's entry, or None when nobody ever claimed it."""
        try:
            entry = await self._kv_threads.get(thread_key(channel, thread))
        except nats.js.errors.KeyNotFoundError:
            return None
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot read the entry of thread {thread}: {exc}") from exc
        return _decode(entry.value, entry.revision or 0)

    async def claim(self, channel: str, thread: str) -> Claim:
        """Claim an unclaimed thread; the entry as it now is (another's if it won the race)."""
        key = thread_key(channel, thread)
        try:
            revision = await self._kv_threads.create(key, _encode(self.member, ""))
        except nats.js.errors.KeyWrongLastSequenceError:
            found = await self.get(channel, thread)
            if found is None:  # pragma: no cover - deleted between the two calls
                raise ClusterError(f"thread {thread} vanished while it was claimed") from None
            return found
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot claim thread {thread}: {exc}") from exc
        return Claim(self.member, "", revision)

    async def take_over(self, channel: str, thread: str, old: Claim, *, replied: str = "") -> Claim:
        """Take ``old`` over (its owner is gone); the entry as it now is (the winner's).

        ``replied``: the newest prompt whose reply the channel's stream holds
        (:func:`daemon.cluster.history.stream_replied`). The old holder may have
        died after its reply's ack and before its marker moved: the entry is
        taken with ``answered`` at least there, in the same write, so no prompt
        with a reply out is run again (nor its run reported as cut off).
        """
        key = thread_key(channel, thread)
        answered, mutating, paused = _covered(old, replied)
        try:
            revision = await self._kv_threads.update(
                key, _encode(self.member, answered, mutating, paused), last=old.revision
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            found = await self.get(channel, thread)
            if found is None:  # pragma: no cover - entries are never deleted
                raise ClusterError(f"thread {thread} vanished while it was taken over") from None
            return found
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot take thread {thread} over: {exc}") from exc
        return Claim(self.member, answered, revision, mutating, paused)

    async def _change(
        self,
        channel: str,
        thread: str,
        step: Callable[[Claim | None], Write[T] | T],
        *,
        failing: str,
        changing: str,
    ) -> T:
        """:func:`compare_and_set` on the thread's entry (None: never claimed)."""

        async def read() -> tuple[Claim | None, int | None]:
            current = await self.get(channel, thread)
            return current, None if current is None else current.revision

        return await compare_and_set(
            self._kv_threads,
            thread_key(channel, thread),
            read,
            step,
            failing=failing,
            kept_changing=f"thread {thread}: its entry kept changing while {changing}",
        )

    async def mark_answered(self, channel: str, thread: str, through: str) -> bool:
        """Record that the prompts of the thread up to ``through`` were answered.

        Revision-checked and retried, never moving ``answered`` back. Only
        the holder moves it: a daemon that lost the thread published nothing
        in it (:mod:`.fence`), so it answered nothing, and its marker would
        clear the ``mutating`` run of the daemon that now answers those
        prompts. Returns whether the marker is at ``through`` now.
        """

        def step(current: Claim | None) -> Write[bool] | bool:
            if current is None:
                return Write(_encode(self.member, through), True)
            answered, mutating, paused = _covered(current, through)
            if (
                current.answered >= through
                and mutating == current.mutating
                and paused == current.paused
            ):
                return True
            if current.owner != self.member:
                return False
            return Write(_encode(current.owner, answered, mutating, paused), True)

        return await self._change(
            channel,
            thread,
            step,
            failing=f"cannot mark thread {thread} answered",
            changing="marked answered",
        )

    async def mark_mutating(
        self,
        channel: str,
        thread: str,
        run: str,
        prompts: list[str],
        call: tuple[str, dict[str, Any]],
    ) -> None:
        """Record that ``run`` (answering ``prompts``) starts the mutating ``call``.

        Written before the call goes out, revision-checked and retried; the
        run's earlier calls stay listed. This is also the fence (issue 26
        §2.6): the write is an update of the revision in which this daemon is
        the owner, so it fails if another daemon took the thread over since.
        :class:`ThreadMoved` when another daemon holds the thread: the call
        must not be made.
        """

        def step(current: Claim | None) -> Write[None] | None:
            if current is not None and current.owner != self.member:
                raise ThreadMoved(thread, current.owner)
            owner, answered = (current.owner, current.answered) if current else (self.member, "")
            before = current.mutating if current else None
            calls = before.calls if before is not None and before.run == run else ()
            paused = current.paused if current else None
            mutating = MutatingRun(run, tuple(prompts), (*calls, call))
            return Write(_encode(owner, answered, mutating, paused), None)

        await self._change(
            channel,
            thread,
            step,
            failing=f"cannot record a mutating call of {thread}",
            changing="a call was recorded",
        )

    async def mark_paused(self, channel: str, thread: str, paused: PausedEntry) -> bool:
        """Point the thread's entry at its run waiting for approval (its state is stored
        first). Revision-checked; False when the thread is not this daemon's."""

        def step(current: Claim | None) -> Write[bool] | bool:
            if current is None or current.owner != self.member:
                return False
            return Write(_encode(current.owner, current.answered, current.mutating, paused), True)

        return await self._change(
            channel,
            thread,
            step,
            failing=f"cannot record the paused run of {thread}",
            changing="a pause was recorded",
        )

    async def decide_paused(
        self,
        channel: str,
        thread: str,
        approval: str,
        outcome: str,
    ) -> str:
        """Record the decision on ``approval`` once across the daemons, before its run
        goes on: "ok" (this call decided it), "moved" (another daemon holds the thread,
        or it was decided already).

        An entry that points at no paused run (its pause could not be shared) is
        decided by its holder alone.
        """

        def step(current: Claim | None) -> Write[str] | str:
            if current is None or current.owner != self.member:
                return "moved"
            paused = current.paused
            if paused is not None and paused.approval == approval and paused.decided:
                return "moved"
            if paused is None or paused.approval != approval:
                return "ok"  # not shared: nobody else can decide it
            decided = PausedEntry(paused.approval, paused.run, paused.prompts, outcome)
            return Write(_encode(current.owner, current.answered, current.mutating, decided), "ok")

        return await self._change(
            channel,
            thread,
            step,
            failing=f"cannot record the decision on {approval}",
            changing=f"{approval} was decided",
        )
