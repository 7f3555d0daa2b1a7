"""Thread REPL dumps kept in SQLite, authenticated: :class:`SignedScopeStore`.

Monty does not authenticate what it loads (a dump must come from a trusted
source), so every dump is stored with an HMAC-SHA256 under a key the daemon
makes on its first start (``scope.key``, 32 random bytes, mode 0600, in the
state directory beside the database) and checked before it is handed back.
The MAC covers the Monty version, the thread's channel and id and the
bytes, so a dump can neither be altered nor moved to another thread, nor to
a thread of the same id in another channel (issue 26). A dump made by another
pydantic-monty version, or larger than ``code_mode.max_scope_dump``, is
refused too; each refusal is :class:`~daemon.errors.ScopeRejected` with the
reason in one line, which the variables note shows.

Dumps signed before the MAC covered the channel (issue 26; the sessions
migration 6 set them apart) are dealt with once, at the daemon's start
(:meth:`SignedScopeStore.open`), by :func:`bind_unbound_scopes`: a dump is
re-signed when the sessions tables prove its channel (its thread id names a
thread of exactly one channel, so no other channel's run can have touched
that REPL) and its old MAC verifies; any other is dropped, with one
``daemon.scope_dropped`` log line each.

While a thread's run has not ended, its dumps are held back
(:meth:`SignedScopeStore.open_run`) and committed with the run's end and its
reply (:meth:`daemon.runtime.store.SessionsRuntimeStore.finish_run`), so after
any crash the stored REPL reflects each run that ended exactly once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from importlib import metadata
from pathlib import Path

import structlog

from daemon.code_mode.repl import StoredScopeDump
from daemon.errors import ConfigError, ScopeRejected
from daemon.tools import ThreadKey
from sessions.ids import now_iso
from sessions.outbox import ScopeWrite
from sessions.scopes import Scopes

log = structlog.get_logger("asyncai.daemon")

_UNANSWERED = ""  # a thread whose last run ended without a reply: its REPL is not stored

__all__ = [
    "KEY_FILE",
    "SignedScopeStore",
    "bind_unbound_scopes",
    "keyed_mac",
    "load_or_create_key",
    "monty_version",
    "scope_mac",
]


KEY_FILE = "scope.key"
KEY_BYTES = 32


def monty_version() -> str:
    """The installed pydantic-monty's version: a dump loads only into the same one."""
    return metadata.version("pydantic-monty")


def scope_mac(key: bytes, version: str, thread: ThreadKey, data: bytes) -> str:
    """HMAC-SHA256 over the version, the thread's channel and id, and the dump, hex."""
    return keyed_mac(key, version.encode(), _text(thread.channel), _text(thread.thread_id), data)


def _unbound_mac(key: bytes, version: str, thread_id: str, data: bytes) -> str:
    """The MAC dumps had before issue 26: over the version, the thread id and the dump."""
    return keyed_mac(key, version.encode(), _text(thread_id), data)


