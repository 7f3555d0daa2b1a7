"""``asyncai threads``, ``audit``, ``transcript`` and ``approvals``: read the store.

Argument parsing and printing only; the lines come from :mod:`sessions.report`.
``approvals --rules`` lists the rules ``!approve ID always`` left and
``approvals --revoke RULE`` revokes one by the id that listing prints (the
running daemon reads its rules again every ``RULES_REFRESH`` seconds,
:mod:`daemon.runtime.desk`).
Each command returns the exit status: 0 on success, 1 when the database is
missing or unreadable or a thread is not found (one line on stderr, never a
traceback), 2 for bad arguments (argparse's own message).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from sessions.connection import DEFAULT_DB_PATH
from sessions.errors import StoreError
from sessions.ids import parse_since
from sessions.report import (
    approvals_report,
    audit_report,
    revoke_report,
    rules_report,
    threads_report,
    transcript_report,
)
from sessions.store import Store

__all__ = ["MAX_LIMIT", "register"]


# SQLite integers are 64-bit: a larger --limit would overflow in the query
MAX_LIMIT = 1_000_000_000


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    if value > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LIMIT}: {text}")
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
    """Add ``threads``, ``audit``, ``transcript`` and ``approvals`` to ``asyncai``."""
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

    approvals = subparsers.add_parser(
        "approvals",
        help="approval requests of mutating calls, newest first; the 'always' rules",
        description="Requests for approval of mutating tool calls (one row per call): id, "
        "thread, tool, arguments, when requested, the decision, who decided and when. "
        "--rules lists the rules '!approve ID always' left (a tool that no longer asks in "
        "a channel) with their ids; --revoke RULE takes one out of force.",
    )
    _add_db(approvals)
    which = approvals.add_mutually_exclusive_group()
    which.add_argument("--pending", action="store_true", help="only requests still waiting")
    which.add_argument(
        "--rules",
        action="store_true",
        help="the 'always' rules in force: id, channel, server.tool, who granted it and when",
    )
    which.add_argument(
        "--revoke",
        metavar="RULE",
        help="revoke the rule with this id (as --rules prints it): the tool asks again",
    )
    approvals.add_argument(
        "--limit",
        type=_positive_int,
        default=100,
        metavar="N",
        help="at most N requests (default 100)",
    )
    approvals.add_argument("--json", action="store_true", help="one JSON object per line")
    approvals.set_defaults(func=approvals_command)


def _run(args: argparse.Namespace, body: Callable[[Store], Awaitable[Iterable[str]]]) -> int:
    """Open the store, run ``body``, print its lines; errors become one line on stderr."""
    path: Path = args.db
    try:
        exists = path.exists()
    except OSError as exc:  # a name too long, a directory on the way we may not search
        print(f"asyncai: cannot open {path}: {exc.strerror}", file=sys.stderr)
        return 1
    if not exists:
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


def threads_command(args: argparse.Namespace) -> int:
    """``asyncai threads``."""
    return _run(
        args, lambda store: threads_report(store.queries, limit=args.limit, as_json=args.json)
    )


def audit_command(args: argparse.Namespace) -> int:
    """``asyncai audit``."""
    return _run(
        args,
        lambda store: audit_report(
            store.audit,
            thread=args.thread,
            channel=args.channel,
            tool=args.tool,
            mutating=args.mutating,
            since=args.since,
            limit=args.limit,
            as_json=args.json,
        ),
    )


def transcript_command(args: argparse.Namespace) -> int:
    """``asyncai transcript``."""
    return _run(
        args,
        lambda store: transcript_report(
            store.queries, args.thread, channel=args.channel, jsonl=args.jsonl
        ),
    )


def approvals_command(args: argparse.Namespace) -> int:
    """``asyncai approvals``, ``--rules`` and ``--revoke RULE``."""
    if args.revoke is not None:
        by = f"{_user()} (asyncai approvals --revoke)"
        return _run(args, lambda store: revoke_report(store.rules, args.revoke.lower(), by=by))
    if args.rules:
        return _run(args, lambda store: rules_report(store.rules, as_json=args.json))
    return _run(
        args,
        lambda store: approvals_report(
            store.approvals, pending=args.pending, limit=args.limit, as_json=args.json
        ),
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "unknown user"
