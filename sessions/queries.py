"""The read side of the store: what the daemon and people read back.

``StoreQueries`` adds every read to ``StoreConnections``: pending prompts,
run metrics, a thread's history and a channel's cursor for the daemon;
threads, the audit, transcripts, query plans and the integrity check for
the commands. All of them run on the ``query_only`` reader connection, so
in WAL mode they never wait for a write. ``audit_query`` builds the audit's
SQL with every filter bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .connection import StoreConnections, canonical_timestamp
from .errors import StoreError, ThreadLookupError
from .history import HistoryBuilder
from .ids import thread_key
from .model import (
    AuditEntry,
    HistoryText,
    InterruptedRun,
    RunMetrics,
    SenderRun,
    StartedCall,
    StoredPrompt,
    StoredRecord,
    ThreadSummary,
)

__all__ = ["PAUSED_RUN", "StoreQueries", "audit_query"]

_HISTORY_PAGE = 64  # records read per query while building a history

PAUSED_RUN = (
    "EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id"
    " AND (a.status = 'pending'"
    " OR (a.status IN ('approved', 'denied', 'expired') AND a.resumed IS NULL)))"
)
"""SQL: run ``r`` waits for an approval, or for its resume after a decision.

Recovery leaves such a run and its prompts alone (the approval resumes it).
"""


class StoreQueries(StoreConnections):
    """Every read the store serves, each on the reader connection."""

    # ---- prompts and runs ------------------------------------------------

    _PROMPT_COLUMNS = (
        "p.id, th.channel, th.thread_id, p.sender, p.text, p.ts, p.status, p.run_id"
        " FROM prompts p JOIN threads th ON th.id = p.thread"
    )

    async def pending_prompts(
        self, channel: str | None = None, thread_id: str | None = None
    ) -> list[StoredPrompt]:
        """Prompts recorded but not done or failed (queued or running), oldest first.

        Prompts of a run paused for approval (``PAUSED_RUN``) are left out:
        the approval resumes that run. With no arguments, across all threads
        (restart recovery); with ``channel`` and ``thread_id``, one thread's.
        """
        sql = (
            f"SELECT {self._PROMPT_COLUMNS} WHERE p.status IN ('queued', 'running')"
            f" AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id AND {PAUSED_RUN})"
        )
        params: list[Any] = []
        if channel is not None or thread_id is not None:
            if channel is None or thread_id is None:
                raise StoreError("pending_prompts takes both channel and thread_id, or neither")
            sql += " AND p.thread = ?"
            params.append(thread_key(channel, thread_id))
        sql += " ORDER BY p.ts, p.id"
        rows = await self._read("reading pending prompts", sql, params)
        return [StoredPrompt(*row) for row in rows]

    async def get_prompts(self, ids: Iterable[str]) -> list[StoredPrompt]:
        """The stored prompts with these message ids (unknown ids are skipped), oldest first."""
        wanted = list(ids)
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        rows = await self._read(
            "reading prompts",
            f"SELECT {self._PROMPT_COLUMNS} WHERE p.id IN ({marks}) ORDER BY p.ts, p.id",
            wanted,
        )
        return [StoredPrompt(*row) for row in rows]

    async def started_calls(self, run_id: str) -> list[StartedCall]:
        """The nested calls a run started, in the order they started, with their outcomes."""
        rows = await self._read(
            f"reading the calls of run {run_id}",
            "SELECT tool, arguments, mutating, outcome FROM tool_calls"
            " WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [StartedCall(row[0], json.loads(row[1]), bool(row[2]), row[3]) for row in rows]

    async def interrupted_runs(self) -> list[InterruptedRun]:
        """Runs whose prompts are still pending although they started a mutating call.

        Such a prompt must not run again (the call could repeat a side
        effect): after a crash, a shutdown whose grace ran out, or a reply
        that was never acked. Runs paused for approval are left out. Oldest
        prompt first; read after :meth:`~sessions.store.Store.recover`.
        """
        rows = await self._read(
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
                calls=tuple(await self.started_calls(run_id)),
            )
            for run_id, (channel, thread_id, ids) in grouped.items()
        ]

    async def run_metrics(self, run_id: str) -> tuple[str, RunMetrics, str | None] | None:
        """A run's ``(status, metrics, error)``, or None when there is no such run."""
        rows = await self._read(
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
            rows = await self._read(f"reading the history of {key}", sql, params)
            for seq, kind, message in rows:
                if builder.full:
                    break
                builder.add(kind, json.loads(message))
                before = seq
            if len(rows) < _HISTORY_PAGE:
                break
        return builder.result()

    async def sender_runs(self, sender: str, since: str) -> list[SenderRun]:
        """Runs started at or after ``since`` for prompts of ``sender``, oldest first.

        A run that answered several senders' prompts (coalesced) is one of
        each sender's runs, with all its tokens. Every run started for the
        sender is there with the tokens it spent, however it ended (stopped,
        paused, cut off); ``answered`` is False for one whose prompts were
        put back to ``queued`` (by a shutdown, a crash, or a reply that could
        not be published) and so wait for, or went on to, a later run, which
        the run limit counts instead.
        """
        since = canonical_timestamp(since, "since")
        rows = await self._read(
            f"reading the runs of {sender}",
            "SELECT r.started, r.prompt_tokens + r.completion_tokens,"
            " EXISTS (SELECT 1 FROM prompts p WHERE p.run_id = r.id AND p.sender = s.sender"
            " AND p.status != 'queued')"
            " FROM run_senders s JOIN runs r ON r.id = s.run_id"
            " WHERE s.sender = ? AND s.started >= ? ORDER BY s.started",
            (sender, since),
        )
        return [
            SenderRun(started=row[0], tokens=int(row[1]), answered=bool(row[2])) for row in rows
        ]

    async def get_cursor(self, channel: str) -> str | None:
        """The last message id handled on ``channel``, or None."""
        return await self._scalar_read(
            f"reading the cursor of {channel}",
            "SELECT message_id FROM cursors WHERE channel = ?",
            (channel,),
        )

    # ---- what people read ------------------------------------------------

    async def threads(self, limit: int | None = 50) -> list[ThreadSummary]:
        """The most recently active threads with their counts and scope size, newest first."""
        rows = await self._read(
            "listing threads",
            "SELECT th.channel, th.thread_id, th.session_id, th.created, th.last_active,"
            " (SELECT count(*) FROM prompts p WHERE p.thread = th.id),"
            " (SELECT count(*) FROM runs r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM records r WHERE r.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id),"
            " (SELECT count(*) FROM tool_calls t WHERE t.thread = th.id AND t.mutating = 1),"
            " (SELECT s.size FROM scopes s WHERE s.thread = th.id)"
            " FROM threads th ORDER BY th.last_active DESC, th.id LIMIT ?",
            (_limit(limit),),
        )
        return [ThreadSummary(*row) for row in rows]

    async def resolve_thread(self, thread_id: str, channel: str | None = None) -> tuple[str, str]:
        """``(channel, thread_id)`` of a thread named by its id (and channel, if ambiguous).

        Raises ``ThreadLookupError`` when no thread matches or several
        channels hold this id and ``channel`` is None.
        """
        if channel is not None:
            rows = await self._read(
                "looking up a thread",
                "SELECT channel FROM threads WHERE channel = ? AND thread_id = ?",
                (channel, thread_id),
            )
        else:
            rows = await self._read(
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

    async def audit(
        self,
        *,
        thread: str | None = None,
        channel: str | None = None,
        tool: str | None = None,
        mutating: bool | None = None,
        since: str | None = None,
        limit: int | None = 100,
    ) -> list[AuditEntry]:
        """Nested tool calls, newest first, filtered by every argument that is not None.

        ``thread`` is a thread id (in any channel unless ``channel`` is
        given); ``since`` an ISO timestamp (calls started at or after it).
        Every value is a bound parameter.
        """
        keys: list[str] | None = None
        if thread is not None:
            if channel is not None:
                keys = [thread_key(channel, thread)]
            else:
                # Resolved first so that one thread (the usual case) is an
                # equality on the index and "newest first" needs no sort.
                found = await self._read(
                    "looking up a thread",
                    "SELECT id FROM threads WHERE thread_id = ? ORDER BY id",
                    (thread,),
                )
                keys = [row[0] for row in found]
                if not keys:
                    return []
        sql, params = audit_query(
            thread_keys=keys,
            channel=None if thread is not None else channel,
            tool=tool,
            mutating=mutating,
            since=since,
            limit=limit,
        )
        rows = await self._read("reading the audit", sql, params)
        return [
            AuditEntry(
                id=row[0],
                run_id=row[1],
                channel=row[2],
                thread_id=row[3],
                record_uuid=row[4],
                tool=row[5],
                arguments=json.loads(row[6]),
                is_error=bool(row[7]),
                bytes=row[8],
                mutating=bool(row[9]),
                started=row[10],
                duration_ms=row[11],
                outcome=row[12],
                decision=row[13],
                decided_by=row[14],
                wait_ms=row[15],
                queue_ms=row[16],
            )
            for row in rows
        ]

    async def explain(self, sql: str, params: Sequence[Any] = ()) -> list[str]:
        """``EXPLAIN QUERY PLAN`` of a query, one line per step (for checks and benchmarks)."""
        rows = await self._read("explaining a query", f"EXPLAIN QUERY PLAN {sql}", params)
        return [row[-1] for row in rows]

    async def transcript(self, thread_id: str, channel: str | None = None) -> list[StoredRecord]:
        """Every record of a thread with its envelope, in transcript (parentUuid) order."""
        channel, thread_id = await self.resolve_thread(thread_id, channel)
        rows = await self._read(
            f"reading the transcript of {thread_id}",
            "SELECT uuid, parent_uuid, session_id, run_id, type, timestamp, message,"
            " tool_use_result, cwd, version, is_sidechain, user_type"
            " FROM records WHERE thread = ? ORDER BY seq",
            (thread_key(channel, thread_id),),
        )
        return [
            StoredRecord(
                uuid=row[0],
                parent_uuid=row[1],
                session_id=row[2],
                channel=channel,
                thread_id=thread_id,
                run_id=row[3],
                type=row[4],
                timestamp=row[5],
                message=json.loads(row[6]),
                tool_use_result=None if row[7] is None else json.loads(row[7]),
                cwd=row[8],
                version=row[9],
                is_sidechain=bool(row[10]),
                user_type=row[11],
            )
            for row in rows
        ]

    async def integrity_check(self) -> str:
        """``PRAGMA integrity_check``'s verdict: ``"ok"`` for a sound file."""
        rows = await self._read("checking integrity", "PRAGMA integrity_check")
        return "\n".join(str(row[0]) for row in rows)


def _limit(limit: int | None) -> int:
    """SQLite's LIMIT: a negative value means no limit."""
    if limit is None:
        return -1
    if limit < 0:
        raise StoreError(f"a limit cannot be negative: {limit}")
    return int(limit)


def audit_query(
    *,
    thread_keys: Sequence[str] | None = None,
    channel: str | None = None,
    tool: str | None = None,
    mutating: bool | None = None,
    since: str | None = None,
    limit: int | None = 100,
) -> tuple[str, list[Any]]:
    """The audit's SQL and parameters. Filters are bound, never spliced into the text.

    ``thread_keys`` are thread keys (``ids.thread_key``); an empty list
    matches nothing.
    """
    where: list[str] = []
    params: list[Any] = []
    if thread_keys is not None:
        where.append(f"t.thread IN ({','.join('?' * len(thread_keys))})")
        params.extend(thread_keys)
        if len(thread_keys) == 1:
            where[-1] = "t.thread = ?"
    if channel is not None:
        where.append("th.channel = ?")
        params.append(channel)
    if tool is not None:
        where.append("t.tool = ?")
        params.append(tool)
    if mutating is not None:
        where.append("t.mutating = ?")
        params.append(int(mutating))
    if since is not None:
        where.append("t.started >= ?")
        params.append(canonical_timestamp(since, "since"))
    sql = (
        "SELECT t.id, t.run_id, th.channel, th.thread_id, t.record_uuid, t.tool, t.arguments,"
        " t.is_error, t.bytes, t.mutating, t.started, t.duration_ms,"
        " t.outcome, t.decision, t.decided_by, t.wait_ms, t.queue_ms"
        # CROSS JOIN keeps tool_calls the outer loop, so "newest first" walks
        # an index and stops at the limit even when filtering on the channel.
        " FROM tool_calls t CROSS JOIN threads th ON th.id = t.thread"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.started DESC, t.id DESC LIMIT ?"
    params.append(_limit(limit))
    return sql, params
