"""A finished run's rows as one document, and that document applied to another store.

Several daemons each keep their own database; each publishes every finished
run's rows (:meth:`Replica.run_rows`) and a collector applies them to one
database of the same schema (:meth:`Replica.apply_run_rows`), so the
audit queries see every daemon's runs.

The document is ``{"v": 1, "run": id, "tables": {table: {"columns": [...],
"rows": [[...], ...]}}}`` for the run's thread, the run, its prompts, its
transcript records and its tool calls, with the columns the sending store
has. Applying is idempotent (a run applied twice is stored once) and
tolerant of order: local row numbers (``records.seq``, ``tool_calls.id``)
are not copied, a record whose parent was not collected (yet) keeps no
parent, and a column the collecting store lacks is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from .connection import Connection
from .errors import StoreError

__all__ = ["REPLICA_VERSION", "MalformedRunDocument", "Replica"]

REPLICA_VERSION = 1

# table → (the SQL of the run's rows, the column a conflict is judged on; None: replace the run's)


class MalformedRunDocument(StoreError):
    """What was to be applied is no run document (or one of another version)."""


_TABLES: dict[str, tuple[str, str | None]] = {
    "threads": ("SELECT * FROM threads WHERE id = (SELECT thread FROM runs WHERE id = ?)", "id"),
    "runs": ("SELECT * FROM runs WHERE id = ?", "id"),
    "prompts": ("SELECT * FROM prompts WHERE run_id = ? ORDER BY ts, id", "id"),
    "records": ("SELECT * FROM records WHERE run_id = ? ORDER BY seq", "uuid"),
    "tool_calls": ("SELECT * FROM tool_calls WHERE run_id = ? ORDER BY id", None),
}
_LOCAL_ROW_NUMBERS = {"records": "seq", "tool_calls": "id"}


class Replica:
    """Runs exported from one store and applied to another (the audit collector's)."""

    def __init__(self, db: Connection):
        self._db = db

    async def finished_runs_after(
        self, finished: str, run_id: str, limit: int = 100
    ) -> list[tuple[str, str]]:
        """``(finished, id)`` of the runs finished after ``(finished, run_id)``, oldest first."""
        rows = await self._db.read(
            "list finished runs",
            "SELECT finished, id FROM runs WHERE finished IS NOT NULL AND status != 'running'"
            " AND (finished, id) > (?, ?) ORDER BY finished, id LIMIT ?",
            (finished, run_id, limit),
        )
        return [(str(f), str(i)) for f, i in rows]

    async def run_rows(self, run_id: str) -> dict[str, Any]:
        """The run's document (see the module docstring); StoreError for an unknown run."""
        tables: dict[str, Any] = {}
        for table, (sql, _) in _TABLES.items():
            columns = await self._columns_read(table)
            rows = await self._db.read(f"read the {table} of run {run_id}", sql, (run_id,))
            tables[table] = {"columns": columns, "rows": [list(row) for row in rows]}
        if not tables["runs"]["rows"]:
            raise StoreError(f"no run {run_id}")
        return {"v": REPLICA_VERSION, "run": run_id, "tables": tables}

    async def apply_run_rows(self, document: dict[str, Any]) -> None:
        """Store a run's document (idempotent; one transaction). StoreError if malformed."""
        try:
            if document["v"] != REPLICA_VERSION:
                raise MalformedRunDocument(f"a run document of version {document['v']!r}, not 1")
            run_id = str(document["run"])
            tables = {name: document["tables"][name] for name in _TABLES}
        except (KeyError, TypeError) as exc:
            raise MalformedRunDocument(f"not a run document: {exc!r}") from exc
        async with self._db.transaction(f"apply run {run_id}") as db:
            for table, (_, conflict) in _TABLES.items():
                mine = set(await self._columns(db, table))
                data = tables[table]
                try:
                    columns: list[str] = list(data["columns"])
                    rows: list[Sequence[Any]] = list(data["rows"])
                except (KeyError, TypeError) as exc:
                    raise MalformedRunDocument(f"run {run_id}: table {table} is malformed") from exc
                keep = [
                    i
                    for i, c in enumerate(columns)
                    if c in mine and c != _LOCAL_ROW_NUMBERS.get(table)
                ]
                names = [columns[i] for i in keep]
                if conflict is None:
                    await db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                for row in rows:
                    values = [row[i] for i in keep]
                    if table == "records" and "parent_uuid" in names:
                        at = names.index("parent_uuid")
                        values[at] = await self._existing_record(db, values[at])
                    await db.execute(_upsert(table, names, conflict), values)

    async def _columns_read(self, table: str) -> list[str]:
        rows = await self._db.read(
            f"read the columns of {table}", "SELECT name FROM pragma_table_info(?)", (table,)
        )
        return [str(r[0]) for r in rows]

    @staticmethod
    async def _columns(db: aiosqlite.Connection, table: str) -> list[str]:
        rows = await db.execute_fetchall("SELECT name FROM pragma_table_info(?)", (table,))
        return [str(r[0]) for r in rows]

    @staticmethod
    async def _existing_record(db: aiosqlite.Connection, uuid: Any) -> Any:
        if uuid is None:
            return None
        rows = list(await db.execute_fetchall("SELECT uuid FROM records WHERE uuid = ?", (uuid,)))
        return uuid if rows else None


def _upsert(table: str, names: list[str], conflict: str | None) -> str:
    """INSERT of one row; on a conflict on ``conflict``, its columns replaced (records: kept)."""
    cols = ", ".join(names)
    marks = ", ".join("?" for _ in names)
    sql = f"INSERT INTO {table} ({cols}) VALUES ({marks})"
    if conflict is None:
        return sql
    if table == "records":
        return f"{sql} ON CONFLICT ({conflict}) DO NOTHING"
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n != conflict)
    if table == "threads":  # several daemons: the thread's newest activity wins
        updates = "last_active = max(last_active, excluded.last_active)"
    return f"{sql} ON CONFLICT ({conflict}) DO UPDATE SET {updates}"
