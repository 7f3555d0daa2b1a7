"""An in-memory ``ScopeStore``: thread REPL dumps in a dict by ``ThreadKey``.

For tests of stored REPLs (issue 14) without SQLite::

    store = MemoryScopeStore()
    executor = CodeModeToolExecutor(inner, scopes=store)

``dumps`` is what is stored (tests may plant bytes there); ``reject`` makes
``load`` raise :class:`~daemon.errors.ScopeRejected` with the given reason
for a thread; ``fail_saves`` makes ``save`` raise. ``saves`` and ``drops``
record the calls, in order.
"""

from __future__ import annotations

from daemon.code_mode.repl import StoredScopeDump
from daemon.errors import ScopeRejected
from daemon.tools import ThreadKey

__all__ = ["SAVED_AT", "MemoryScopeStore"]

SAVED_AT = "2026-11-30T14:05:12+00:00"
"""The time every save is stamped with (a fixed clock)."""


class MemoryScopeStore:
    """Stores dumps in memory; rejects and fails on demand."""

    def __init__(self) -> None:
        self.dumps: dict[ThreadKey, StoredScopeDump] = {}
        self.reject: dict[ThreadKey, str] = {}
        self.fail_saves = False
        self.saves: list[tuple[ThreadKey, int]] = []  # (thread, bytes)
        self.drops: list[ThreadKey] = []
        self.loads: list[ThreadKey] = []  # threads, one per load asked for

    async def save(self, thread: ThreadKey, data: bytes) -> None:
        """Keep ``data``, stamped :data:`SAVED_AT`; raises OSError when ``fail_saves``."""
        if self.fail_saves:
            raise OSError("disk full")
        self.saves.append((thread, len(data)))
        self.dumps[thread] = StoredScopeDump(bytes(data), SAVED_AT)

    async def load(self, thread: ThreadKey) -> StoredScopeDump | None:
        """The stored dump, None, or ScopeRejected for a thread in ``reject``."""
        self.loads.append(thread)
        if thread in self.reject:
            raise ScopeRejected(self.reject[thread])
        return self.dumps.get(thread)

    async def drop(self, thread: ThreadKey) -> None:
        """Forget the thread's dump."""
        self.drops.append(thread)
        self.dumps.pop(thread, None)
