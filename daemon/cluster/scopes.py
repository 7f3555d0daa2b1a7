"""Thread REPL dumps in a JetStream object store, so whichever daemon holds a thread can load it.

:class:`ObjectScopeStore` is the cluster's :class:`daemon.code_mode.repl.ScopeStore`:
the same HMAC-SHA256 as :class:`daemon.runtime.scopes.SignedScopeStore` (over
the Monty version, the thread's channel and id, and the bytes, :func:`scope_mac`) under the
same ``scope.key``. Every daemon of a cluster must have the same key: the
operator installs one ``scope.key`` (32 bytes, mode 0600, refused when others
can read it) in each daemon's state directory. A daemon with another key
refuses a moved dump as altered, and its variables note says so.

The stored REPL reflects exactly the runs the thread's entry counts as
answered (issue 26 §2.2). A dump is saved at the end of a run, before the
run's reply and its ``answered`` marker (:mod:`.leases`); a crash in between
would leave a dump of a run that the daemon taking over runs again. So each
dump carries ``through``, the newest prompt it reflects (the running run's
newest prompt; for an idle scope the marker), and each thread has two slots,
``<name>@0`` and ``<name>@1``: a save overwrites the slot of the same
``through``, else the one that does not hold the newest dump the marker
covers. A load takes the newest dump whose ``through`` the marker covers,
so a dump of a run cut off before its end committed is passed over for the
one before it. The slots' ``through`` is in their object's description
(chosen without downloading) and in the signed header line, and the MAC
covers it (a replayed older dump cannot pass for a newer one).

A run cut off after a mutating call is not run again: the daemon taking the
thread over posts the interrupted notice, and its prompts then count as
answered; before that, :meth:`ObjectScopeStore.forget_from` deletes the
dumps of that run, so the REPL goes on from the one before it.

A daemon that does not hold the thread (its lease lapsed, another took the
thread over) saves nothing: :class:`.ThreadMoved` (issue 26 §2.6).

An object is one JSON header line (``{"v": monty version, "mac": hex,
"saved": iso, "through": id}``) and the dump's bytes after it. Its name
starts with its thread's channel and thread id (:func:`scope_object`, the
sessions store's thread key): a thread id is unique only within its channel
(issue 26). An object under that name without a slot (saved before the
slots) is still loaded when a thread has no slot yet. The bucket's ``ttl``
is ``sessions.scope_retention_days``: the broker prunes old dumps itself. A
dump stored under the bare thread id (before issue 26, its MAC without the
channel) cannot be proven to be one channel's: :meth:`open` deletes each
one, with one ``cluster.scope_dropped`` log line.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import ObjectMeta, ObjectStoreConfig
from nats.js.object_store import ObjectStore

from daemon.cluster.errors import ClusterError, ThreadMoved
from daemon.cluster.leases import Leases, bucket_name
from daemon.code_mode.repl import StoredScopeDump
from daemon.errors import ScopeRejected
from daemon.runtime.scopes import monty_version, scope_mac
from daemon.tools import ThreadKey
from sessions.ids import now_iso, thread_key

__all__ = ["ObjectScopeStore", "open_object_store", "scope_bucket", "scope_object", "slot_object"]

log = structlog.get_logger("asyncai.cluster")


_EVERYTHING = "\U0010ffff"  # a marker past every prompt id: every dump counts

# thread → the newest prompt of its run going on in this daemon, None when idle
RunningThrough = Callable[[ThreadKey], str | None]


@dataclass(frozen=True)
class _Slot:
    name: str
    through: str
    saved: str


def _newest(slots: list[_Slot]) -> _Slot | None:
    return max(slots, key=lambda slot: (slot.through, slot.saved), default=None)


def _bound(through: str, data: bytes) -> bytes:
    """What a slot's MAC covers: the newest prompt it reflects, then the dump."""
    return through.encode() + b"\n" + data


def scope_bucket(nick: str) -> str:
    """The object store bucket of the daemons sharing ``nick``."""
    return bucket_name("scopes", nick)


def scope_object(thread: ThreadKey) -> str:
    """The object name of ``thread``'s dump: ``channel/thread id`` (the id quoted)."""
    return thread_key(thread.channel, thread.thread_id)


