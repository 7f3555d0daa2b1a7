"""``asyncai ask "PROMPT"``: one prompt through the whole stack, the reply on stdout.

Builds the configured executor (MCP servers from the config and
``--mcp-stdio``, wrapped in code mode unless ``tool_mode = "direct"``), runs
one :class:`~daemon.runtime.runs.RunRequest` and prints the reply. Logs go to stderr
as NDJSON (``--verbose`` adds the model and tool call events).

Exit status: 0 with a reply; 1 when the run failed (endpoint unreachable,
refused, retries spent, deadline); 2 when the configuration is wrong. A
failure is one line on stderr, ``asyncai ask: <what to fix>``, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import uuid

from daemon.config import Config, add_config_arguments, load_config, overrides_from_args
from daemon.errors import AsyncaiError, ConfigError
from daemon.logging import configure_logging
from daemon.runtime.runs import Prompt, RunRequest, RunResult

__all__ = ["ask", "register"]

# Monty's worker pool needs the loop a moment after closing (notes/monty.md §10).
_POOL_SETTLE = 0.05


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``asyncai ask`` to the command line."""
    parser = subparsers.add_parser(
        "ask",
        help="run one prompt and print the reply",
        description="Run one prompt through the model and the tools, print the reply.",
    )
    parser.add_argument("prompt", help="the question, in quotes")
    add_config_arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, overrides_from_args(args))
        config.require_model()
    except ConfigError as exc:
        print(f"asyncai ask: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.verbose, secrets=config.secrets())
    try:
        result = asyncio.run(ask(config, args.prompt))
    except AsyncaiError as exc:  # building the executor: a server command that is not there
        print(f"asyncai ask: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:
        print("asyncai ask: interrupted", file=sys.stderr)
        return 130
    if result.status != "done":
        print(f"asyncai ask: {result.error or result.reply}", file=sys.stderr)
        return 1
    print(result.reply)
    return 0


async def ask(config: Config, prompt: str) -> RunResult:
    """Run ``prompt`` once with ``config``; everything it started is closed before returning.

    Unlike the daemon, which answers with the servers that did start, ``ask``
    fails when a server it was given cannot start: the user asked for it.
    """
    from daemon.app import build_mcp_executor, build_tool_executor
    from daemon.model import OpenAiCompatibleBackend

    inner = build_mcp_executor(config)
    executor = build_tool_executor(config, inner=inner)
    try:
        await inner.start()
        failed = getattr(inner, "failed_servers", {})
        if failed:
            return RunResult(reply="", status="failed", error="; ".join(failed.values()))
        backend = OpenAiCompatibleBackend(config, executor)
        try:
            run_id = str(uuid.uuid4())
            request = RunRequest(
                run_id=run_id,
                channel="ask",
                thread_id=f"ask-{run_id}",
                history=[],
                prompts=[Prompt(id=run_id, sender=_user(), text=prompt)],
            )
            return await backend.run(request)
        finally:
            await backend.aclose()
    finally:
        await executor.aclose()
        await asyncio.sleep(_POOL_SETTLE)


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (containers)
        return "user"
