"""``asyncai config show``: the effective configuration of every channel, and where it came from.

Loads the configuration as ``serve`` would (the file, the environment, the
shared flags) and prints each value with its origin: default, file,
environment, flag, or the channel's section; secrets show as ``(hidden)``.
Exit status 0; 2 for a configuration error (the same one line ``serve``
would print).
"""

from __future__ import annotations

import argparse
import json
import sys

from daemon.config import (
    add_config_arguments,
    effective_settings,
    load_config,
    overrides_from_args,
    settings_json,
    settings_text,
)
from daemon.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # argparse has no public name
    """Add ``asyncai config show`` to the command line."""
    parser = subparsers.add_parser(
        "config",
        help="show the effective configuration",
        description="Inspect the configuration the daemon would run with.",
    )
    commands = parser.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    show = commands.add_parser(
        "show",
        help="every value of every channel, secrets masked, with where it came from",
        description=(
            "Print the effective configuration: the daemon's sections, then each channel's "
            'policy (the global one and each [channel."#name"] section\'s), every value with '
            "its origin (default, file, environment, flag, channel section). Secrets show "
            "as (hidden)."
        ),
    )
    add_config_arguments(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML-like text")
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, overrides_from_args(args))
    except ConfigError as exc:
        print(f"asyncai config show: {exc}", file=sys.stderr)
        return 2
    view = effective_settings(config)
    if args.json:
        print(json.dumps(settings_json(view), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(settings_text(view))
    return 0
