"""Threads and runs: which prompt starts which run, and when.

The runtime is the scheduler between the channel and the backend. It does no
I/O of its own: the store, the channel (only ``publish`` and the own nick) and
the run function are injected as the small protocols below, so
``daemon.app`` wires the real ones and tests use in-memory fakes.

Rules (DESIGN.md, "Runtime: threads and runs"):

- A thread is ``(channel, thread id)``; at most one run per thread at a time.
- Prompts that arrive while a thread's run is active (or while it waits for a
  slot) queue, and are coalesced into ONE follow-up run, in arrival order.
  The follow-up carries the same thread id, so the backend gives it the same
  REPL scope.
- At most ``max_concurrent_runs`` runs at once. Threads that are ready wait in
  a FIFO of thread keys; no task exists for them until a slot frees, so a
  burst costs memory for the prompts only. That memory is bounded too: when
  ``max_queued_prompts`` prompts wait, :meth:`Runtime.submit` blocks until a
  run takes some, so the intake stops reading the channel; the hub keeps the
  rest and the client delivers them later (a slow subscriber is resumed with
  ``since``), and nothing is lost because the cursor only moves past
  recorded prompts.
- Every prompt is recorded before anything else happens to it; the cursor
  moves only after that. A reply is committed with the run's end (its prompts
  done), then published in the thread (:mod:`daemon.runtime.deliver`).
- ``!stop`` in a thread cancels its active run and drops what was queued
  behind it; the thread gets a short "stopped" reply. ``!reset`` empties an
  idle thread's REPL and its saved copy (:mod:`daemon.runtime.commands`).
- Shared channels: only messages that mention the nick, and threads the
  daemon already takes part in (a thread it has recorded prompts of).
  The daemon never answers its own messages; an allow-list of senders, when
  configured, ignores everyone else with a log line.
- Every run has a deadline (``max_run_seconds``). A failed run gets a short
  error reply and a failed run row; the runtime goes on. A run that outlives
  every bound that should have ended it makes :meth:`Runtime.wedged` true
  (the daemon stops its watchdog pings then).
- Per-sender limits (:mod:`daemon.runtime.limits`), when configured, are
  checked as a run starts: a sender over one gets a one-line reply instead.
  Every run's tokens reach its row as they are spent, whatever ends the run
  (:mod:`daemon.runtime.usage`).
- :meth:`Runtime.shutdown`: stop taking prompts, give active runs a grace
  period, cancel the rest and record them interrupted. Their prompts go back
  to ``queued``, so the next start answers them (no prompt is lost).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.approvals import ApprovalDesk, ResumeJob
from daemon.runtime.commands import RESET_COMMAND, STOP_COMMAND, ResetFunction, ThreadCommands
from daemon.runtime.complete import complete
from daemon.runtime.deliver import deliver, publish_quietly, publish_unacked
from daemon.runtime.interrupted import report_all_interrupted
from daemon.runtime.limits import SenderLimiter, start_within_limits
from daemon.runtime.pausing import PausedRuns, ThreadKey, ThreadRun
from daemon.runtime.ports import (
    InboundMessage,
    PromptStatus,
    RecordOutcome,
    RunFunction,
    RuntimeCounts,
    RuntimeOptions,
    RuntimePublisher,
    RuntimeStore,
    mentions,
    reply_client_id,
)
from daemon.runtime.runs import Prompt, RunRequest, RunResult
from daemon.runtime.usage import TokenMeter, metering

# The ports are re-exported: callers and tests import them from here too.
__all__ = [
    "RESET_COMMAND",
    "STOP_COMMAND",
    "InboundMessage",
    "PromptStatus",
    "RecordOutcome",
    "RunFunction",
    "Runtime",
    "RuntimeCounts",
    "RuntimeOptions",
    "RuntimePublisher",
    "RuntimeStore",
    "mentions",
    "reply_client_id",
]

log = structlog.get_logger("asyncai.runtime")

# How long past its deadline (and the reply's publish_timeout) a run may still be
# active before the runtime counts as wedged: room for the store's own waits.
WEDGE_SLACK = 60.0


class Runtime(PausedRuns, ThreadCommands):
    """Schedules runs per thread, bounded globally; owns every run task."""

    def __init__(
        self,
        *,
        store: RuntimeStore,
        publisher: RuntimePublisher,
        run: RunFunction,
        options: RuntimeOptions | None = None,
        approvals: ApprovalDesk | None = None,
        reset: ResetFunction | None = None,
        limiter: SenderLimiter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._store = store
        self._limiter = limiter
        self._clock = clock
        self._reset = reset
        self._approvals = approvals
        if approvals is not None:
            approvals.bind(schedule=self._schedule_resume, hold=self._hold)
        self._publisher = publisher
        self._run = run
        self._options = options or RuntimeOptions()
        self._threads: dict[ThreadKey, ThreadRun] = {}
        self._ready: deque[ThreadKey] = deque()
        self._queued_count = 0
        self._known_ids: set[str] = set()  # prompt ids queued or in a run (replays are skipped)
        self._tasks: set[asyncio.Task[None]] = set()
        self._space = asyncio.Event()  # set while fewer than max_queued_prompts wait
        self._space.set()
        self._closing = False

    # ---- intake ---------------------------------------------------------------------

    @property
    def options(self) -> RuntimeOptions:
        """The limits this runtime enforces."""
        return self._options

    @property
    def closing(self) -> bool:
        """True once :meth:`shutdown` began: no prompt is taken any more."""
        return self._closing

    async def submit(self, message: InboundMessage) -> bool:
        """Take one inbound channel message; True when it became (part of) a run.

        Messages must be submitted in channel order by one intake task: the
        cursor advances with each one. Blocks while ``max_queued_prompts``
        prompts wait (back-pressure on the channel). Returns False for
        everything it ignores, each with a reason in the log.
        """
        if self._closing:
            return False  # not recorded, cursor not advanced: the next start sees it again
        nick = self._publisher.nick
        if message.sender == nick:
            await self._store.advance_cursor(message.channel, message.id)
            return False
        allowed = self._options.allowed_senders
        if allowed is not None and message.sender not in allowed:
            log.info(
                "runtime.sender_ignored",
                channel=message.channel,
                sender=message.sender,
                message_id=message.id,
                reason="not in allowed_senders",
            )
            await self._store.advance_cursor(message.channel, message.id)
            return False
        if self._approvals is not None and await self._approvals.handle(message):
            await self._store.advance_cursor(message.channel, message.id)
            return False
        if message.text.strip() == RESET_COMMAND:
            await self._reset_thread(message)
            await self._store.advance_cursor(message.channel, message.id)
            return False
        if message.text.strip() == STOP_COMMAND:
            await self._stop_thread(message)
            await self._store.advance_cursor(message.channel, message.id)
            return False
        if not await self._addressed(message, nick):
            await self._store.advance_cursor(message.channel, message.id)
            return False
        await self._wait_for_capacity()
        if self._closing:
            return False
        outcome = await self._store.record_prompt(message)
        crash_point("prompt_recorded")
        if outcome == "finished" or message.id in self._known_ids:
            return False  # a replay of something answered or already scheduled
        self._enqueue(message)
        return True

    async def _addressed(self, message: InboundMessage, nick: str) -> bool:
        """Outside shared channels everything is; inside, mentions and known threads."""
        if message.channel not in self._options.shared_channels:
            return True
        if mentions(message.text, nick):
            return True
        return await self._store.knows_thread(message.channel, message.thread)

    async def recover(self) -> int:
        """Schedule prompts recorded but not done (after a crash or restart); returns how many.

        A prompt whose cut-off run had started a mutating call is not run
        again: its thread gets the interrupted notice instead
        (:func:`daemon.runtime.interrupted.interrupted_notice`) and the prompt
        is marked failed once the hub acked the notice. If the notice cannot
        be published the prompt stays pending, not run, so the next start
        posts it again (its ``client_id`` keeps a repeat from doubling).

        Before any prompt is scheduled, the approval desk holds the threads whose
        run waits for a decision and hands back the decided ones (which go first):
        a prompt queued behind a paused run never overtakes it. First of all, the
        replies committed but not acked are published (:func:`publish_unacked`).
        """
        await publish_unacked(self._store, self._publisher, self._options.publish_timeout)
        pending = await self._store.pending_prompts()  # the store's own recovery first
        held = await report_all_interrupted(
            self._store, self._publisher, self._options.publish_timeout
        )
        if self._approvals is not None:
            await self._approvals.start()
        count = 0
        for message in pending:
            if message.id in self._known_ids or message.id in held:
                continue
            self._enqueue(message, pump=False)  # whole threads first, so they coalesce
            count += 1
        self._pump()
        if count:
            log.info("runtime.recovered", prompts=count)
        return count

    def counts(self) -> RuntimeCounts:
        """Active runs, prompts waiting for a run, threads waiting for a slot."""
        return RuntimeCounts(
            active_runs=sum(1 for t in self._threads.values() if t.active is not None),
            queued_prompts=self._queued_count,
            waiting_threads=len(self._ready),
        )

    def wedged(self, *, slack: float = WEDGE_SLACK) -> bool:
        """Whether a run is still active long after everything bounding it should have
        ended it (its deadline, the reply's publish timeout, plus ``slack``)."""
        bound = self._options.max_run_seconds + self._options.publish_timeout + slack
        now = self._clock()
        return any(
            t.active is not None and now - t.started_at > bound for t in self._threads.values()
        )

    # ---- scheduling -----------------------------------------------------------------

    def _enqueue(self, message: InboundMessage, *, pump: bool = True) -> None:
        key = (message.channel, message.thread)
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = ThreadRun(message.channel, message.thread)
        thread.queued.append(message)
        self._queued_count += 1
        self._known_ids.add(message.id)
        # a thread whose run waits for approval stays busy: this waits behind it
        if thread.active is None and not thread.ready and not thread.paused:
            thread.ready = True
            self._ready.append(key)
        if pump:
            self._pump()

    def _pump(self) -> None:
        """Start runs while slots are free and threads are ready."""
        active = sum(1 for t in self._threads.values() if t.active is not None)
        while not self._closing and self._ready and active < self._options.max_concurrent_runs:
            key = self._ready.popleft()
            thread = self._threads[key]
            thread.ready = False
            thread.stopped_by = None
            job, thread.resume = thread.resume, None
            if job is not None:  # a decided paused run goes first; the queue waits
                prompts = job.prompts
            else:
                prompts, thread.queued = thread.queued, []
                self._queued_count -= len(prompts)
            thread.active_prompts = prompts
            task = asyncio.create_task(self._run_thread(thread, prompts, job), name=f"run {key}")
            thread.active = task
            thread.started_at = self._clock()
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            active += 1
        if self._closing or self._queued_count < self._options.max_queued_prompts:
            self._space.set()
        else:
            self._space.clear()

    async def _wait_for_capacity(self) -> None:
        while not self._closing and self._queued_count >= self._options.max_queued_prompts:
            self._space.clear()
            await self._space.wait()

    async def _run_thread(
        self, thread: ThreadRun, prompts: list[InboundMessage], job: ResumeJob | None = None
    ) -> None:
        """One run of one thread (or a paused one going on), from the run row to the
        acked reply; then the follow-up."""
        run_id = job.run_id if job is not None else str(uuid.uuid4())
        ids = [m.id for m in prompts]
        bound = log.bind(run_id=run_id, channel=thread.channel, thread=thread.thread_id)
        try:
            await self._execute(thread, prompts, run_id, ids, bound, job)
        except Exception:
            # The store or the channel failed outside the run itself. The prompts
            # stay recorded as not done, so the next start answers them.
            bound.exception("runtime.run_crashed")
        finally:
            for m in prompts:
                self._known_ids.discard(m.id)
            thread.active = None
            thread.active_prompts = []
            key = (thread.channel, thread.thread_id)
            after = thread.after_run(closing=self._closing)
            if after == "ready" and not thread.ready:
                thread.ready = True
                self._ready.append(key)
            elif after == "idle":
                self._threads.pop(key, None)
            self._pump()

    async def _execute(
        self,
        thread: ThreadRun,
        prompts: list[InboundMessage],
        run_id: str,
        ids: list[str],
        bound: structlog.typing.FilteringBoundLogger,
        job: ResumeJob | None = None,
    ) -> None:
        if job is None:
            prompts = await start_within_limits(
                self._limiter,
                self._store,
                self._publisher,
                self._options,
                run_id,
                thread.channel,
                thread.thread_id,
                prompts,
                bound,
            )
            if not prompts:
                return  # every sender of the run is over a limit: no run
            ids = [m.id for m in prompts]
            crash_point("run_started")
            bound.info("runtime.run_started", prompts=ids)
        else:
            # Taken before the run goes on: a crash from here on is an interruption
            # (recovery's rule), never a second resume that repeats approved calls.
            assert self._approvals is not None
            await self._approvals.resumed(job.request_id)
            crash_point("resume_started")
            bound.info("runtime.run_resumed", request=job.request_id, outcome=job.outcome)
        deadline: asyncio.Timeout | None = None
        meter = TokenMeter(self._store, run_id)  # tokens on the run row as they are spent
        try:
            deadline = asyncio.timeout(self._options.max_run_seconds)
            with metering(meter):
                if job is not None:
                    async with deadline:
                        result = await job.run()
                else:
                    history = await self._store.history(thread.channel, thread.thread_id)
                    request = RunRequest(
                        run_id=run_id,
                        channel=thread.channel,
                        thread_id=thread.thread_id,
                        history=history,
                        prompts=[Prompt(m.id, m.sender, m.text) for m in prompts],
                    )
                    async with deadline:
                        result = await self._run(request)
            crash_point("model_answered")
        except asyncio.CancelledError:
            # Cancelled by !stop or by shutdown: only the model run may be cut off.
            # Recording it (and the stop note) runs to its end even if another
            # cancellation arrives; then the cancel goes on. Its tokens count.
            stopped_by = thread.stopped_by
            interrupted = RunResult(
                reply="",
                metrics=meter.metrics(),
                status="interrupted",
                error=f"stopped by {stopped_by}" if stopped_by else "daemon shutting down",
            )
            if stopped_by is not None:
                await complete(self._store.finish_run(run_id, interrupted, ids, "failed"))
                await complete(
                    self._publish_quietly(thread, prompts[-1], f"Stopped by {stopped_by}.")
                )
                bound.info("runtime.run_stopped", stopped_by=stopped_by)
                # The !stop consumed this cancellation; the task ends normally.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                return
            # Shutdown: back to queued so the next start answers them (unless the
            # run started a mutating call: recovery then posts the interrupted notice).
            await complete(self._store.finish_run(run_id, interrupted, ids, "queued"))
            bound.info("runtime.run_interrupted")
            raise
        except TimeoutError as exc:
            error = (
                f"run deadline of {self._options.max_run_seconds:g} s exceeded"
                if deadline is not None and deadline.expired()
                else f"TimeoutError: {exc}"
            )
            result = RunResult(reply="", status="failed", error=error)
        except Exception as exc:
            # Anything the backend raises (BackendError, a bug) fails this run only.
            bound.exception("runtime.run_error")
            result = RunResult(reply="", status="failed", error=f"{type(exc).__name__}: {exc}")

        if result.status == "paused":
            problem = await complete(self._paused(thread, prompts, run_id, result, bound))
            if problem is None:
                return
            result = RunResult(reply="", metrics=result.metrics, status="failed", error=problem)
        try:
            # The model answered: the reply goes out and the run is recorded, whatever
            # is cancelled meanwhile (both are bounded: publish_timeout, the store's).
            await complete(self._deliver(thread, prompts, run_id, ids, result, bound))
        except asyncio.CancelledError:
            if thread.stopped_by is None:
                raise  # shutdown: the run is recorded; let the cancel go on
            bound.info("runtime.stop_after_answer", stopped_by=thread.stopped_by)
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()

    async def _deliver(
        self,
        thread: ThreadRun,
        prompts: list[InboundMessage],
        run_id: str,
        ids: list[str],
        result: RunResult,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> None:
        await deliver(
            self._store,
            self._publisher,
            self._options,
            thread.channel,
            thread.thread_id,
            prompts,
            run_id,
            ids,
            result,
            bound,
        )
        if self._approvals is not None:
            self._approvals.finished(run_id)

    async def _publish_quietly(
        self, thread: ThreadRun, last_prompt: InboundMessage, text: str
    ) -> None:
        await publish_quietly(
            self._publisher,
            self._options.publish_timeout,
            thread.channel,
            thread.thread_id,
            last_prompt.id,
            text,
        )

    # ---- shutdown -------------------------------------------------------------------

    async def shutdown(self, grace: float | None = None) -> None:
        """Stop taking prompts, wait up to ``grace`` seconds, cancel and record the rest."""
        self._closing = True
        self._ready.clear()
        self._space.set()  # release an intake blocked on back-pressure
        grace = self._options.shutdown_grace if grace is None else grace
        runs = [t.active for t in self._threads.values() if t.active is not None]
        if runs:
            log.info("runtime.shutdown_waiting", active_runs=len(runs), grace_seconds=grace)
            _, pending = await asyncio.wait(runs, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("runtime.shutdown_cancelled", runs=len(pending))
        await _drain(self._tasks)


async def _drain(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Wait for owned tasks to end; cancelled ones are expected here."""
    pending = list(tasks)
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
