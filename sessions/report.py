"""What ``asyncai threads``, ``audit``, ``transcript`` and ``approvals`` print, as lines.

``approvals --rules`` lists the rules ``!approve ID always`` left, and
``approvals --revoke RULE`` takes one out of force (the one write here).

Each report reads the port of an open :class:`~sessions.store.Store` it needs and returns the lines
to print: a table, JSON objects one per line, or the transcript as text or
Claude Code JSONL. The command line around them (arguments, opening the
database, printing, exit statuses) is ``daemon.cli.sessions``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from .approvals import Approvals, StoredApproval
from .audit import AuditLog
from .errors import RuleLookupError
from .export import json_line, jsonl_lines, printable, run_line, text_lines
from .model import AuditEntry, ThreadSummary
from .queries import Queries
from .rules import ApprovalRules, StoredRule

__all__ = [
    "ARGUMENTS_WIDTH",
    "approvals_report",
    "audit_report",
    "human_size",
    "revoke_report",
    "rules_report",
    "threads_report",
    "transcript_report",
]

ARGUMENTS_WIDTH = 60  # the audit table shows this much of each call's arguments
_JSON = (", ", ": ")  # --json lines keep json.dumps' default spacing


async def threads_report(queries: Queries, *, limit: int, as_json: bool) -> list[str]:
    """The most recently active threads with their counts and stored scope size."""
    found = await queries.threads(limit)
    if as_json:
        return [json_line(asdict(t), separators=_JSON) for t in found]
    if not found:
        return ["no threads yet"]
    return _threads_table(found)


async def audit_report(
    audit: AuditLog,
    *,
    thread: str | None,
    channel: str | None,
    tool: str | None,
    mutating: bool,
    since: str | None,
    limit: int,
    as_json: bool,
) -> list[str]:
    """The nested tool calls that match, newest first."""
    entries = await audit.entries(
        thread=thread,
        channel=channel,
        tool=tool,
        mutating=True if mutating else None,
        since=since,
        limit=limit,
    )
    if as_json:
        return [json_line(asdict(e), separators=_JSON) for e in entries]
    if not entries:
        return ["no tool calls match"]
    return _audit_table(entries)


async def transcript_report(
    queries: Queries, thread: str, *, channel: str | None, jsonl: bool
) -> list[str]:
    """A thread's transcript as text, or as Claude Code JSONL records."""
    records = await queries.transcript(thread, channel)
    if jsonl:
        return list(jsonl_lines(records))
    if not records:
        return [printable(f"thread {thread} has no transcript records yet")]
    first = records[0]
    head = printable(f"thread {first.channel} {first.thread_id} · session {first.session_id}")
    found = await queries.thread_runs(first.thread_id, first.channel)
    runs = {run_id: run_line(run_id, status, m) for run_id, status, m in found}
    return [head, "", *text_lines(records, runs=runs)]


async def approvals_report(
    approvals: Approvals, *, pending: bool, limit: int, as_json: bool
) -> list[str]:
    """Approval requests, newest first: one row per pending call, with the decision."""
    found = await approvals.approvals(pending=pending, limit=limit)
    if as_json:
        return [json_line(_approval_json(a), separators=_JSON) for a in found]
    if not found:
        return ["no pending approval requests" if pending else "no approval requests yet"]
    header = ["REQUESTED", "ID", "THREAD", "TOOL", "ARGUMENTS", "DECISION", "BY", "DECIDED"]
    rows = []
    for a in found:
        for call in a.calls:
            server = call.get("server")
            tool = f"{server}.{call['tool']}" if server else str(call["tool"])
            arguments = json.dumps(call.get("arguments"), ensure_ascii=False)
            if len(arguments) > ARGUMENTS_WIDTH:
                arguments = arguments[: ARGUMENTS_WIDTH - 1] + "…"
            rows.append(
                [
                    _when(a.requested),
                    a.id,
                    f"{a.channel}/{a.thread_id}",
                    tool,
                    arguments,
                    a.status,
                    a.decided_by or "-",
                    _when(a.decided) if a.decided else "-",
                ]
            )
    return _table(header, rows)


