"""The queries: what the daemon and people read back about prompts, runs and threads.

``Queries`` reads pending and interrupted prompts, run metrics, a sender's
runs and a thread's history for the daemon; threads, transcripts, query
plans and the integrity check for the commands. All of them run on the
shared ``query_only`` reader connection, so in WAL mode they never wait for
a write. (The audit's reads are the ``audit`` port's, the cursors the
``cursors`` port's.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .approvals import PAUSED_RUN
from .audit import AuditLog
from .connection import Connection, canonical_timestamp, sql_limit
from .errors import StoreError, ThreadLookupError
from .history import HistoryBuilder
from .ids import thread_key
from .model import (
    HistoryText,
    InterruptedRun,
    RunMetrics,
    SenderRun,
    StoredPrompt,
    StoredRecord,
    ThreadSummary,
)
from .usage import UsageBy, UsageRow, usage_query

__all__ = ["Queries"]

_HISTORY_PAGE = 64  # records read per query while building a history


class Queries:
    """The reads of prompts, runs, threads and transcripts, each on the reader connection.

    ``audit`` is the store's audit port, which reads the calls an
    interrupted run started.
    """

    def __init__(self, db: Connection, audit: AuditLog):
        self._db = db
        self._audit = audit

    # ---- prompts and runs ------------------------------------------------

    async def pending_prompts(
        self, channel: str | None = None, thread_id: str | None = None
    ) -> list[StoredPrompt]:
        """Prompts recorded but not done or failed (queued or running), oldest first.

        Prompts of a run paused for approval (``PAUSED_RUN``) are left out:
        the approval resumes that run. With no arguments, across all threads
        (restart recovery); with ``channel`` and ``thread_id``, one thread's.
        """
        sql = (
            f"SELECT {StoredPrompt.COLUMNS} WHERE p.status IN ('queued', 'running')"
            f" AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id AND {PAUSED_RUN})"
        )
        params: list[Any] = []
        if channel is not None or thread_id is not None:
            if channel is None or thread_id is None:
                raise StoreError("pending_prompts takes both channel and thread_id, or neither")
            sql += " AND p.thread = ?"
            params.append(thread_key(channel, thread_id))
        sql += " ORDER BY p.ts, p.id"
        rows = await self._db.read("reading pending prompts", sql, params)
        return [StoredPrompt.from_row(row) for row in rows]

    async def get_prompts(self, ids: Iterable[str]) -> list[StoredPrompt]:
        """The stored prompts with these message ids (unknown ids are skipped), oldest first."""
        wanted = list(ids)
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        rows = await self._db.read(
            "reading prompts",
            f"SELECT {StoredPrompt.COLUMNS} WHERE p.id IN ({marks}) ORDER BY p.ts, p.id",
            wanted,
        )
        return [StoredPrompt.from_row(row) for row in rows]

    async def newest_prompt_id(self) -> str | None:
        """The greatest message id among the stored prompts (None: no prompt stored)."""
        rows = await self._db.read("reading the newest prompt id", "SELECT max(id) FROM prompts")
        return rows[0][0] if rows else None

    async def interrupted_runs(self) -> list[InterruptedRun]:
        """Runs whose prompts are still pending although they started a mutating call.

        Such a prompt must not run again (the call could repeat a side
        effect): after a crash, a shutdown whose grace ran out, or a reply
        that was never acked. Runs paused for approval are left out. Oldest
        prompt first; read after :meth:`~sessions.writer.RunWriter.recover`.
        """
        rows = await self._db.read(
            "reading interrupted runs",
            "SELECT p.run_id, th.channel, th.thread_id, p.id FROM prompts p"
            " JOIN threads th ON th.id = p.thread"
            " WHERE p.status IN ('queued', 'running') AND p.run_id IS NOT NULL"
            " AND EXISTS (SELECT 1 FROM tool_calls t WHERE t.run_id = p.run_id AND t.mutating = 1)"
            f" AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id AND {PAUSED_RUN})"
            " ORDER BY p.ts, p.id",
        )
        grouped: dict[str, tuple[str, str, list[str]]] = {}
        for run_id, channel, thread_id, prompt_id in rows:
            grouped.setdefault(run_id, (channel, thread_id, []))[2].append(prompt_id)
        return [
            InterruptedRun(
                run_id=run_id,
                channel=channel,
                thread_id=thread_id,
                prompt_ids=tuple(ids),
                calls=tuple(await self._audit.started_calls(run_id)),
            )
            for run_id, (channel, thread_id, ids) in grouped.items()
        ]

    async def thread_runs(
        self, thread_id: str, channel: str | None = None
    ) -> list[tuple[str, str, RunMetrics]]:
        """A thread's runs, oldest first: ``(run id, status, metrics)``."""
        channel, thread_id = await self.resolve_thread(thread_id, channel)
        rows = await self._db.read(
            f"reading the runs of {thread_id}",
            "SELECT id, status, rounds, prompt_tokens, completion_tokens, extra"
            " FROM runs WHERE thread = ? ORDER BY started, id",
            (thread_key(channel, thread_id),),
        )
        found = []
        for run_id, status, rounds, prompt_tokens, completion_tokens, extra in rows:
            metrics = RunMetrics(
                rounds=rounds, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
            metrics.load_extra(json.loads(extra) if extra else {})
            found.append((run_id, status, metrics))
        return found

    async def run_metrics(self, run_id: str) -> tuple[str, RunMetrics, str | None] | None:
        """A run's ``(status, metrics, error)``, or None when there is no such run."""
        rows = await self._db.read(
            f"reading run {run_id}",
            "SELECT status, rounds, run_code_calls, nested_calls, bytes_in, bytes_out,"
            " final_round_forced, prompt_tokens, completion_tokens, extra, error"
            " FROM runs WHERE id = ?",
            (run_id,),
        )
        if not rows:
            return None
        (
            status,
            rounds,
            run_code_calls,
            nested_calls,
            bytes_in,
            bytes_out,
            final_round_forced,
            prompt_tokens,
            completion_tokens,
            extra,
            error,
        ) = rows[0]
        metrics = RunMetrics(
            rounds=rounds,
            run_code_calls=run_code_calls,
            nested_calls=nested_calls,
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            final_round_forced=bool(final_round_forced),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        metrics.load_extra(json.loads(extra) if extra else {})
        return status, metrics, error

    # ---- history and cursors --------------------------------------------

    async def history(
        self, channel: str, thread_id: str, turns: int = 20, chars: int = 24_000
    ) -> list[HistoryText]:
        """The thread's earlier user and assistant text (no tool results), oldest first.

        The newest ``turns`` turns whose texts add up to at most ``chars``
        characters (consecutive texts of one role form one turn).
        """
        key = thread_key(channel, thread_id)
        builder = HistoryBuilder(turns, chars)
        before: int | None = None
        while not builder.full:
            sql = "SELECT seq, type, message FROM records WHERE thread = ?"
            params: list[Any] = [key]
            if before is not None:
                sql += " AND seq < ?"
                params.append(before)
            sql += " ORDER BY seq DESC LIMIT ?"
            params.append(_HISTORY_PAGE)
            rows = await self._db.read(f"reading the history of {key}", sql, params)
            for seq, kind, message in rows:
                if builder.full:
                    break
                builder.add(kind, json.loads(message))
                before = seq
            if len(rows) < _HISTORY_PAGE:
                break
        return builder.result()

    async def sender_runs(
        self, sender: str, since: str, channel: str | None = None
    ) -> list[SenderRun]:
        """Runs started at or after ``since`` for prompts of ``sender``, oldest first; with
        ``channel``, only the runs of that channel's threads (a channel's own limits).

        A run that answered several senders' prompts (coalesced) is one of
        each sender's runs, with all its tokens. Every run started for the
        sender is there with the tokens it spent, however it ended (stopped,
        paused, cut off); ``answered`` is False for one whose prompts were
        put back to ``queued`` (by a shutdown, a crash, or a reply that could
        not be published) and so wait for, or went on to, a later run, which
        the run limit counts instead.
        """
        since = canonical_timestamp(since, "since")
        select = (
            "SELECT r.started, r.prompt_tokens + r.completion_tokens,"
            " EXISTS (SELECT 1 FROM prompts p WHERE p.run_id = r.id AND p.sender = s.sender"
            " AND p.status != 'queued')"
            " FROM run_senders s JOIN runs r ON r.id = s.run_id"
        )
        args: tuple[str, ...]
        if channel is None:
            sql, args = f"{select} WHERE s.sender = ? AND s.started >= ?", (sender, since)
        else:
            sql = (
                f"{select} JOIN threads t ON t.id = r.thread"
                " WHERE s.sender = ? AND s.started >= ? AND t.channel = ?"
            )
            args = (sender, since, channel)
        rows = await self._db.read(
            f"reading the runs of {sender}", f"{sql} ORDER BY s.started", args
        )
        return [
            SenderRun(started=row[0], tokens=int(row[1]), answered=bool(row[2])) for row in rows
        ]

    # ---- what people read ------------------------------------------------

    async def usage(
        self, by: UsageBy, *, since: str | None = None, until: str | None = None
    ) -> list[UsageRow]:
        """Tokens, runs, nested calls and bytes kept out of the context, summed per day,
        sender or channel (:mod:`sessions.usage`), for runs started in ``[since, until)``."""
        sql, params = usage_query(by, since=since, until=until)
        rows = await self._db.read(f"summing usage by {by}", sql, params)
        return [UsageRow.from_row(row) for row in rows]

    async def threads(self, limit: int | None = 50) -> list[ThreadSummary]:
        """The most recently active threads with their counts and scope size, newest first."""
        rows = await self._db.read(
            "listing threads",
            "SELECT th.channel, th.thread_id, th.session_id, th.created, th.last_active,"
            " (SELECT count(*) FROM prompts p WHERE p.thread = th.id),"
            " (SELECT count(*) FROM runs r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM records r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id AND t.mutating = 1),"
            " (SELECT s.size FROM scopes s WHERE s.thread = th.id)"
            " FROM threads th ORDER BY th.last_active DESC, th.id LIMIT ?",
            (sql_limit(limit),),
        )
        return [ThreadSummary.from_row(row) for row in rows]

    async def resolve_thread(self, thread_id: str, channel: str | None = None) -> tuple[str, str]:
        """``(channel, thread_id)`` of a thread named by its id (and channel, if ambiguous).

        Raises ``ThreadLookupError`` when no thread matches or several
        channels hold this id and ``channel`` is None.
        """
        if channel is not None:
            rows = await self._db.read(
                "looking up a thread",
                "SELECT channel FROM threads WHERE channel = ? AND thread_id = ?",
                (channel, thread_id),
            )
        else:
            rows = await self._db.read(
                "looking up a thread",
                "SELECT channel FROM threads WHERE thread_id = ? ORDER BY channel",
                (thread_id,),
            )
        if not rows:
            where = f" in {channel}" if channel is not None else ""
            raise ThreadLookupError(f"no thread {thread_id!r}{where}")
        if len(rows) > 1:
            channels = ", ".join(row[0] for row in rows)
            raise ThreadLookupError(
                f"thread {thread_id!r} exists in several channels ({channels}): name one"
            )
        return rows[0][0], thread_id

    async def explain(self, sql: str, params: Sequence[Any] = ()) -> list[str]:
        """``EXPLAIN QUERY PLAN`` of a query, one line per step (for checks and benchmarks)."""
        rows = await self._db.read("explaining a query", f"EXPLAIN QUERY PLAN {sql}", params)
        return [row[-1] for row in rows]

    async def transcript(self, thread_id: str, channel: str | None = None) -> list[StoredRecord]:
        """Every record of a thread with its envelope, in transcript (parentUuid) order."""
        channel, thread_id = await self.resolve_thread(thread_id, channel)
        rows = await self._db.read(
            f"reading the transcript of {thread_id}",
            f"SELECT {StoredRecord.COLUMNS} FROM records WHERE thread = ? ORDER BY seq",
            (thread_key(channel, thread_id),),
        )
        return [StoredRecord.from_row(row, channel, thread_id) for row in rows]

    async def integrity_check(self) -> str:
        """``PRAGMA integrity_check``'s verdict: ``"ok"`` for a sound file."""
        rows = await self._db.read("checking integrity", "PRAGMA integrity_check")
        return "\n".join(str(row[0]) for row in rows)
