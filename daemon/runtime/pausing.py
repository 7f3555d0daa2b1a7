"""Threads whose run waits for approval: the scheduler's side of it.

:class:`ThreadRun` is the scheduling state of one thread. :class:`PausedRuns`
is mixed into :class:`daemon.runtime.scheduler.Runtime`: a paused run is
handed to the :class:`~daemon.runtime.approvals.ApprovalDesk` and its thread
stays busy without holding a slot (new prompts queue behind it); a decided
request comes back as a :class:`~daemon.runtime.approvals.ResumeJob` that
runs in the thread before what queued.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.approvals import ApprovalDesk, RequestNotPublished, ResumeJob
from daemon.runtime.ports import InboundMessage
from daemon.runtime.runs import RunResult

__all__ = ["PausedRuns", "ThreadKey", "ThreadRun"]

ThreadKey = tuple[str, str]


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


class PausedRuns:
    """Holding, resuming and asking for paused runs (mixed into the Runtime)."""

    _threads: dict[ThreadKey, ThreadRun]
    _ready: deque[ThreadKey]
    _approvals: ApprovalDesk | None
    _pump: Callable[[], None]  # the Runtime's: start runs while slots are free

    async def _paused(
        self,
        thread: ThreadRun,
        prompts: list[InboundMessage],
        run_id: str,
        result: RunResult,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> str | None:
        """Hand a paused run to the desk: stored, asked in the thread. None when it
        waits now; else why it cannot, and the run ends failed with that error.

        The thread is held before the request is published: a decision that
        arrives while the publish still waits for its ack finds the thread
        paused, and the resume job it leaves runs once this run's task ends.
        """
        if self._approvals is None:
            bound.error("runtime.pause_without_approvals")
            return "the run paused for approval, but approvals are not set up"
        thread.paused = True
        try:
            request_id = await self._approvals.paused(
                thread.channel, thread.thread_id, run_id, prompts, result
            )
        except RequestNotPublished as exc:
            thread.paused = False
            bound.error("runtime.request_not_published", error=str(exc))
            return str(exc)
        except Exception as exc:
            thread.paused = False
            bound.exception("runtime.pause_failed")
            return f"the approval request could not be stored ({type(exc).__name__}: {exc})"
        crash_point("approval_published")  # stored, and asked in the thread
        bound.info("runtime.run_paused", request=request_id)
        return None

    def _hold(self, channel: str, thread_id: str) -> None:
        """Keep a thread busy while its run waits for approval (after a restart)."""
        key = (channel, thread_id)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = ThreadRun(channel, thread_id)
        thread.paused = True
        if thread.ready:
            thread.ready = False
            self._ready.remove(key)

    def _schedule_resume(self, job: ResumeJob) -> None:
        """A decided paused run goes on in its thread when a slot is free."""
        crash_point("decision_recorded")  # the desk recorded it (or its expiry) first
        key = (job.channel, job.thread_id)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = ThreadRun(job.channel, job.thread_id)
        thread.paused = False
        thread.resume = job
        if thread.active is None and not thread.ready:
            thread.ready = True
            self._ready.append(key)
        self._pump()
