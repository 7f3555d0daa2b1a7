"""``asyncai audit-collect``: follow the ``asyncai.audit`` stream into one SQLite file.

Exit status 0 after SIGTERM or SIGINT (or, with ``--once``, when caught up);
1 when the broker or the database cannot be used (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys
from pathlib import Path

__all__ = ["register"]

DEFAULT_URL = "nats://127.0.0.1:4222"


# NATS consumer names: 1-255 characters, none of them whitespace, '.', '*', '>' or a path
# separator (the broker makes files of them)
_DURABLE = re.compile(r"[^\s.*>/\\]{1,255}\Z")


def _durable(text: str) -> str:
    """``--durable``: a name the broker takes, checked before connecting."""
    if not _DURABLE.match(text) or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"not a NATS consumer name: {text!r} (1-255 characters, no spaces, '.', '*', "
            "'>', '/' or '\\')"
        )
    return text


def register(subparsers: argparse._SubParsersAction) -> None:  # argparse has no public name
    """Add ``audit-collect`` to ``asyncai``."""
    parser = subparsers.add_parser(
        "audit-collect",
        help="collect every daemon's runs and audit from NATS into one SQLite file",
        description=(
            "Follow the asyncai.audit stream (each daemon of a NATS cluster publishes its "
            "finished runs there) into one database of the daemon's schema, so that "
            "`asyncai audit --db PATH`, `threads` and `transcript` work across daemons."
        ),
    )
    parser.add_argument("--db", type=Path, required=True, metavar="PATH", help="the database")
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"the NATS broker (default: {DEFAULT_URL})"
    )
    parser.add_argument(
        "--durable",
        type=_durable,
        default="audit-collect",
        metavar="NAME",
        help="the durable consumer: where this collector left off (default: audit-collect)",
    )
    parser.add_argument("--once", action="store_true", help="stop when the stream is caught up")
    parser.add_argument("--verbose", action="store_true", help="log every step (NDJSON, stderr)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from daemon.cluster.errors import ClusterError
    from daemon.logging import configure_logging
    from sessions.errors import StoreError

    configure_logging(args.verbose)  # NDJSON on stderr: warnings, or all with --verbose

    try:
        return asyncio.run(_collect(args))
    except (ClusterError, StoreError, OSError) as exc:
        # a builtin TimeoutError is an OSError whose text is empty: name it
        print(f"asyncai audit-collect: {str(exc) or type(exc).__name__}", file=sys.stderr)
        return 1


async def _collect(args: argparse.Namespace) -> int:
    from daemon.cluster.audit import collect
    from daemon.cluster.connect import connect_nats
    from sessions.store import Store

    nc = await connect_nats(args.url, name="asyncai-audit-collect")
    try:
        async with Store(args.db) as store:
            work = asyncio.create_task(
                collect(
                    nc.jetstream(), store.replica, durable=args.durable, until_caught_up=args.once
                )
            )
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, work.cancel)
            try:
                stats = await work
            except asyncio.CancelledError:
                return 0
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            print(f"applied {stats.applied} runs, refused {stats.refused}")
            return 0
    finally:
        await nc.close()
