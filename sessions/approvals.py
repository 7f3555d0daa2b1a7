"""Approval requests in the ``approvals`` table: a paused run, stored whole, and its decision.

A request is written in ONE statement with everything needed to resume the
run after any restart, SIGKILL included: the pending calls, the Monty
snapshot of the paused snippet (NULL in direct mode), the model conversation
so far. A decision is taken once (``status`` moves from ``pending`` only
once, atomically); ``resumed`` is set when the resumed run has consumed it,
so a decision taken while the daemon was down, or that the daemon did not
finish acting on, is found again at the next start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .connection import Connection, canonical_timestamp
from .errors import StoreError
from .ids import now_iso, thread_key
from .model import StoredPrompt
from .rules import NewRule, insert_rules

__all__ = ["PAUSED_RUN", "ApprovalStatus", "Approvals", "NewApproval", "StoredApproval"]

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "stopped"]

PAUSED_RUN = (
    "EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id"
    " AND (a.status = 'pending'"
    " OR (a.status IN ('approved', 'denied', 'expired') AND a.resumed IS NULL)))"
)
"""SQL: run ``r`` waits for an approval, or for its resume after a decision.

Recovery leaves such a run and its prompts alone (the approval resumes it).
"""


_COLUMNS = (
    "a.id, a.run_id, t.channel, t.thread_id, a.requested, a.expires, a.requested_by, a.calls,"
    " a.snapshot, a.conversation, a.status, a.scope, a.decided_by, a.decided, a.reason, a.resumed"
)
_FROM = " FROM approvals a JOIN threads t ON t.id = a.thread"


@dataclass(frozen=True)
class NewApproval:
    """A request as the runtime stores it when a run pauses."""

    id: str
    run_id: str
    channel: str
    thread_id: str
    requested_by: str  # the sender of the prompt that started the run
    expires: str  # ISO 8601, UTC
    calls: list[dict[str, Any]]  # the pending calls: tool, server, arguments, why, call_id
    conversation: dict[str, Any]  # the model loop's state to resume from
    snapshot: bytes | None = None  # the paused snippet (code mode)
    requested: str = field(default_factory=now_iso)


@dataclass(frozen=True)
class StoredApproval:
    """One request and where it stands."""

    id: str
    run_id: str
    channel: str
    thread_id: str
    requested: str
    expires: str
    requested_by: str
    calls: list[dict[str, Any]]
    snapshot: bytes | None
    conversation: dict[str, Any]
    status: ApprovalStatus
    scope: Literal["call", "run"] | None
    decided_by: str | None
    decided: str | None
    reason: str | None
    resumed: str | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredApproval:
        """An ``approvals`` row with its thread, read with the columns of this module
        (in the order of the fields)."""
        values = list(row)
        calls, snapshot, conversation = values[7:10]
        values[7:10] = (
            json.loads(calls),
            None if snapshot is None else bytes(snapshot),
            json.loads(conversation),
        )
        return cls(*values)


def _dumps(value: Any) -> str:
    # ASCII escapes keep a lone surrogate from a model's JSON storable as UTF-8
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


class Approvals:
    """The approvals table: write a request, take its decision once, list them; and the
    prompts of a paused run, to resume it."""

    def __init__(self, db: Connection):
        self._db = db

    async def add_approval(self, new: NewApproval) -> None:
        """Store a paused run's request (one statement: all of it, or nothing)."""
        expires = canonical_timestamp(new.expires, f"approval {new.id} expiry")
        requested = canonical_timestamp(new.requested, f"approval {new.id} time")
        async with self._db.statement(f"storing approval request {new.id}") as db:
            cursor = await db.execute(
                "INSERT INTO approvals (id, run_id, thread, requested, expires, requested_by,"
                " calls, snapshot, conversation)"
                " SELECT ?, id, thread, ?, ?, ?, ?, ?, ? FROM runs WHERE id = ? AND thread = ?",
                (
                    new.id,
                    requested,
                    expires,
                    new.requested_by,
                    _dumps(new.calls),
                    new.snapshot,
                    _dumps(new.conversation),
                    new.run_id,
                    thread_key(new.channel, new.thread_id),
                ),
            )
        if cursor.rowcount != 1:
            raise StoreError(
                f"approval request {new.id}: no run {new.run_id!r} in thread "
                f"{new.channel} {new.thread_id}"
            )

    async def get_approval(self, request_id: str) -> StoredApproval | None:
        """The request with this id, or None."""
        rows = await self._db.read(
            f"reading approval {request_id}",
            f"SELECT {_COLUMNS}{_FROM} WHERE a.id = ?",
            (request_id,),
        )
        return StoredApproval.from_row(rows[0]) if rows else None

    async def decide_approval(
        self,
        request_id: str,
        status: Literal["approved", "denied", "expired", "stopped"],
        *,
        by: str,
        reason: str | None = None,
        scope: Literal["call", "run"] | None = None,
        rules: Sequence[NewRule] = (),
    ) -> bool:
        """Record the decision if the request is still pending; whether this call decided it.

        ``rules`` (``!approve ID always``) are stored in the same transaction, and
        only if this call decided the request: the rule is committed before the
        approval it rides on can take effect, and never without it.
        """
        update = (
            "UPDATE approvals SET status = ?, decided_by = ?, decided = ?, reason = ?,"
            " scope = ? WHERE id = ? AND status = 'pending'"
        )
        params = (status, by, now_iso(), reason, scope, request_id)
        if not rules:
            async with self._db.statement(f"deciding approval {request_id}") as db:
                cursor = await db.execute(update, params)
            return cursor.rowcount == 1
        async with self._db.transaction(f"deciding approval {request_id} always") as db:
            cursor = await db.execute(update, params)
            if cursor.rowcount != 1:
                return False
            await insert_rules(db, rules)
        return True

    async def mark_resumed(self, request_id: str) -> None:
        """The resumed run has taken the decision: it is not acted on again after a restart."""
        async with self._db.statement(f"marking approval {request_id} resumed") as db:
            await db.execute(
                "UPDATE approvals SET resumed = ? WHERE id = ? AND resumed IS NULL",
                (now_iso(), request_id),
            )

    async def pending_approvals(self) -> list[StoredApproval]:
        """Requests still waiting for a decision, soonest expiry first."""
        rows = await self._db.read(
            "reading pending approvals",
            f"SELECT {_COLUMNS}{_FROM} WHERE a.status = 'pending' ORDER BY a.expires, a.id",
        )
        return [StoredApproval.from_row(r) for r in rows]

    async def unresumed_decisions(self) -> list[StoredApproval]:
        """Decided requests whose run was not resumed yet, oldest decision first."""
        rows = await self._db.read(
            "reading decided approvals",
            f"SELECT {_COLUMNS}{_FROM} WHERE a.resumed IS NULL AND a.decided IS NOT NULL"
            " ORDER BY a.decided, a.id",
        )
        return [StoredApproval.from_row(r) for r in rows]

    async def run_approvals(self, run_id: str) -> list[StoredApproval]:
        """Every request of one run, oldest first (its ``!approve ID run`` grants)."""
        rows = await self._db.read(
            f"reading the approvals of run {run_id}",
            f"SELECT {_COLUMNS}{_FROM} WHERE a.run_id = ? ORDER BY a.requested, a.id",
            (run_id,),
        )
        return [StoredApproval.from_row(r) for r in rows]

    async def run_prompts(self, run_id: str) -> list[StoredPrompt]:
        """The prompts a run answers (a paused run's, to resume it), oldest first."""
        rows = await self._db.read(
            f"reading the prompts of run {run_id}",
            f"SELECT {StoredPrompt.COLUMNS} WHERE p.run_id = ? ORDER BY p.ts, p.id",
            (run_id,),
        )
        return [StoredPrompt.from_row(row) for row in rows]

    async def approvals(self, *, pending: bool = False, limit: int = 100) -> list[StoredApproval]:
        """Requests, newest first; only the pending ones with ``pending``."""
        where = " WHERE a.status = 'pending'" if pending else ""
        rows = await self._db.read(
            "listing approvals",
            f"SELECT {_COLUMNS}{_FROM}{where} ORDER BY a.requested DESC, a.id LIMIT ?",
            (max(1, limit),),
        )
        return [StoredApproval.from_row(r) for r in rows]

    async def search(
        self,
        *,
        text: str = "",
        status: ApprovalStatus | Literal["decided"] | None = None,
        channel: str | None = None,
        limit: int = 100,
    ) -> list[StoredApproval]:
        """Requests, newest first, that match: ``text`` anywhere in the id, the calls
        (tool, server, every argument), who asked, who decided or the reason (case
        insensitive; "" matches all); ``status`` one status, or "decided" for every one
        but pending; ``channel`` one channel. Every value is a bound parameter."""
        where: list[str] = []
        params: list[Any] = []
        if status == "decided":
            where.append("a.status != 'pending'")
        elif status is not None:
            where.append("a.status = ?")
            params.append(status)
        if channel is not None:
            where.append("t.channel = ?")
            params.append(channel)
        if text:
            like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            columns = ("a.id", "a.calls", "a.requested_by", "a.decided_by", "a.reason")
            where.append(
                "(" + " OR ".join(f"coalesce({c}, '') LIKE ? ESCAPE '\\'" for c in columns) + ")"
            )
            params.extend([like] * len(columns))
        sql = f"SELECT {_COLUMNS}{_FROM}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY a.requested DESC, a.id LIMIT ?"
        params.append(max(1, limit))
        rows = await self._db.read("searching approvals", sql, params)
        return [StoredApproval.from_row(r) for r in rows]
