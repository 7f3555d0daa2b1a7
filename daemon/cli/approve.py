"""What "ask" means for ``asyncai ask``: a question at the terminal, or a refusal.

The ``[approvals]`` policy (:mod:`daemon.approvals.policy`) says of each
mutating call allow, deny or ask. The daemon asks in the thread; a one-shot
command has only its terminal, so:

- ``--approve-all`` turns "ask" into "allow" (:func:`approve_all`); a
  ``deny`` glob or ``mode = "deny"`` still refuses, they never say "ask";
- without a terminal on stdin, "ask" becomes "deny" (:func:`refuse_asks`)
  with a message naming the flag and the settings that would allow the call;
  the model reads it as a ``PermissionError`` and answers;
- with one, a paused run's calls are put to the person on stderr, one
  ``approve server.tool({...})? [y/N]`` line each (:func:`ask_at_terminal`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from daemon.approvals import ApprovalGate, Decision, GatedTool, PendingCall, Verdict
from daemon.approvals.messages import call_text

__all__ = [
    "DENIED_AT_TERMINAL",
    "ReadLine",
    "approve_all",
    "ask_at_terminal",
    "no_terminal_message",
    "read_stdin_line",
    "refuse_asks",
]

DENIED_AT_TERMINAL = "denied at the terminal"
_YES = {"y", "yes"}

ReadLine = Callable[[], Awaitable[str]]
"""Reads one line the person typed; ``""`` at end of input."""


def approve_all(gate: ApprovalGate) -> ApprovalGate:
    """``gate`` with every "ask" turned into "allow" (``--approve-all``); "deny" stays."""

    def judge(definition: GatedTool, arguments: dict[str, Any]) -> Verdict:
        verdict = gate(definition, arguments)
        if verdict.action != "ask":
            return verdict
        return Verdict("allow", f"--approve-all ({verdict.reason})")

    return judge


def no_terminal_message(name: str, config_file: str) -> str:
    """Why ``name`` (``server.tool``) was refused without a terminal, and what allows it."""
    return (
        f"{name} needs approval and asyncai ask has no terminal to ask on: "
        f'pass --approve-all, or set [approvals] mode = "allow" or allow = ["{name}"] '
        f"in {config_file}"
    )


def refuse_asks(gate: ApprovalGate, config_file: str) -> ApprovalGate:
    """``gate`` with every "ask" turned into "deny", saying what would allow the call."""

    def judge(definition: GatedTool, arguments: dict[str, Any]) -> Verdict:
        verdict = gate(definition, arguments)
        if verdict.action != "ask":
            return verdict
        return Verdict("deny", no_terminal_message(definition.qualified_name, config_file))

    return judge


async def read_stdin_line() -> str:
    """One line from stdin without blocking the event loop; ``""`` at end of input.

    The loop watches the descriptor (no thread): a Ctrl-C at the question
    cancels the wait at once, where a thread blocked in ``input()`` would
    hold up the loop's shutdown until Enter. A terminal in canonical mode
    hands over a whole line per read.
    """
    fd = sys.stdin.fileno()
    loop = asyncio.get_running_loop()
    data = b""
    while not data.endswith(b"\n"):
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        chunk = os.read(fd, 4096)
        if not chunk:  # end of input (Ctrl-D): what was typed so far, or nothing
            break
        data += chunk
    return data.decode(errors="replace")


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def ask_at_terminal(
    calls: Sequence[PendingCall],
    *,
    by: str,
    expire_after: float,
    read_line: ReadLine = read_stdin_line,
    out: TextIO | None = None,
) -> dict[int, Decision]:
    """Ask about each call on ``out`` (stderr); the decisions by call id.

    ``y`` or ``yes`` (any case) approves; anything else, end of input
    included, denies. The calls not answered within ``expire_after`` seconds
    (the policy's ``expire_after``) count as expired, as in the daemon.
    """
    stream = out if out is not None else sys.stderr
    decisions: dict[int, Decision] = {}
    started = time.monotonic()
    try:
        async with asyncio.timeout(expire_after):
            for call in calls:
                asked = time.monotonic()
                stream.write(f"approve {call_text(call.tool, call.server, call.arguments)}? [y/N] ")
                stream.flush()
                answer = (await read_line()).strip().lower()
                waited_ms = (time.monotonic() - asked) * 1000
                if answer in _YES:
                    decisions[call.call_id] = Decision(True, by, waited_ms=waited_ms)
                else:
                    decisions[call.call_id] = Decision(
                        False, by, DENIED_AT_TERMINAL, waited_ms, kind="denied"
                    )
    except TimeoutError:
        stream.write("\n")  # the question's line was left open
        reason = f"not answered within {expire_after:g} s"
        waited_ms = (time.monotonic() - started) * 1000
        for call in calls:
            if call.call_id not in decisions:
                decisions[call.call_id] = Decision(
                    False, "expiry", reason, waited_ms, kind="expired"
                )
    return decisions
