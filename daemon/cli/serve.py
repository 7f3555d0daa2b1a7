"""``asyncai serve``: the daemon (:class:`daemon.app.Daemon`) until SIGTERM or SIGINT.

Exit status 0; 1 when the daemon could not start or the hub went away for good
(systemd restarts it); 2 for a configuration error, such as ``[web] listen``
without the console's tokens file (the message says how to make one).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from daemon.config import Config, add_config_arguments, load_config, overrides_from_args
from daemon.errors import ConfigError

__all__ = ["register", "run_daemon"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``asyncai serve`` to the command line."""
    parser = subparsers.add_parser(
        "serve",
        help="run the daemon: answer prompts on the configured channels",
        description=(
            "Run the daemon: subscribe to the channels of [channels], answer each thread's "
            "prompts through the model and the tools, store transcripts and the audit."
        ),
    )
    add_config_arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, overrides_from_args(args))
        config.require_model()
        if not config.channels.channels:
            where = config.path or "asyncai.toml"
            raise ConfigError(
                f'no channels to answer: set channels = ["#ops"] in [channels] of {where}'
            )
        if config.web.listen is not None:
            from daemon.web import read_tokens

            read_tokens(config.web.tokens)  # nobody could log in: refuse, saying how to fix it
    except ConfigError as exc:
        print(f"asyncai serve: {exc}", file=sys.stderr)
        return 2
    from daemon.logging import configure_logging

    configure_logging(args.verbose, secrets=config.secrets())
    return run_daemon(config)


def run_daemon(config: Config) -> int:
    """Run :class:`Daemon` until SIGTERM/SIGINT, on uvloop when it is installed."""

    from daemon.app import Daemon  # the whole daemon: loaded only by the commands that run it

    async def main() -> int:
        daemon = Daemon(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.request_stop)
        try:
            return await daemon.run()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    try:
        import uvloop
    except ImportError:  # optional: plain asyncio works the same, a little slower
        return asyncio.run(main())
    return uvloop.run(main())
