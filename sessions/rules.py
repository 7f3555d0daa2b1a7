"""The rules ``!approve ID always`` leaves, in the ``approval_rules`` table.

A rule says that one ``server.tool`` no longer asks in one channel. It is
written in the same transaction as the decision it rides on
(:meth:`sessions.approvals.Approvals.decide_approval` with ``rules``), so a
rule never stands without its approval, nor the approval's call run without
its rule. Revoking keeps the row (who allowed what, when, and who took it
back); at most one rule is in force per channel and tool.

In a cluster the broker holds the rules in force and every daemon keeps a
copy here (``shared`` set): :meth:`ApprovalRules.copy_in` takes the
broker's, :meth:`ApprovalRules.mark_shared` notes the ones known to be there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from .connection import Connection, canonical_timestamp
from .ids import now_iso

__all__ = ["ApprovalRules", "NewRule", "StoredRule", "insert_rules"]

_COLUMNS = "id, channel, tool, granted_by, granted, request_id, revoked, revoked_by, shared"


@dataclass(frozen=True)
class NewRule:
    """A rule as the desk writes it when ``!approve ID always`` is decided."""

    id: str
    channel: str
    tool: str  # server.tool
    granted_by: str
    granted: str  # ISO 8601, UTC
    request_id: str = ""


@dataclass(frozen=True)
class StoredRule:
    """One rule and where it stands (``revoked`` None: in force)."""

    id: str
    channel: str
    tool: str
    granted_by: str
    granted: str
    request_id: str
    revoked: str | None = None
    revoked_by: str | None = None
    shared: str | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredRule:
        """An ``approval_rules`` row read with this module's columns."""
        return cls(*row)

    @property
    def new(self) -> NewRule:
        """The rule as it was granted."""
        return NewRule(
            self.id, self.channel, self.tool, self.granted_by, self.granted, self.request_id
        )


async def insert_rules(
    db: aiosqlite.Connection, rules: Sequence[NewRule], *, shared: str | None = None
) -> None:
    """Insert ``rules`` inside the caller's transaction; one whose channel and tool already
    have a rule in force (or whose id is known) is skipped: the rule in force stands."""
    for rule in rules:
        granted = canonical_timestamp(rule.granted, f"rule {rule.id} time")
        await db.execute(
            f"INSERT OR IGNORE INTO approval_rules ({_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
            (rule.id, rule.channel, rule.tool, rule.granted_by, granted, rule.request_id, shared),
        )


class ApprovalRules:
    """The rules table: list, revoke, and the cluster's copy."""

    def __init__(self, db: Connection):
        self._db = db

    async def rules(self, *, revoked: bool = False) -> list[StoredRule]:
        """The rules in force (with ``revoked``: every rule ever granted), by channel and
        tool, then newest first."""
        where = "" if revoked else " WHERE revoked IS NULL"
        rows = await self._db.read(
            "reading approval rules",
            f"SELECT {_COLUMNS} FROM approval_rules{where} ORDER BY channel, tool, granted DESC",
        )
        return [StoredRule.from_row(r) for r in rows]

    async def get_rule(self, rule_id: str) -> StoredRule | None:
        """The rule with this id, or None."""
        rows = await self._db.read(
            f"reading approval rule {rule_id}",
            f"SELECT {_COLUMNS} FROM approval_rules WHERE id = ?",
            (rule_id,),
        )
        return StoredRule.from_row(rows[0]) if rows else None

    async def add_rules(self, rules: Sequence[NewRule]) -> None:
        """Store rules without a decision (tests, and a rule copied in by hand)."""
        async with self._db.transaction("storing approval rules") as db:
            await insert_rules(db, rules)

    async def revoke_rule(self, rule_id: str, *, by: str) -> bool:
        """Take the rule out of force; whether this call did (False: unknown or revoked)."""
        async with self._db.statement(f"revoking approval rule {rule_id}") as db:
            cursor = await db.execute(
                "UPDATE approval_rules SET revoked = ?, revoked_by = ?"
                " WHERE id = ? AND revoked IS NULL",
                (now_iso(), by, rule_id),
            )
        return cursor.rowcount == 1

    async def copy_in(self, rules: Sequence[NewRule]) -> None:
        """Rules in force on the cluster's broker, copied here (known ones are skipped)."""
        async with self._db.transaction("copying approval rules") as db:
            await insert_rules(db, rules, shared=now_iso())

    async def mark_shared(self, rule_ids: Sequence[str]) -> None:
        """These rules are on the cluster's broker now."""
        if not rule_ids:
            return
        async with self._db.transaction("marking approval rules shared") as db:
            for rule_id in rule_ids:
                await db.execute(
                    "UPDATE approval_rules SET shared = ? WHERE id = ? AND shared IS NULL",
                    (now_iso(), rule_id),
                )
