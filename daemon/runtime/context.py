"""What the scheduler shares with its collaborators: the ports, the options and the thread table.

:class:`daemon.runtime.scheduler.Runtime` is assembled from collaborators:
the thread commands (:mod:`daemon.runtime.commands`), the end of a run
(:mod:`daemon.runtime.deliver`) and the per-sender limits
(:mod:`daemon.runtime.limits`) are handed its one :class:`RunContext`: the
store, the publisher and the options, and the table of threads (a
:class:`ThreadRun` each), the ready FIFO and the counts of what waits. None
of them keeps a copy of that state. The approval desk
(:mod:`daemon.runtime.desk`), built before the runtime (it is the tools'
approval gate too), touches no thread itself: it hands the scheduler a
:class:`ResumeJob`, or asks it to hold a thread, through two hooks.

A run in progress is named by a :class:`Run`: its id, its thread, its
prompts and its log, what the helpers that record and answer it are given.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog

from daemon.runtime.ports import InboundMessage, RuntimeOptions, RuntimePublisher, RuntimeStore
from daemon.runtime.runs import RunResult

__all__ = ["Outcome", "ResumeJob", "Run", "RunContext", "ThreadKey", "ThreadRun"]

ThreadKey = tuple[str, str]
"""``(channel, thread id)``: a thread of the scheduler."""

Outcome = Literal["approved", "denied", "expired", "stopped"]
"""How a request of a paused run ended: what its :class:`ResumeJob` goes on with."""


@dataclass(frozen=True)
class ResumeJob:
    """A decided request, handed by the desk to the scheduler to run in its thread."""

    request_id: str
    run_id: str
    channel: str
    thread_id: str
    prompts: list[InboundMessage]
    outcome: Outcome
    run: Callable[[], Awaitable[RunResult]]


@dataclass
class ThreadRun:
    """Scheduling state of one thread; dropped as soon as it is idle."""

    channel: str
    thread_id: str
    queued: list[InboundMessage] = field(default_factory=list)
    active: asyncio.Task[None] | None = None
    active_prompts: list[InboundMessage] = field(default_factory=list)
    stopped_by: str | None = None  # the sender of the !stop that cancelled the active run
    ready: bool = False  # waiting in the ready FIFO for a slot
    paused: bool = False  # a run waits for approval: the thread stays busy, holds no slot
    resume: ResumeJob | None = None  # a decided paused run, to run before what queued
    started_at: float = 0.0  # the runtime's clock when the active run's task began

    def after_run(self, *, closing: bool) -> Literal["ready", "wait", "idle"]:
        """What the thread does once its run ended: run again ("ready": a decided paused
        run, or prompts queued), wait for a decision or the shutdown ("wait"), or
        nothing, so it is dropped ("idle").

        A decision taken while another run of the thread was active (or while the
        request's own publish waited for its ack) is never dropped: its resume
        job keeps the thread.
        """
        if self.paused:
            return "wait"  # what queued waits for the decision (then a resume job)
        if self.resume is None and not self.queued:
            return "idle"
        return "wait" if closing else "ready"


@dataclass(frozen=True)
class Run:
    """One run of a thread as the helpers that record and answer it need it."""

    run_id: str
    channel: str
    thread_id: str
    prompts: list[InboundMessage]
    log: structlog.typing.FilteringBoundLogger

    @property
    def prompt_ids(self) -> list[str]:
        """The ids of its prompts, in order."""
        return [m.id for m in self.prompts]


@dataclass
class RunContext:
    """The scheduler's state and ports, shared by reference with its collaborators.

    ``pump`` is the scheduler's: start runs while slots are free and threads
    are ready. The counts and the table change only on the event loop's
    thread, between awaits.
    """

    store: RuntimeStore
    publisher: RuntimePublisher
    options: RuntimeOptions
    pump: Callable[[], None]
    threads: dict[ThreadKey, ThreadRun] = field(default_factory=dict)
    ready: deque[ThreadKey] = field(default_factory=deque)
    queued_count: int = 0
    known_ids: set[str] = field(default_factory=set)  # queued or in a run (replays skipped)
    closing: bool = False

    def thread(self, channel: str, thread_id: str) -> ThreadRun:
        """The thread's state, created when it has none."""
        key = (channel, thread_id)
        found = self.threads.get(key)
        if found is None:
            found = self.threads[key] = ThreadRun(channel, thread_id)
        return found

    def make_ready(self, thread: ThreadRun) -> None:
        """Put the thread in the ready FIFO (once)."""
        if not thread.ready:
            thread.ready = True
            self.ready.append((thread.channel, thread.thread_id))

    def unready(self, thread: ThreadRun) -> None:
        """Take the thread out of the ready FIFO, if it is there."""
        if thread.ready:
            thread.ready = False
            self.ready.remove((thread.channel, thread.thread_id))