async def bind_unbound_scopes(store: Scopes, key: bytes) -> tuple[int, int]:
    """Re-sign (MAC over the channel too) or drop each dump signed the old way;
    ``(re-signed, dropped)``. Run at start, before any run loads a dump."""
    bound = dropped = 0
    for unbound in await store.unbound_scopes():
        channel, thread_id = unbound.channel, unbound.thread_id
        stored = await store.load_unbound_scope(channel, thread_id)
        if stored is None:
            continue
        if unbound.channels != 1:
            reason = f"its thread id names threads of {unbound.channels} channels"
        elif not hmac.compare_digest(
            _unbound_mac(key, stored.monty_version, thread_id, stored.data), stored.mac
        ):
            reason = "its MAC does not match"
        else:
            mac = scope_mac(key, stored.monty_version, ThreadKey(channel, thread_id), stored.data)
            if await store.bind_scope(channel, thread_id, mac):
                bound += 1
                continue
            reason = "a newer dump was saved since"
        await store.drop_unbound_scope(channel, thread_id)
        dropped += 1
        log.warning("daemon.scope_dropped", channel=channel, thread=thread_id, reason=reason)
    if bound or dropped:
        log.info("daemon.scopes_bound", resigned=bound, dropped=dropped)
    return bound, dropped


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def keyed_mac(key: bytes, *parts: bytes) -> str:
    """HMAC-SHA256 over ``parts``, each prefixed with its length, hex."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))  # length-prefixed: no ambiguous joins
        mac.update(part)
    return mac.hexdigest()


def load_or_create_key(state_dir: Path) -> bytes:
    """The daemon's dump key: read ``state_dir/scope.key``, or create it (0600) once.

    A key file readable by others, or of the wrong size, is a ConfigError:
    a key others can read lets them forge dumps that the daemon would load.
    """
    path = state_dir / KEY_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot create the scope key {path}: {exc.strerror or exc}") from exc
    else:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(KEY_BYTES))
    try:
        mode = path.stat().st_mode
        key = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the scope key {path}: {exc.strerror or exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the scope key {path} is readable by others (mode {stat.S_IMODE(mode):o}): "
            "chmod 600 it"
        )
    if len(key) != KEY_BYTES:
        raise ConfigError(f"the scope key {path} is not {KEY_BYTES} bytes: delete it to renew it")
    return key


class SignedScopeStore:
    """:class:`daemon.code_mode.repl.ScopeStore` over the sessions ``scopes`` port, with MACs.

    Keyed by :class:`~daemon.tools.ThreadKey`: the scopes table keys a dump by
    its thread's (channel, thread id), and the MAC covers both.
    """

    def __init__(self, store: Scopes, key: bytes, *, max_bytes: int, version: str | None = None):
        self._store = store
        self._key = key
        self._max_bytes = max_bytes
        self._version = version or monty_version()
        self._runs: dict[ThreadKey, str] = {}  # threads whose run's end is not committed yet
        self._held: dict[str, ScopeWrite] = {}  # by run id: the dump to commit with its end

    def open_run(self, thread: ThreadKey, run_id: str) -> None:
        """Hold back the thread's saves until ``run_id``'s end is committed (issue 26).

        Meanwhile the REPL reflects a run that has not ended: a dump stored
        now and followed by a crash would make the run, run again, count
        twice. :meth:`held` hands the last such dump to the run's end, which
        commits it in the same transaction; :meth:`release` ends the hold.
        """
        self._runs[thread] = run_id

    def held(self, run_id: str) -> ScopeWrite | None:
        """The dump (or drop) held back for ``run_id``, for its end's transaction."""
        return self._held.get(run_id)

    def release(self, run_id: str, *, answered: bool = True) -> None:
        """The run's end was committed (or failed): saves go straight to the store again.

        Not ``answered`` (interrupted, stopped): its REPL reflects a run that did
        not end with a reply, maybe to be run again, so until the thread's next
        run its saves are dropped (a shutdown's, an eviction's); a drop goes on.
        """
        self._held.pop(run_id, None)
        for thread in [t for t, run in self._runs.items() if run == run_id]:
            if answered:
                del self._runs[thread]
            else:
                self._runs[thread] = _UNANSWERED

    @classmethod
    async def open(
        cls, store: Scopes, key: bytes, *, max_bytes: int, version: str | None = None
    ) -> SignedScopeStore:
        """The store, once the dumps signed without their channel are re-signed or
        dropped (:func:`bind_unbound_scopes`): what the daemon uses at its start."""
        await bind_unbound_scopes(store, key)
        return cls(store, key, max_bytes=max_bytes, version=version)

    async def save(self, thread: ThreadKey, data: bytes) -> None:
        """Store the thread's dump with its MAC (the thread must have been recorded);
        held back while the thread's run has not ended (:meth:`open_run`)."""
        mac = scope_mac(self._key, self._version, thread, data)
        if (run := self._runs.get(thread)) == _UNANSWERED:
            log.info("daemon.scope_not_saved", thread=str(thread), reason="its run did not end")
            return
        if run is not None:
            self._held[run] = ScopeWrite(*thread, self._version, data, mac)
            return
        await self._store.save_scope(
            thread.channel, thread.thread_id, monty_version=self._version, data=data, mac=mac
        )

    async def load(self, thread: ThreadKey) -> StoredScopeDump | None:
        """The thread's dump if it is ours, intact and loadable; else ScopeRejected."""
        run = self._runs.get(thread)
        if run is not None and (kept := self._held.get(run)) is not None:
            return None if kept.data is None else StoredScopeDump(kept.data, now_iso())
        stored = await self._store.load_scope(thread.channel, thread.thread_id)
        if stored is None:
            return None
        if stored.size > self._max_bytes:
            raise ScopeRejected(
                f"it is {stored.size:,} bytes, over code_mode.max_scope_dump "
                f"({self._max_bytes:,} bytes)"
            )
        expected = scope_mac(self._key, stored.monty_version, thread, stored.data)
        if not hmac.compare_digest(expected, stored.mac):
            raise ScopeRejected("its MAC does not match: the stored bytes were changed")
        if stored.monty_version != self._version:
            raise ScopeRejected(
                f"it was saved by pydantic-monty {stored.monty_version}, "
                f"this daemon runs {self._version}"
            )
        return StoredScopeDump(stored.data, stored.dumped)

    async def drop(self, thread: ThreadKey) -> None:
        """Forget the thread's dump (with its run's end, while one is open)."""
        if (run := self._runs.get(thread)) not in (None, _UNANSWERED):
            self._held[run] = ScopeWrite(*thread, self._version, None, "")
            return
        await self._store.drop_scope(thread.channel, thread.thread_id)
