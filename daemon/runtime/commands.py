"""The commands a person types in a thread: ``!stop``, ``!reset`` and ``!tools``.

:class:`ThreadCommands` is one of the scheduler's collaborators: it acts on
the scheduler's threads through the shared
:class:`~daemon.runtime.context.RunContext`. ``!stop`` cancels the
thread's active run (or ends its run paused for approval, which needs the
right to decide its request, as ``!deny`` does) and drops what queued behind
it; the thread gets a short "stopped" reply. ``!reset`` empties
the REPL of an idle thread, its saved copy included (issue 14); a busy
thread is told to stop first. ``!tools`` lists the tools the thread's channel
offers and its approvals mode (issue 29; the words: :mod:`daemon.runtime.messages`).
Decisions on approvals (``!approve``,
``!deny``) are the :class:`~daemon.runtime.desk.ApprovalDesk`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

from daemon.runtime.context import RunContext
from daemon.runtime.deliver import publish_quietly
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.messages import tools_reply
from daemon.runtime.ports import InboundMessage
from daemon.tools import ThreadKey as ScopeKey  # the context's ThreadKey is the plain tuple
from daemon.tools import ToolDefinition

__all__ = [
    "RESET_COMMAND",
    "STOP_COMMAND",
    "TOOLS_COMMAND",
    "ResetFunction",
    "ThreadCommands",
    "ToolsFunction",
    "ToolsOffered",
]

log = structlog.get_logger("asyncai.runtime")

STOP_COMMAND = "!stop"
"""A message whose whole text is this cancels the thread's active run."""

RESET_COMMAND = "!reset"
"""A message whose whole text is this empties the thread's REPL and its saved copy."""

ResetFunction = Callable[[ScopeKey], Awaitable[bool | None]]
"""Drop a thread's REPL and its stored dump: the code-mode executor's ``reset``.

It is handed the channel with the thread id: ``!reset`` in one channel never
empties the REPL of a thread of the same id in another. It returns False when
the thread's channel has no REPL (its tools are called directly, issue 29)."""

TOOLS_COMMAND = "!tools"
"""A message whose whole text is this lists the channel's tools and its approvals mode."""


@dataclass(frozen=True)
class ToolsOffered:
    """What ``!tools`` says of a channel: its tools in the order offered, its approvals
    mode (``ask``, ``allow``, ``deny``), and its servers not started (yet)."""

    tools: Sequence[ToolDefinition]
    approvals_mode: str
    not_started: Sequence[str] = ()


ToolsFunction = Callable[[str], Awaitable[ToolsOffered]]
"""What ``!tools`` says of a channel (the daemon's lanes)."""

RESET_DONE = "The REPL of this thread was reset: its variables and their saved copy are gone."
RESET_BUSY = "This thread has a run going on: !stop it first, then !reset."
RESET_NONE = "This thread has no REPL to reset (the tools are called directly)."


class ThreadCommands:
    """``!stop`` and ``!reset`` on the scheduler's threads."""

    def __init__(
        self,
        context: RunContext,
        *,
        desk: ApprovalDesk | None,
        reset: ResetFunction | None,
        tools: ToolsFunction | None = None,
    ):
        self._ctx = context
        self._desk = desk
        self._reset = reset
        self._tools = tools

    async def tools(self, message: InboundMessage) -> None:
        """``!tools``: the channel's tools (``server.tool`` and a one-line summary each)
        and its approvals mode, in the thread. Busy or idle, nothing else changes."""
        ctx = self._ctx
        if self._tools is None:
            text = "This daemon cannot list its tools here."
        else:
            try:
                offered = await self._tools(message.channel)
            except Exception as exc:
                log.exception("runtime.tools_failed", channel=message.channel)
                text = f"The tools could not be listed: {type(exc).__name__}: {exc}"
            else:
                text = tools_reply(
                    message.channel, offered.tools, offered.approvals_mode, offered.not_started
                )
        log.info("runtime.tools_listed", channel=message.channel, thread=message.thread)
        await publish_quietly(
            ctx.publisher,
            ctx.options.publish_timeout,
            message.channel,
            message.thread,
            message.id,
            text,
        )

    async def stop(self, message: InboundMessage) -> None:
        """``!stop``: cancel the thread's active run and drop what queued behind it."""
        ctx = self._ctx
        thread = ctx.threads.get((message.channel, message.thread))
        if (
            thread is not None
            and thread.paused
            and self._desk is not None
            and await self._desk.stop(message)
        ):
            log.info("runtime.stop_paused", channel=message.channel, thread=message.thread)
            return  # ended with the stop note (what queued runs after it), or refused
        if thread is None or (thread.active is None and not thread.queued):
            log.info("runtime.stop_ignored", channel=message.channel, thread=message.thread)
            return
        dropped = thread.queued
        thread.queued = []
        ctx.queued_count -= len(dropped)
        for m in dropped:
            ctx.known_ids.discard(m.id)
        if dropped:
            await ctx.store.set_prompt_status([m.id for m in dropped], "failed")
        log.info(
            "runtime.stop",
            channel=message.channel,
            thread=message.thread,
            sender=message.sender,
            dropped_prompts=len(dropped),
        )
        if thread.active is not None:
            thread.stopped_by = message.sender
            thread.active.cancel()
        else:
            # Only queued prompts were waiting: answer them with the stop note here.
            # A decided paused run waiting for a slot keeps its place: its decision
            # stands (a !stop of it, once it runs, cancels it as any run).
            if thread.resume is None:
                ctx.unready(thread)
                ctx.threads.pop((thread.channel, thread.thread_id), None)
            await publish_quietly(
                ctx.publisher,
                ctx.options.publish_timeout,
                thread.channel,
                thread.thread_id,
                dropped[-1].id,
                f"Stopped by {message.sender}: nothing was run.",
            )
        ctx.pump()

    async def reset(self, message: InboundMessage) -> None:
        """``!reset``: drop an idle thread's REPL and its saved dump; say so."""
        ctx = self._ctx
        thread = ctx.threads.get((message.channel, message.thread))
        if thread is not None and (thread.active is not None or thread.paused or thread.queued):
            text = RESET_BUSY
        elif self._reset is None:
            text = RESET_NONE
        else:
            try:
                had_repl = await self._reset(ScopeKey(message.channel, message.thread))
            except Exception as exc:
                log.exception("runtime.reset_failed", channel=message.channel)
                text = f"The REPL could not be reset: {type(exc).__name__}: {exc}"
            else:
                log.info("runtime.reset", channel=message.channel, thread=message.thread)
                text = RESET_NONE if had_repl is False else RESET_DONE
        await publish_quietly(
            ctx.publisher,
            ctx.options.publish_timeout,
            message.channel,
            message.thread,
            message.id,
            text,
        )
