"""``asyncai ask "PROMPT"``: one prompt through the whole stack, the reply on stdout.

Builds the configured executor (MCP servers from the config and
``--mcp-stdio``, wrapped in code mode unless ``tool_mode = "direct"``), runs
one :class:`~daemon.runtime.runs.RunRequest` and prints the reply. Logs go to stderr
as NDJSON (``--verbose`` adds the model and tool call events).

Approvals: a call the ``[approvals]`` policy would ask about is put to the
person at the terminal (``approve server.tool({...})? [y/N]`` on stderr) when
stdin is one; without a terminal it is refused, and the model reads what
would allow it. ``--approve-all`` makes such calls without asking (a ``deny``
glob or ``mode = "deny"`` still refuses). See :mod:`daemon.cli.approve`.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from daemon.approvals import ApprovalGate, ApprovalPolicy, Decision, PendingCall
from daemon.cli.approve import approve_all, ask_at_terminal, refuse_asks
from daemon.config import (
    DEFAULT_CONFIG_PATH,
    Config,
    add_config_arguments,
    load_config,
    overrides_from_args,
)
from daemon.errors import AsyncaiError, ConfigError
from daemon.logging import configure_logging
from daemon.runtime.runs import Prompt, RunRequest, RunResult

__all__ = ["Terminal", "ask", "register"]

# Monty's worker pool needs the loop a moment after closing (notes/monty.md §10).
_POOL_SETTLE = 0.05

Terminal = Callable[[Sequence[PendingCall]], Awaitable[Mapping[int, Decision]]]
"""Puts a paused run's calls to the person at the terminal; the decisions by call id."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``asyncai ask`` to the command line."""
    parser = subparsers.add_parser(
        "ask",
        help="run one prompt and print the reply",
        description="Run one prompt through the model and the tools, print the reply. "
        "A call that [approvals] says to ask about is put to you on stderr when stdin is "
        "a terminal, and refused when it is not.",
    )
    parser.add_argument("prompt", help="the question, in quotes")
    parser.add_argument(
        "--approve-all",
        action="store_true",
        help="make every call [approvals] would ask about without asking; a deny glob "
        'or mode = "deny" still refuses',
    )
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
    terminal: Terminal | None = None
    if sys.stdin.isatty():
        terminal = partial(ask_at_terminal, by=_user(), expire_after=config.approvals.expire_after)
    try:
        result = asyncio.run(
            ask(config, args.prompt, approve_all_calls=args.approve_all, terminal=terminal)
        )
    except AsyncaiError as exc:  # building the executor: a server command that is not there
        print(f"asyncai ask: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:
        print("asyncai ask: interrupted", file=sys.stderr)
        return 130
    if result.status != "done":
        print(f"asyncai ask: {result.error or result.reply}", file=sys.stderr)
        return 1
    # A reply is Unicode, but a terminal may not take every character: escape, never crash.
    sys.stdout.write(result.reply.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
    return 0


def approval_gate(
    config: Config, *, approve_all_calls: bool = False, terminal: bool = False
) -> ApprovalGate:
    """The ``[approvals]`` policy as ``ask`` applies it: "ask" is allowed with
    ``--approve-all``, asked at a terminal, refused without one."""
    policy = ApprovalPolicy.from_config(config.approvals)
    gate: ApprovalGate = policy.verdict
    if approve_all_calls:
        return approve_all(gate)
    if terminal:
        return gate
    return refuse_asks(gate, str(config.path or DEFAULT_CONFIG_PATH))


async def ask(
    config: Config,
    prompt: str,
    *,
    approve_all_calls: bool = False,
    terminal: Terminal | None = None,
) -> RunResult:
    """Run ``prompt`` once with ``config``; everything it started is closed before returning.

    Unlike the daemon, which answers with the servers that did start, ``ask``
    fails when a server it was given cannot start: the user asked for it.
    A run that pauses for approval is put to ``terminal`` and resumed with its
    answers, as often as it pauses; without a ``terminal`` it never pauses
    (see :func:`approval_gate`).
    """
    from daemon.lanes import build_mcp_executor, build_tool_executor
    from daemon.model import OpenAiCompatibleBackend

    gate = approval_gate(config, approve_all_calls=approve_all_calls, terminal=terminal is not None)
    inner = build_mcp_executor(config)
    executor = build_tool_executor(config, inner=inner, gate=gate)
    try:
        await inner.start()
        failed = getattr(inner, "failed_servers", {})
        if failed:
            return RunResult(reply="", status="failed", error="; ".join(failed.values()))
        backend = OpenAiCompatibleBackend(config, executor, gate=gate)
        try:
            run_id = str(uuid.uuid4())
            request = RunRequest(
                run_id=run_id,
                channel="ask",
                thread_id=f"ask-{run_id}",
                history=[],
                prompts=[Prompt(id=run_id, sender=_user(), text=prompt)],
            )
            result = await backend.run(request)
            while result.paused is not None and terminal is not None:
                paused = result.paused
                decisions = await terminal(paused.pause.calls)
                result = await backend.resume(request, paused.conversation, paused.pause, decisions)
            return result
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