async def rules_report(rules: ApprovalRules, *, as_json: bool) -> list[str]:
    """The rules in force, by channel and tool: who allowed each and when. ``ID`` is what
    ``asyncai approvals --revoke`` takes."""
    found = await rules.rules()
    if as_json:
        return [json_line(_rule_json(r), separators=_JSON) for r in found]
    if not found:
        return ["no approval rules in force"]
    header = ["ID", "CHANNEL", "TOOL", "GRANTED BY", "GRANTED", "REQUEST"]
    rows = [
        [r.id, r.channel, r.tool, r.granted_by, _when(r.granted), r.request_id or "-"]
        for r in found
    ]
    return _table(header, rows)


async def revoke_report(rules: ApprovalRules, rule_id: str, *, by: str) -> list[str]:
    """Revoke the rule ``rule_id``; the line that says so. :class:`RuleLookupError` when no
    rule in force has that id."""
    rule = await rules.get_rule(rule_id)
    if rule is None or rule.revoked is not None or not await rules.revoke_rule(rule_id, by=by):
        raise RuleLookupError(
            f"no approval rule {rule_id} in force (asyncai approvals --rules lists them)"
        )
    return [
        printable(
            f"revoked rule {rule.id}: {rule.tool} asks again in {rule.channel} "
            "(a running daemon stops applying it within about two seconds)"
        )
    ]


def _rule_json(r: StoredRule) -> dict[str, object]:
    return asdict(r)


def _approval_json(a: StoredApproval) -> dict[str, object]:
    """A request as ``approvals --json`` prints it (no snapshot, no conversation)."""
    return {
        "id": a.id,
        "channel": a.channel,
        "thread_id": a.thread_id,
        "run_id": a.run_id,
        "calls": a.calls,
        "requested": a.requested,
        "requested_by": a.requested_by,
        "expires": a.expires,
        "status": a.status,
        "scope": a.scope,
        "decided_by": a.decided_by,
        "decided": a.decided,
        "reason": a.reason,
        "resumed": a.resumed,
        "snapshot_bytes": len(a.snapshot) if a.snapshot is not None else None,
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns; the last one is not padded. Each cell is :func:`printable`,
    so a stored text cannot drive the terminal or forge a row."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def human_size(size: int | None) -> str:
    """``1.2 KiB``, ``512 B`` (powers of 1024, one decimal), or ``-`` for None."""
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        # compare the rounded value, so 1023.96 KiB reads 1.0 MiB, not 1024.0 KiB
        if round(value, 1) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _when(timestamp: str) -> str:
    return timestamp.replace("T", " ").rstrip("Z")


def _threads_table(found: Sequence[ThreadSummary]) -> list[str]:
    header = [
        "LAST ACTIVE",
        "CHANNEL",
        "THREAD",
        "PROMPTS",
        "RUNS",
        "RECORDS",
        "CALLS",
        "MUTATING",
        "SCOPE",
    ]
    rows = [
        [
            _when(t.last_active),
            t.channel,
            t.thread_id,
            str(t.prompts),
            str(t.runs),
            str(t.records),
            str(t.tool_calls),
            str(t.mutating_calls),
            human_size(t.scope_bytes),
        ]
        for t in found
    ]
    return _table(header, rows)


def _audit_table(entries: Sequence[AuditEntry]) -> list[str]:
    # QUEUE: ms the call waited for its server's max_concurrent slot ("-": no limit)
    header = ["STARTED", "THREAD", "TOOL", "OUTCOME", "FLAGS", "BYTES", "MS", "QUEUE", "ARGUMENTS"]
    rows = []
    for e in entries:
        flags = ",".join([*(["MUT"] if e.mutating else []), *(["ERR"] if e.is_error else [])])
        arguments = json.dumps(e.arguments, ensure_ascii=False)
        if len(arguments) > ARGUMENTS_WIDTH:
            arguments = arguments[: ARGUMENTS_WIDTH - 1] + "…"
        rows.append(
            [
                _when(e.started),
                f"{e.channel}/{e.thread_id}",
                e.tool,
                e.outcome,
                flags or "-",
                str(e.bytes),
                f"{e.duration_ms:.0f}",
                "-" if e.queue_ms is None else f"{e.queue_ms:.0f}",
                arguments,
            ]
        )
    return _table(header, rows)