def slot_object(thread: ThreadKey, slot: int) -> str:
    """The object name of one of ``thread``'s two slots (0 or 1)."""
    return f"{scope_object(thread)}@{slot}"


async def open_object_store(
    js: JetStreamContext, name: str, retention_seconds: float, what: str
) -> ObjectStore:
    """Create (or bind to) the object store ``name``; a bucket made by a daemon
    with another retention keeps its own. ``what`` names it in the error."""
    try:
        return await js.create_object_store(name, ObjectStoreConfig(ttl=retention_seconds or None))
    except nats.js.errors.BadRequestError:
        return await js.object_store(name)  # another ttl rules
    except nats.errors.Error as exc:
        raise ClusterError(f"cannot open the {what} bucket: {exc}") from exc


class ObjectScopeStore:
    """:class:`daemon.code_mode.repl.ScopeStore` over a JetStream object store, with MACs."""

    def __init__(
        self,
        js: JetStreamContext,
        nick: str,
        key: bytes,
        *,
        max_bytes: int,
        retention_seconds: float = 0.0,
        version: str | None = None,
    ):
        self._js = js
        self._bucket_name = scope_bucket(nick)
        self._key = key
        self._max_bytes = max_bytes
        self._retention = retention_seconds
        self._version = version or monty_version()
        self._bucket: ObjectStore | None = None
        self._leases: Leases | None = None
        self._running: RunningThrough | None = None

    async def open(self) -> ObjectScopeStore:
        """Create (or bind to) the bucket, and drop the dumps named the old way."""
        self._bucket = await open_object_store(
            self._js, self._bucket_name, self._retention, "scope"
        )
        await self._drop_unbound()
        return self

    async def _drop_unbound(self) -> None:
        """Delete each dump stored under a bare thread id (before issue 26: signed without
        its channel, which no store can prove), with one ``cluster.scope_dropped`` line."""
        try:
            infos = await self._store.list(ignore_deletes=True)
        except nats.js.errors.NotFoundError:
            return  # an empty bucket
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot list the scope bucket: {exc}") from exc
        for info in infos:
            if "/" in info.name:
                continue  # channel/thread id: this daemon's own naming
            try:
                await self._store.delete(info.name)
            except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
                continue  # another daemon dropped it first
            except nats.errors.Error as exc:
                raise ClusterError(f"cannot drop the REPL {info.name}: {exc}") from exc
            log.warning(
                "cluster.scope_dropped",
                thread=info.name,
                reason="stored under the thread id alone, signed without its channel",
            )

    @property
    def _store(self) -> ObjectStore:
        if self._bucket is None:
            raise ClusterError("the scope store is not open")
        return self._bucket

    def bind(self, leases: Leases, running: RunningThrough) -> None:
        """Check saves and loads against the threads' entries (``leases``); ``running``:
        the newest prompt of the thread's run going on here, if any (what a dump reflects)."""
        self._leases = leases
        self._running = running

    async def _marker(self, thread: ThreadKey) -> str:
        """The newest prompt the thread's entry counts as answered; ThreadMoved when another
        daemon holds the thread. Unbound (one daemon, tests): every dump counts."""
        if self._leases is None:
            return _EVERYTHING
        entry = await self._leases.get(thread.channel, thread.thread_id)
        if entry is None:
            return ""
        if entry.owner != self._leases.member:
            raise ThreadMoved(thread.thread_id, entry.owner)
        return entry.answered

    async def _slots(self, thread: ThreadKey) -> list[_Slot]:
        """The thread's stored slots (none, one or two)."""
        found: list[_Slot] = []
        for n in range(2):
            name = slot_object(thread, n)
            try:
                info = await self._store.get_info(name)
            except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
                continue
            except nats.errors.Error as exc:
                raise ClusterError(f"cannot read the REPL slots of {thread}: {exc}") from exc
            try:
                meta: Any = json.loads(info.description or "")
                found.append(_Slot(name, str(meta["through"]), str(meta["saved"])))
            except (ValueError, TypeError, KeyError):
                found.append(_Slot(name, _EVERYTHING, ""))  # not ours: never chosen to load
        return found

    async def save(self, thread: ThreadKey, data: bytes) -> None:
        """Store the thread's dump with its MAC and the newest prompt it reflects, in the
        slot that does not hold the dump a load would take now (see the module docstring)."""
        marker = await self._marker(thread)
        through = (self._running(thread) if self._running is not None else None) or marker
        if through == _EVERYTHING:
            through = ""
        slots = await self._slots(thread)
        same = [slot for slot in slots if slot.through == through]
        kept = _newest([slot for slot in slots if slot.through <= marker])
        free = [slot_object(thread, n) for n in range(2)]
        name = same[0].name if same else next(n for n in free if kept is None or n != kept.name)
        saved = now_iso()
        header = {
            "v": self._version,
            "mac": scope_mac(self._key, self._version, thread, _bound(through, data)),
            "saved": saved,
            "through": through,
        }
        meta = ObjectMeta(name=name, description=json.dumps({"through": through, "saved": saved}))
        try:
            await self._store.put(name, json.dumps(header).encode() + b"\n" + data, meta=meta)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot save the REPL of thread {thread}: {exc}") from exc

    async def load(self, thread: ThreadKey) -> StoredScopeDump | None:
        """The thread's newest dump that its ``answered`` marker covers, if it is intact and
        loadable; None when none; else ScopeRejected."""
        marker = await self._marker(thread)
        slots = await self._slots(thread)
        chosen = _newest([slot for slot in slots if slot.through <= marker])
        if chosen is None and slots:
            return None  # only a dump of a run that did not end: the REPL before it was empty
        name = scope_object(thread) if chosen is None else chosen.name
        try:
            result = await self._store.get(name)
        except nats.js.errors.ObjectNotFoundError:
            return None
        except nats.js.errors.ObjectDeletedError:
            return None
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot load the REPL of thread {thread}: {exc}") from exc
        raw = bytes(result.data or b"")
        head, sep, data = raw.partition(b"\n")
        try:
            header: Any = json.loads(head) if sep else None
            version, mac, saved = str(header["v"]), str(header["mac"]), str(header["saved"])
            through = None if chosen is None else str(header["through"])
        except (ValueError, TypeError, KeyError):
            raise ScopeRejected("its header is not the one this daemon writes") from None
        if len(data) > self._max_bytes:
            raise ScopeRejected(
                f"it is {len(data):,} bytes, over code_mode.max_scope_dump "
                f"({self._max_bytes:,} bytes)"
            )
        signed = data if through is None else _bound(through, data)
        if not hmac.compare_digest(scope_mac(self._key, version, thread, signed), mac):
            raise ScopeRejected(
                "its MAC does not match: the stored bytes were changed, "
                "or the daemon that saved it has another scope.key"
            )
        if through is not None and through > marker:
            raise ScopeRejected("it reflects a run that did not end (its description was changed)")
        if version != self._version:
            raise ScopeRejected(
                f"it was saved by pydantic-monty {version}, this daemon runs {self._version}"
            )
        return StoredScopeDump(data, saved)

    async def forget_from(self, thread: ThreadKey, first: str) -> None:
        """Delete the thread's dumps that reflect prompt ``first`` or a later one: a run
        cut off after a mutating call is not run again, only noticed (and its prompts
        then count as answered), so the REPL goes on from the dump before it.
        :class:`.ThreadMoved` when another daemon holds the thread (its dumps are its own)."""
        await self._marker(thread)
        for slot in await self._slots(thread):
            if slot.through < first:
                continue
            try:
                await self._store.delete(slot.name)
            except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
                continue
            except nats.errors.Error as exc:
                raise ClusterError(f"cannot drop the REPL of thread {thread}: {exc}") from exc

    async def drop(self, thread: ThreadKey) -> None:
        """Forget the thread's dumps, both slots (none stored: nothing to do)."""
        base = scope_object(thread)
        for name in (base, slot_object(thread, 0), slot_object(thread, 1)):
            try:
                await self._store.delete(name)
            except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
                continue
            except nats.errors.Error as exc:
                raise ClusterError(f"cannot drop the REPL of thread {thread}: {exc}") from exc
