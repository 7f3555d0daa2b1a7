"""``asyncai threads``, ``asyncai audit`` and ``asyncai transcript``: read the store.

Registered into the ``asyncai`` command line by ``daemon.cli`` through
``register(subparsers)``. Each handler returns the exit status: 0 on
success, 1 when the database is missing or unreadable or a thread is not
found (one line on stderr, never a traceback), 2 for bad arguments
(argparse's own message).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from .errors import StoreError
from .export import jsonl_lines, text_lines
from .ids import parse_since
from .model import AuditEntry, ThreadSummary
from .store import DEFAULT_DB_PATH, Store

__all__ = ["register"]

ARGUMENTS_WIDTH = 60  # the audit table shows this much of each call's arguments


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _since(text: str) -> str:
    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        type=Path,
        default=DEFAULT_DB_PATH,
        metavar="PATH",
        help=f"the daemon's database (default: ./{DEFAULT_DB_PATH})",
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # argparse has no public name
    """Add ``threads``, ``audit`` and ``transcript`` to the ``asyncai`` command line."""
    threads = subparsers.add_parser(
        "threads",
        help="recent threads with their counts",
        description="List the most recently active threads with prompt, run, record and "
        "tool-call counts.",
    )
    _add_db(threads)
    threads.add_argument(
        "--limit",
        type=_positive_int,
        default=50,
        metavar="N",
        help="at most N threads (default 50)",
    )
    threads.add_argument("--json", action="store_true", help="one JSON object per line")
    threads.set_defaults(func=threads_command)

    audit = subparsers.add_parser(
        "audit",
        help="the nested tool calls, newest first",
        description="Every MCP call made from run_code, newest first.",
    )
    _add_db(audit)
    audit.add_argument("--thread", metavar="T", help="only this thread id")
    audit.add_argument("--channel", metavar="C", help="only this channel")
    audit.add_argument("--tool", metavar="X", help="only this tool")
    audit.add_argument("--mutating", action="store_true", help="only calls that may change state")
    audit.add_argument(
        "--since",
        type=_since,
        metavar="DATE",
        help="only calls started at or after DATE (2026-11-29, midnight UTC) "
        "or an ISO datetime (2026-11-29T18:00:00Z)",
    )
    audit.add_argument(
        "--limit",
        type=_positive_int,
        default=100,
        metavar="N",
        help="at most N calls (default 100)",
    )
    audit.add_argument("--json", action="store_true", help="one JSON object per line")
    audit.set_defaults(func=audit_command)

    transcript = subparsers.add_parser(
        "transcript",
        help="a thread's conversation, as text or Claude Code JSONL",
        description="Print a thread's transcript. --jsonl writes Claude Code session "
        "records that other tools can read and resume from.",
    )
    _add_db(transcript)
    transcript.add_argument("thread", metavar="THREAD", help="the thread id")
    transcript.add_argument(
        "--channel", metavar="C", help="the thread's channel (needed when the id is in several)"
    )
    transcript.add_argument("--jsonl", action="store_true", help="Claude Code JSONL")
    transcript.set_defaults(func=transcript_command)


def _run(args: argparse.Namespace, body: Callable[[Store], Awaitable[Iterable[str]]]) -> int:
    """Open the store, run ``body``, print its lines; errors become one line on stderr."""
    path: Path = args.db
    if not path.exists():
        print(
            f"asyncai: no database at {path} (the daemon creates it on its first start; "
            "or pass --db PATH)",
            file=sys.stderr,
        )
        return 1

    async def main() -> list[str]:
        async with Store(path, create=False) as store:
            return list(await body(store))

    try:
        lines = asyncio.run(main())
    except StoreError as exc:
        print(f"asyncai: {exc}", file=sys.stderr)
        return 1
    try:
        for line in lines:
            # A lone surrogate (from a model's JSON) is shown as its escape, \ud800.
            sys.stdout.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `asyncai audit | head` closed the pipe: not an error of ours
        sys.stderr.close()
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns; the last one is not padded."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def _when(timestamp: str) -> str:
    return timestamp.replace("T", " ").rstrip("Z")


def threads_command(args: argparse.Namespace) -> int:
    """``asyncai threads``."""

    async def body(store: Store) -> list[str]:
        found = await store.threads(args.limit)
        if args.json:
            return [json.dumps(asdict(t), ensure_ascii=False) for t in found]
        if not found:
            return ["no threads yet"]
        return _threads_table(found)

    return _run(args, body)


def _threads_table(found: Sequence[ThreadSummary]) -> list[str]:
    header = ["LAST ACTIVE", "CHANNEL", "THREAD", "PROMPTS", "RUNS", "RECORDS", "CALLS", "MUTATING"]
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
        ]
        for t in found
    ]
    return _table(header, rows)


def audit_command(args: argparse.Namespace) -> int:
    """``asyncai audit``."""

    async def body(store: Store) -> list[str]:
        entries = await store.audit(
            thread=args.thread,
            channel=args.channel,
            tool=args.tool,
            mutating=True if args.mutating else None,
            since=args.since,
            limit=args.limit,
        )
        if args.json:
            return [json.dumps(asdict(e), ensure_ascii=False) for e in entries]
        if not entries:
            return ["no tool calls match"]
        return _audit_table(entries)

    return _run(args, body)


def _audit_table(entries: Sequence[AuditEntry]) -> list[str]:
    header = ["STARTED", "THREAD", "TOOL", "FLAGS", "BYTES", "MS", "ARGUMENTS"]
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
                flags or "-",
                str(e.bytes),
                f"{e.duration_ms:.0f}",
                arguments,
            ]
        )
    return _table(header, rows)


def transcript_command(args: argparse.Namespace) -> int:
    """``asyncai transcript``."""

    async def body(store: Store) -> list[str]:
        records = await store.transcript(args.thread, args.channel)
        if args.jsonl:
            return list(jsonl_lines(records))
        if not records:
            return [f"thread {args.thread} has no transcript records yet"]
        first = records[0]
        head = f"thread {first.channel} {first.thread_id} · session {first.session_id}"
        return [head, "", *text_lines(records)]

    return _run(args, body)
