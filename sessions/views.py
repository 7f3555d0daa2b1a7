"""The console's reads of threads (issue 30): the list with its status, and one thread's runs.

``ThreadViews`` runs each read on the store's reader connection (never
waiting for a write). :func:`unfold_run` is pure: it turns one run's stored
records and nested-call rows into what the thread page shows, the model's
rounds, each ``run_code`` snippet with its result and the calls it made.

A thread's status: ``paused`` while an approval request of it is pending,
``running`` while a run of it has not ended, ``interrupted`` when its last
run was cut off, otherwise ``idle``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .connection import Connection, sql_limit
from .ids import thread_key
from .model import AuditEntry

__all__ = [
    "THREAD_STATUSES",
    "ApprovalView",
    "Round",
    "RunView",
    "Snippet",
    "ThreadPage",
    "ThreadRow",
    "ThreadViews",
    "unfold_run",
]

THREAD_STATUSES = ("idle", "running", "paused", "interrupted")
RUNS_PER_PAGE = 50  # the newest runs a thread page shows; older ones a link away

_STATUS = (
    "CASE WHEN EXISTS (SELECT 1 FROM approvals a WHERE a.thread = th.id"
    " AND a.status = 'pending') THEN 'paused'"
    " WHEN EXISTS (SELECT 1 FROM runs r WHERE r.thread = th.id AND r.status = 'running')"
    " THEN 'running'"
    " WHEN (SELECT r.status FROM runs r WHERE r.thread = th.id"
    " ORDER BY r.started DESC, r.id DESC LIMIT 1) = 'interrupted' THEN 'interrupted'"
    " ELSE 'idle' END"
)


@dataclass(frozen=True)
class ThreadRow:
    """One line of the threads page."""

    channel: str
    thread_id: str
    last_active: str
    first_prompt: str
    first_sender: str
    runs: int
    tokens: int
    scope_bytes: int | None  # the stored REPL's size; None: none stored
    status: str


@dataclass(frozen=True)
class Snippet:
    """One ``run_code`` (or direct tool) call of a round: its code, its result, its calls."""

    tool_use_id: str
    tool: str
    code: str  # the snippet (run_code), or the arguments as JSON (a direct call)
    result: str | None = None  # None: no result stored (the run is still working)
    is_error: bool = False


@dataclass(frozen=True)
class Round:
    """One model round: what it said, the snippets it ran, the nested calls they made."""

    uuid: str
    text: str
    snippets: list[Snippet]
    calls: list[AuditEntry]


@dataclass(frozen=True)
class ApprovalView:
    """One approval request of a run: who asked, who decided, how long it waited."""

    id: str
    requested: str
    requested_by: str
    status: str
    decided_by: str | None
    decided: str | None
    reason: str | None
    tools: list[str]

    @property
    def waited(self) -> float | None:
        """Seconds from the request to its decision (None: not decided)."""
        if self.decided is None:
            return None
        try:
            start = datetime.fromisoformat(self.requested.replace("Z", "+00:00"))
            end = datetime.fromisoformat(self.decided.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (end - start).total_seconds()


@dataclass
class RunView:
    """One run as the thread page unfolds it."""

    id: str
    started: str
    finished: str | None
    status: str
    prompt_tokens: int
    completion_tokens: int
    nested_calls: int
    error: str | None
    prompts: list[tuple[str, str, str]] = field(default_factory=list)  # (sender, text, ts)
    rounds: list[Round] = field(default_factory=list)
    working: list[AuditEntry] = field(default_factory=list)  # calls of a round not yet stored
    approvals: list[ApprovalView] = field(default_factory=list)
    reply: str | None = None


@dataclass(frozen=True)
class ThreadPage:
    """One thread: its newest runs (oldest first on the page) and how many there are."""

    channel: str
    thread_id: str
    total_runs: int
    runs: list[RunView]
    status: str
    scope_bytes: int | None
    scope_dumped: str | None


def _text(content: Any) -> str:
    """The text blocks of a message's content (a string is its own text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        ).strip()
    return ""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return json.dumps(content)


