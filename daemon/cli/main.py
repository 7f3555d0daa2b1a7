"""The `asyncai` command line: assembles the commands and runs the chosen one.

Each subcommand is a module of ``daemon.cli`` that registers itself through a
``register(subparsers)`` function listed in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

__all__ = ["COMMANDS", "build_parser", "main"]

# module paths whose ``register(subparsers)`` adds subcommands, in --help order
COMMANDS: list[str] = [
    "daemon.cli.up",
    "daemon.cli.ask",
    "daemon.cli.serve",
    "daemon.cli.model",
    "daemon.cli.sessions",
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
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    return int(func(args) or 0)
