"""``Store``: the SQLite store of threads, prompts, runs, records, the audit, cursors and scopes.

The class is assembled from these concepts, each in its own module:

- ``connection``: the writer and reader connections, their lifecycle,
  transactions, durability, and mapping the driver's errors to ``StoreError``;
- ``writer``: every change (prompts, runs, tool calls, recovery, cursors);
- ``queries``: every read (pending prompts, history, threads, the audit,
  transcripts);
- ``approvals``: approval requests, a paused run stored whole, and their
  decisions;
- ``scopes``: each thread's dumped REPL scope (and those signed before the MAC
  covered the channel, until the daemon re-signs or drops them);
- ``replica``: a finished run's rows exported, and applied to another store;
- ``shapes``: the return shapes code mode learned, per server and tool;
- ``outbox``: replies committed with their run's end, until the hub acked them.

Callers import from here (or from ``sessions``); the names above are the
whole public API of the store.
"""

from __future__ import annotations

from .approvals import StoreApprovals
from .connection import DEFAULT_BUSY_TIMEOUT, DEFAULT_DB_PATH
from .outbox import StoreOutbox
from .queries import StoreQueries, audit_query
from .replica import StoreReplica
from .scopes import StoreScopes
from .shapes import StoreShapes
from .writer import PROMPT_STATUSES, RUN_STATUSES, StoreWriter

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_DB_PATH",
    "PROMPT_STATUSES",
    "RUN_STATUSES",
    "Store",
    "audit_query",
]


class Store(
    StoreWriter,
    StoreQueries,
    StoreApprovals,
    StoreScopes,
    StoreReplica,
    StoreShapes,
    StoreOutbox,
):
    """Transcripts, runs, prompts, the audit, cursors and REPL scopes in one SQLite file.

    Use as ``async with Store(path) as store:`` or ``await store.open()`` …
    ``await store.aclose()``. ``open()`` creates the file and its directory
    (unless ``create=False``) and applies pending migrations.

    ``cwd`` and ``version`` go into every record's Claude Code envelope
    (default: the process's working directory and asyncai's version).

    One ``Store`` per database file and process: writes are serialized on
    one writer connection, reads run beside them on a reader (see
    ``sessions.connection``).
    """
