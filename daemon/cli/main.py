"""The `asyncai` command line: assembles the commands and runs the chosen one.

Each subcommand is a module of ``daemon.cli`` that registers itself through a
``register(subparsers)`` function listed in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "build_parser", "main"]

# module paths whose ``register(subparsers)`` adds subcommands, in --help order
COMMANDS: list[str] = [
    "daemon.cli.up",
    "daemon.cli.ask",
    "daemon.cli.serve",
    "daemon.cli.model",
    "daemon.cli.sessions",
    "daemon.cli.cluster",
    "daemon.cli.config",
]


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="asyncai",
        description="A code-mode agent daemon: prompts on channels, answers from sandboxed Python.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for path in COMMANDS:
        importlib.import_module(path).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `asyncai` console script."""
    parser = build_parser()
    bad = _not_utf8(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        # Python hands such bytes over as lone surrogates, which every encoder
        # (SQLite, JSON for the model, the hub) refuses later with a traceback.
        print(
            f"asyncai: an argument is not UTF-8 text: {bad}; pass text in UTF-8",
            file=sys.stderr,
        )
        return 2
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    return int(func(args) or 0)


def _not_utf8(argv: Sequence[str]) -> str | None:
    """The first argument that is not UTF-8, shown as its bytes; None when all are."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return repr(os.fsencode(arg)) if _fs_bytes(arg) else ascii(arg)
    return None


def _fs_bytes(arg: str) -> bool:
    """Whether ``arg`` came from bytes the filesystem encoding could not decode."""
    try:
        os.fsencode(arg)
    except UnicodeEncodeError:
        return False
    return True
