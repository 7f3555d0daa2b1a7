"""``Store``: one SQLite file, one connection, and the narrow ports that share it.

A caller takes the port it needs, never the whole store:

- ``runs`` (``writer.RunWriter``): the prompt and run writer: record and
  claim prompts, start and finish runs, recover after a restart;
- ``cursors`` (``cursors.Cursors``): each channel's last message handled;
- ``outbox`` (``outbox.Outbox``): replies committed with their run's end,
  until the hub acked them;
- ``audit`` (``audit.AuditLog``): each nested call's row as it starts and
  ends, and the audit read back;
- ``approvals`` (``approvals.Approvals``): approval requests, a paused run
  stored whole, and their decisions;
- ``rules`` (``rules.ApprovalRules``): the rules ``!approve ID always`` left
  (a tool that no longer asks in a channel);
- ``scopes`` (``scopes.Scopes``): each thread's dumped REPL scope;
- ``shapes`` (``shapes.Shapes``): the return shapes code mode learned;
- ``replica`` (``replica.Replica``): a finished run's rows exported, and
  applied to another store;
- ``queries`` (``queries.Queries``): what the daemon and people read back
  (pending prompts, history, threads, transcripts);
- ``views`` (``views.ThreadViews``): the console's threads with their status,
  and one thread's runs unfolded (issue 30).

Each port holds the one ``connection.Connection`` of its store: its writes
are serialized on the one writer, its reads run on the one reader.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .approvals import Approvals
from .audit import AuditLog
from .connection import DEFAULT_BUSY_TIMEOUT, Connection
from .cursors import Cursors
from .outbox import Outbox
from .queries import Queries
from .replica import Replica
from .rules import ApprovalRules
from .schema import MIGRATIONS, Migration
from .scopes import Scopes
from .shapes import Shapes
from .views import ThreadViews
from .writer import RunWriter

__all__ = [
    "Store",
]


class Store:
    """Transcripts, runs, prompts, the audit, cursors and REPL scopes in one SQLite file.

    Use as ``async with Store(path) as store:`` or ``await store.open()`` …
    ``await store.aclose()``, and hand each caller its port
    (``store.runs``, ``store.audit``, ``store.approvals`` …; the module
    docstring lists them). ``open()`` creates the file and its directory
    and applies pending migrations; with ``create=False`` (the CLI's readers)
    the file must exist and already be an asyncai database.

    ``cwd`` and ``version`` go into every record's Claude Code envelope
    (default: the process's working directory and asyncai's version).

    One ``Store`` per database file and process: writes are serialized on
    one writer connection, reads run beside them on a reader (see
    ``sessions.connection``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        cwd: str | None = None,
        version: str | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        db = Connection(
            path,
            create=create,
            busy_timeout=busy_timeout,
            cwd=cwd,
            version=version,
            migrations=migrations,
        )
        self.connection = db
        self.runs = RunWriter(db)
        self.cursors = Cursors(db)
        self.outbox = Outbox(db)
        self.audit = AuditLog(db)
        self.approvals = Approvals(db)
        self.rules = ApprovalRules(db)
        self.scopes = Scopes(db)
        self.shapes = Shapes(db)
        self.replica = Replica(db)
        self.queries = Queries(db, self.audit)
        self.views = ThreadViews(db)  # the console's reads (issue 30)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.connection.path

    async def open(self) -> Self:
        """Connect, set the pragmas and migrate (``Connection.open``). Idempotent."""
        await self.connection.open()
        return self

    async def aclose(self) -> None:
        """Wait for the write in progress, then close the connection. Idempotent."""
        await self.connection.aclose()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