def unfold_run(
    records: Sequence[tuple[str, str, dict[str, Any]]], calls: Sequence[AuditEntry]
) -> tuple[list[Round], list[AuditEntry], str | None]:
    """A run's rounds, its calls not under a stored round, and its reply (pure).

    ``records`` are ``(uuid, type, message)`` in order; ``calls`` the run's
    nested-call rows, oldest first. A round is an assistant record; its
    ``tool_use`` blocks are its snippets, and a later user record's
    ``tool_result`` is a snippet's result. A nested call belongs to the round
    whose record carried its ``run_code`` (``record_uuid``); while the run
    works, that record is not stored yet, and its calls are ``working``.
    """
    by_record: dict[str, list[AuditEntry]] = {}
    for call in calls:
        by_record.setdefault(call.record_uuid or "", []).append(call)
    rounds: list[Round] = []
    snippets: dict[str, tuple[int, int]] = {}  # tool_use_id → (round, snippet)
    reply: str | None = None
    for uuid, kind, message in records:
        content = message.get("content")
        if kind == "assistant":
            found: list[Snippet] = []
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    arguments = block.get("input") or {}
                    code = arguments.get("code") if isinstance(arguments, dict) else None
                    snippet = Snippet(
                        tool_use_id=str(block.get("id", "")),
                        tool=str(block.get("name", "")),
                        code=code if isinstance(code, str) else json.dumps(arguments, indent=1),
                    )
                    snippets[snippet.tool_use_id] = (len(rounds), len(found))
                    found.append(snippet)
            text = _text(content)
            rounds.append(Round(uuid, text, found, by_record.pop(uuid, [])))
            if not found and text:
                reply = text
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    where = snippets.get(str(block.get("tool_use_id", "")))
                    if where is not None:
                        r, s = where
                        old = rounds[r].snippets[s]
                        rounds[r].snippets[s] = Snippet(
                            old.tool_use_id,
                            old.tool,
                            old.code,
                            _result_text(block.get("content")),
                            bool(block.get("is_error")),
                        )
    working = [call for group in by_record.values() for call in group]
    working.sort(key=lambda c: c.id)
    return rounds, working, reply


