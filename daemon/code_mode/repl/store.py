"""Where code mode keeps each thread's REPL dump: the :class:`ScopeStore` port and its value.

Code mode dumps a thread's REPL into a :class:`ScopeStore` (bytes per
:class:`~daemon.tools.ThreadKey`, with the time they were saved) and loads it
back into a fresh worker after an eviction or a restart (issue 14). The
daemon serves it over the sessions store (``daemon.runtime.scopes``), a
cluster over its object store (``daemon.cluster.scopes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from daemon.tools import ThreadKey

__all__ = ["ScopeStore", "StoredScopeDump"]


@dataclass(frozen=True)
class StoredScopeDump:
    """A thread's REPL as stored: Monty's session dump and when it was saved."""

    data: bytes
    saved_at: str  # ISO 8601, UTC


class ScopeStore(Protocol):
    """Where code mode keeps each thread's REPL dump across evictions and restarts.

    The implementation authenticates what it hands back (Monty does not:
    a dump must come from a trusted source) and checks it was written by
    the same Monty dump version.
    """

    async def save(self, thread: ThreadKey, data: bytes) -> None:
        """Store ``data`` as the thread's REPL, replacing any earlier one; raises on failure."""
        ...

    async def load(self, thread: ThreadKey) -> StoredScopeDump | None:
        """The thread's stored REPL, or None when nothing is stored.

        Raises :class:`~daemon.errors.ScopeRejected` (with the reason in one line) for a
        dump that must not be loaded: a bad MAC, another Monty version, over
        the size limit.
        """
        ...

    async def drop(self, thread: ThreadKey) -> None:
        """Forget the thread's stored REPL (nothing stored: nothing to do)."""
        ...
