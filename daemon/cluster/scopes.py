"""Thread REPL dumps in a JetStream object store, so whichever daemon holds a thread can load it.

:class:`ObjectScopeStore` is the cluster's :class:`daemon.tools.ScopeStore`:
the same HMAC-SHA256 as :class:`daemon.runtime.scopes.SignedScopeStore` (over
the Monty version, the thread's channel and id, and the bytes, :func:`scope_mac`) under the
same ``scope.key``. Every daemon of a cluster must have the same key: the
operator installs one ``scope.key`` (32 bytes, mode 0600, refused when others
can read it) in each daemon's state directory. A daemon with another key
refuses a moved dump as altered, and its variables note says so.

An object is one JSON header line (``{"v": monty version, "mac": hex,
"saved": iso}``) and the dump's bytes after it. An object is named by its
thread's channel and thread id (:func:`scope_object`, the sessions store's
thread key): a thread id is unique only within its channel (issue 26). The
bucket's ``ttl`` is ``sessions.scope_retention_days``: the broker prunes old
dumps itself. A dump stored under the bare thread id (before issue 26, its
MAC without the channel) cannot be proven to be one channel's: :meth:`open`
deletes each one, with one ``cluster.scope_dropped`` log line.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig
from nats.js.object_store import ObjectStore

from daemon.cluster.errors import ClusterError
from daemon.cluster.leases import bucket_name
from daemon.errors import ScopeRejected
from daemon.runtime.scopes import monty_version, scope_mac
from daemon.tools import StoredScopeDump, ThreadKey
from sessions.ids import now_iso, thread_key

__all__ = ["ObjectScopeStore", "open_object_store", "scope_bucket", "scope_object"]

log = structlog.get_logger("asyncai.cluster")


def scope_bucket(nick: str) -> str:
    """The object store bucket of the daemons sharing ``nick``."""
    return bucket_name("scopes", nick)


def scope_object(thread: ThreadKey) -> str:
    """The object name of ``thread``'s dump: ``channel/thread id`` (the id quoted)."""
    return thread_key(thread.channel, thread.thread_id)


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
    """:class:`daemon.tools.ScopeStore` over a JetStream object store, with MACs."""

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

    async def save(self, thread: ThreadKey, data: bytes) -> None:
        """Store the thread's dump with its MAC, replacing the one before."""
        header = {
            "v": self._version,
            "mac": scope_mac(self._key, self._version, thread, data),
            "saved": now_iso(),
        }
        try:
            await self._store.put(scope_object(thread), json.dumps(header).encode() + b"\n" + data)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot save the REPL of thread {thread}: {exc}") from exc

    async def load(self, thread: ThreadKey) -> StoredScopeDump | None:
        """The thread's dump if it is intact and loadable; None when none; else ScopeRejected."""
        try:
            result = await self._store.get(scope_object(thread))
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
        except (ValueError, TypeError, KeyError):
            raise ScopeRejected("its header is not the one this daemon writes") from None
        if len(data) > self._max_bytes:
            raise ScopeRejected(
                f"it is {len(data):,} bytes, over code_mode.max_scope_dump "
                f"({self._max_bytes:,} bytes)"
            )
        if not hmac.compare_digest(scope_mac(self._key, version, thread, data), mac):
            raise ScopeRejected(
                "its MAC does not match: the stored bytes were changed, "
                "or the daemon that saved it has another scope.key"
            )
        if version != self._version:
            raise ScopeRejected(
                f"it was saved by pydantic-monty {version}, this daemon runs {self._version}"
            )
        return StoredScopeDump(data, saved)

    async def drop(self, thread: ThreadKey) -> None:
        """Forget the thread's dump (none stored: nothing to do)."""
        try:
            await self._store.delete(scope_object(thread))
        except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
            return
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot drop the REPL of thread {thread}: {exc}") from exc