class ThreadViews:
    """The console's reads of threads, each on the reader connection."""

    def __init__(self, db: Connection):
        self._db = db

    async def threads(
        self,
        *,
        channel: str | None = None,
        sender: str | None = None,
        status: str | None = None,
        limit: int | None = 200,
    ) -> list[ThreadRow]:
        """The most recently active threads, newest first, filtered by what is not None."""
        rows = await self._db.read(
            "listing threads for the console",
            "SELECT channel, thread_id, last_active, first_prompt, first_sender, runs, tokens,"
            " scope_bytes, status FROM ("
            " SELECT th.id, th.channel, th.thread_id, th.last_active,"
            " (SELECT p.text FROM prompts p WHERE p.thread = th.id"
            "  ORDER BY p.ts, p.id LIMIT 1) AS first_prompt,"
            " (SELECT p.sender FROM prompts p WHERE p.thread = th.id"
            "  ORDER BY p.ts, p.id LIMIT 1) AS first_sender,"
            " (SELECT count(*) FROM runs r WHERE r.thread = th.id) AS runs,"
            " (SELECT coalesce(sum(r.prompt_tokens + r.completion_tokens), 0)"
            "  FROM runs r WHERE r.thread = th.id) AS tokens,"
            " (SELECT s.size FROM scopes s WHERE s.thread = th.id) AS scope_bytes,"
            f" {_STATUS} AS status"
            " FROM threads th"
            " WHERE (?1 IS NULL OR th.channel = ?1)"
            " AND (?2 IS NULL OR EXISTS"
            "  (SELECT 1 FROM prompts p WHERE p.thread = th.id AND p.sender = ?2))"
            ") WHERE (?3 IS NULL OR status = ?3)"
            " ORDER BY last_active DESC, id LIMIT ?4",
            (channel, sender, status, sql_limit(limit)),
        )
        return [
            ThreadRow(
                channel=r[0],
                thread_id=r[1],
                last_active=r[2],
                first_prompt=r[3] or "",
                first_sender=r[4] or "",
                runs=int(r[5]),
                tokens=int(r[6]),
                scope_bytes=r[7],
                status=r[8],
            )
            for r in rows
        ]

    async def channels(self) -> list[str]:
        """Every channel that has a thread (the threads page's filter)."""
        rows = await self._db.read(
            "listing channels", "SELECT DISTINCT channel FROM threads ORDER BY channel"
        )
        return [r[0] for r in rows]

    async def thread(
        self, channel: str, thread_id: str, *, runs: int | None = RUNS_PER_PAGE
    ) -> ThreadPage | None:
        """One thread with its newest ``runs`` runs unfolded (None: all); None if no such thread."""
        key = thread_key(channel, thread_id)
        head = await self._db.read(
            "reading a thread",
            "SELECT (SELECT count(*) FROM runs r WHERE r.thread = th.id),"
            f" {_STATUS}, s.size, s.dumped FROM threads th"
            " LEFT JOIN scopes s ON s.thread = th.id WHERE th.id = ?",
            (key,),
        )
        if not head:
            return None
        total, status, scope_bytes, dumped = head[0]
        run_rows = await self._db.read(
            "reading a thread's runs",
            "SELECT id, started, finished, status, prompt_tokens, completion_tokens,"
            " nested_calls, error FROM runs WHERE thread = ?"
            " ORDER BY started DESC, id DESC LIMIT ?",
            (key, sql_limit(runs)),
        )
        views = [
            RunView(
                id=r[0],
                started=r[1],
                finished=r[2],
                status=r[3],
                prompt_tokens=int(r[4]),
                completion_tokens=int(r[5]),
                nested_calls=int(r[6]),
                error=r[7],
            )
            for r in reversed(run_rows)
        ]
        if views:
            await self._fill(key, views)
        return ThreadPage(channel, thread_id, int(total), views, status, scope_bytes, dumped)

    async def _fill(self, key: str, views: list[RunView]) -> None:
        """Each run's prompts, records, calls and approvals: four reads for the whole page."""
        by_id = {v.id: v for v in views}
        oldest = views[0].started
        marks = ",".join("?" * len(views))
        ids = list(by_id)
        for sender, text, ts, run_id in await self._db.read(
            "reading a thread's prompts",
            f"SELECT sender, text, ts, run_id FROM prompts WHERE run_id IN ({marks})"
            " ORDER BY ts, id",
            ids,
        ):
            by_id[run_id].prompts.append((sender, text, ts))
        records: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        for run_id, uuid, kind, message in await self._db.read(
            "reading a thread's records",
            "SELECT run_id, uuid, type, message FROM records WHERE thread = ?"
            " AND run_id IN (SELECT id FROM runs WHERE thread = ? AND started >= ?)"
            " ORDER BY seq",
            (key, key, oldest),
        ):
            if run_id in by_id:
                records.setdefault(run_id, []).append((uuid, kind, json.loads(message)))
        calls: dict[str, list[AuditEntry]] = {}
        for row in await self._db.read(
            "reading a thread's calls",
            f"SELECT {AuditEntry.COLUMNS} FROM tool_calls t JOIN threads th ON th.id = t.thread"
            f" WHERE t.run_id IN ({marks}) ORDER BY t.id",
            ids,
        ):
            entry = AuditEntry.from_row(row)
            calls.setdefault(entry.run_id, []).append(entry)
        for row in await self._db.read(
            "reading a thread's approvals",
            "SELECT id, run_id, requested, requested_by, status, decided_by, decided, reason,"
            f" calls FROM approvals WHERE run_id IN ({marks}) ORDER BY requested",
            ids,
        ):
            tools = [
                str(c.get("tool", "")) if isinstance(c, dict) else str(c)
                for c in json.loads(row[8])
            ]
            by_id[row[1]].approvals.append(
                ApprovalView(row[0], row[2], row[3], row[4], row[5], row[6], row[7], tools)
            )
        for view in views:
            view.rounds, view.working, view.reply = unfold_run(
                records.get(view.id, []), calls.get(view.id, [])
            )

    async def thread_version(self, channel: str, thread_id: str) -> tuple[Any, ...]:
        """A cheap mark that changes whenever the thread page would (the live stream's poll):
        a run starts or ends, a record lands, a call starts or ends, a request is decided."""
        key = thread_key(channel, thread_id)
        rows = await self._db.read(
            "watching a thread",
            "SELECT (SELECT count(*) FROM runs WHERE thread = ?1),"
            " (SELECT count(*) FROM runs WHERE thread = ?1 AND status = 'running'),"
            " (SELECT max(seq) FROM records WHERE thread = ?1),"
            " (SELECT count(*) || '/' || coalesce(sum(t.outcome = 'started'), 0)"
            "  FROM tool_calls t WHERE t.run_id IN"
            "  (SELECT id FROM runs WHERE thread = ?1 AND status = 'running')),"
            " (SELECT count(*) || '/' || coalesce(sum(status = 'pending'), 0)"
            "  FROM approvals WHERE thread = ?1)",
            (key,),
        )
        return tuple(rows[0])
