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
- At most ``max_concurrent_runs`` runs at once, and at most a channel's own
  ``max_concurrent_runs`` of that channel's (issue 29: a cap within the
  total, not a reservation; a thread of a channel at its cap waits in its
  place while the threads behind it of other channels start). Threads that
  are ready wait in a FIFO of thread keys; no task exists for them until a slot frees, so a
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
- A run that pauses for approval goes to the desk (:mod:`daemon.runtime.desk`);
  its thread stays busy without holding a slot (new prompts queue behind
  it), and a decided request comes back as a resume job that runs in the
  thread before what queued.
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

The runtime is assembled from collaborators (the commands, the desk, the end
of a run, the limits) that share its :class:`~daemon.runtime.context.RunContext`:
the ports, the options and the table of threads.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable

import structlog

from daemon.approvals import parse_decision
from daemon.crashpoints import crash_point
from daemon.runtime.commands import (
    RESET_COMMAND,
    STOP_COMMAND,
    TOOLS_COMMAND,
    ResetFunction,
    ThreadCommands,
    ToolsFunction,
)
from daemon.runtime.complete import complete
from daemon.runtime.context import ResumeJob, Run, RunContext, ThreadRun
from daemon.runtime.deliver import deliver, publish_quietly, publish_unacked
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.intake import CUT_NOTICE
from daemon.runtime.interrupted import report_all_interrupted
from daemon.runtime.limits import SenderLimiter, start_within_limits
from daemon.runtime.ports import (
    InboundMessage,
    RunFunction,
    RuntimeCounts,
    RuntimeOptions,
    RuntimePublisher,
    RuntimeStore,
    mentions,
)
from daemon.runtime.runs import Prompt, RunRequest, RunResult, opens_thread
from daemon.runtime.usage import TokenMeter, metering

__all__ = ["WEDGE_SLACK", "Runtime"]

log = structlog.get_logger("asyncai.runtime")

# How long past its deadline (and the reply's publish_timeout) a run may still be
# active before the runtime counts as wedged: room for the store's own waits.
WEDGE_SLACK = 60.0


class Runtime:
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
        limiters: Callable[[str], SenderLimiter | None] | None = None,
        tools: ToolsFunction | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._ctx = RunContext(store, publisher, options or RuntimeOptions(), pump=self._pump)
        # a channel's limiter (issue 29: its own limits, counted in it), else the one
        self._limiters = limiters if limiters is not None else (lambda _channel: limiter)
        self._clock = clock
        self._approvals = approvals
        if approvals is not None:
            approvals.bind(schedule=self._schedule_resume, hold=self._hold)
        self._commands = ThreadCommands(self._ctx, desk=approvals, reset=reset, tools=tools)
        self._run = run
        self._tasks: set[asyncio.Task[None]] = set()
        self._space = asyncio.Event()  # set while fewer than max_queued_prompts wait
        self._space.set()

    # ---- intake ---------------------------------------------------------------------

    @property
    def options(self) -> RuntimeOptions:
        """The limits this runtime enforces."""
        return self._ctx.options

    @property
    def closing(self) -> bool:
        """True once :meth:`shutdown` began: no prompt is taken any more."""
        return self._ctx.closing

    async def submit(self, message: InboundMessage) -> bool:
        """Take one inbound channel message; True when it became (part of) a run.

        Messages must be submitted in channel order by one intake task: the
        cursor advances with each one. Blocks while ``max_queued_prompts``
        prompts wait (back-pressure on the channel). Returns False for
        everything it ignores, each with a reason in the log.
        """
        if self._ctx.closing:
            return False  # not recorded, cursor not advanced: the next start sees it again
        nick = self._ctx.publisher.nick
        if message.sender == nick:  # its own reply, read back: nothing to redo after a crash
            await self._ctx.store.pass_over(message.channel, message.id)
            return False
        allowed = self._ctx.options.allowed_senders
        if allowed is not None and message.sender not in allowed:
            log.info(
                "runtime.sender_ignored",
                channel=message.channel,
                sender=message.sender,
                message_id=message.id,
                reason="not in allowed_senders",
            )
            await self._ctx.store.pass_over(message.channel, message.id)
            return False
        command = message.text.strip()
        if self._is_command(command) and await self._ctx.store.command_replayed(
            message.channel, message.id
        ):
            # read again after a restart (the cursor had stayed behind it): done already
            log.info(
                "runtime.command_replayed",
                channel=message.channel,
                thread=message.thread,
                message_id=message.id,
            )
            await self._ctx.store.pass_over(message.channel, message.id)
            return False
        if self._approvals is not None and await self._approvals.handle(message):
            await self._ctx.store.advance_cursor(message.channel, message.id)
            return False
        if command == RESET_COMMAND:
            await self._commands.reset(message)
            await self._ctx.store.advance_cursor(message.channel, message.id)
            return False
        if command == STOP_COMMAND:
            await self._commands.stop(message)
            await self._ctx.store.advance_cursor(message.channel, message.id)
            return False
        if command == TOOLS_COMMAND:
            await self._commands.tools(message)
            await self._ctx.store.advance_cursor(message.channel, message.id)
            return False
        if not await self._addressed(message, nick):
            await self._ctx.store.pass_over(message.channel, message.id)
            return False
        if message.cut:  # half a text is not what its sender asked: never run it as such
            log.warning(
                "runtime.split_text_cut",
                channel=message.channel,
                thread=message.thread,
                sender=message.sender,
                message_id=message.id,
            )
            await publish_quietly(
                self._ctx.publisher,
                self._ctx.options.publish_timeout,
                message.channel,
                message.thread,
                message.id,
                CUT_NOTICE,
            )
            await self._ctx.store.advance_cursor(message.channel, message.id)
            return False
        await self._wait_for_capacity()
        if self._ctx.closing:
            return False
        outcome = await self._ctx.store.record_prompt(message)
        crash_point("prompt_recorded")
        if outcome == "finished" or message.id in self._ctx.known_ids:
            return False  # a replay of something answered or already scheduled
        self._enqueue(message)
        return True

    def _is_command(self, command: str) -> bool:
        """Whether ``command`` (a message's stripped text) is a command this runtime acts
        on rather than a prompt."""
        if not command.startswith("!"):  # every command does: a prompt costs one check
            return False
        if command in (RESET_COMMAND, STOP_COMMAND, TOOLS_COMMAND):
            return True
        return self._approvals is not None and parse_decision(command) is not None

    async def _addressed(self, message: InboundMessage, nick: str) -> bool:
        """Outside shared channels everything is; inside, mentions and known threads."""
        if message.channel not in self._ctx.options.shared_channels:
            return True
        if mentions(message.text, nick):
            return True
        return await self._ctx.store.knows_thread(message.channel, message.thread)

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
        await publish_unacked(
            self._ctx.store, self._ctx.publisher, self._ctx.options.publish_timeout
        )
        pending = await self._ctx.store.pending_prompts()  # the store's own recovery first
        held = await report_all_interrupted(
            self._ctx.store, self._ctx.publisher, self._ctx.options.publish_timeout
        )
        if self._approvals is not None:
            await self._approvals.start()
        count = 0
        for message in pending:
            if message.id in self._ctx.known_ids or message.id in held:
                continue
            self._enqueue(message, pump=False)  # whole threads first, so they coalesce
            count += 1
        self._pump()
        if count:
            log.info("runtime.recovered", prompts=count)
        return count

    def counts(self) -> RuntimeCounts:
        """Active runs, prompts waiting for a run, threads waiting for a slot."""
        ctx = self._ctx
        return RuntimeCounts(
            active_runs=sum(1 for t in ctx.threads.values() if t.active is not None),
            queued_prompts=ctx.queued_count,
            waiting_threads=len(ctx.ready),
        )

    def wedged(self, *, slack: float = WEDGE_SLACK) -> bool:
        """Whether a run is still active long after everything bounding it should have
        ended it (its deadline, the reply's publish timeout, plus ``slack``)."""
        bound = self._ctx.options.max_run_seconds + self._ctx.options.publish_timeout + slack
        now = self._clock()
        return any(
            t.active is not None and now - t.started_at > bound for t in self._ctx.threads.values()
        )

    # ---- scheduling -----------------------------------------------------------------

    def _enqueue(self, message: InboundMessage, *, pump: bool = True) -> None:
        ctx = self._ctx
        thread = ctx.thread(message.channel, message.thread)
        thread.queued.append(message)
        ctx.queued_count += 1
        ctx.known_ids.add(message.id)
        # a thread whose run waits for approval stays busy: this waits behind it
        if thread.active is None and not thread.paused:
            ctx.make_ready(thread)
        if pump:
            self._pump()

    def _pump(self) -> None:
        """Start runs while slots are free and threads are ready."""
        ctx = self._ctx
        active = sum(1 for t in ctx.threads.values() if t.active is not None)
        caps = ctx.options.channel_max_concurrent
        running = Counter(t.channel for t in ctx.threads.values() if t.active is not None)
        while not ctx.closing and ctx.ready and active < self._ctx.options.max_concurrent_runs:
            if not caps:
                key = ctx.ready.popleft()
            else:
                # the first ready thread whose channel is under its cap
                index = next(
                    (
                        i
                        for i, (channel, _) in enumerate(ctx.ready)
                        if running[channel] < caps.get(channel, active + 1)
                    ),
                    None,
                )
                if index is None:
                    break  # every ready thread's channel is at its cap
                key = ctx.ready[index]
                del ctx.ready[index]
                running[key[0]] += 1
            thread = ctx.threads[key]
            thread.ready = False
            thread.stopped_by = None
            job, thread.resume = thread.resume, None
            if job is not None:  # a decided paused run goes first; the queue waits
                prompts = job.prompts
            else:
                prompts, thread.queued = thread.queued, []
                ctx.queued_count -= len(prompts)
            thread.active_prompts = prompts
            task = asyncio.create_task(self._run_thread(thread, prompts, job), name=f"run {key}")
            thread.active = task
            thread.started_at = self._clock()
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            active += 1
        if ctx.closing or ctx.queued_count < self._ctx.options.max_queued_prompts:
            self._space.set()
        else:
            self._space.clear()

    async def _wait_for_capacity(self) -> None:
        while (
            not self._ctx.closing and self._ctx.queued_count >= self._ctx.options.max_queued_prompts
        ):
            self._space.clear()
            await self._space.wait()

    async def _run_thread(
        self, thread: ThreadRun, prompts: list[InboundMessage], job: ResumeJob | None = None
    ) -> None:
        """One run of one thread (or a paused one going on), from the run row to the
        acked reply; then the follow-up."""
        run_id = job.run_id if job is not None else str(uuid.uuid4())
        bound = log.bind(run_id=run_id, channel=thread.channel, thread=thread.thread_id)
        run = Run(run_id, thread.channel, thread.thread_id, prompts, bound)
        ctx = self._ctx
        try:
            await self._execute(thread, run, job)
        except Exception:
            # The store or the channel failed outside the run itself. The prompts
            # stay recorded as not done, so the next start answers them.
            bound.exception("runtime.run_crashed")
        finally:
            for m in prompts:
                ctx.known_ids.discard(m.id)
            thread.active = None
            thread.active_prompts = []
            after = thread.after_run(closing=ctx.closing)
            if after == "ready":
                ctx.make_ready(thread)
            elif after == "idle":
                ctx.threads.pop((thread.channel, thread.thread_id), None)
            self._pump()

    async def _execute(self, thread: ThreadRun, run: Run, job: ResumeJob | None = None) -> None:
        run_id, bound = run.run_id, run.log
        if job is None:
            limiter = self._limiters(run.channel)
            admitted = await start_within_limits(self._ctx, limiter, run)
            if not admitted:
                return  # every sender of the run is over a limit: no run
            run = Run(run_id, run.channel, run.thread_id, admitted, bound)
            crash_point("run_started")
            bound.info("runtime.run_started", prompts=run.prompt_ids)
        else:
            # Taken before the run goes on: a crash from here on is an interruption
            # (recovery's rule), never a second resume that repeats approved calls.
            assert self._approvals is not None
            await self._approvals.resumed(job.request_id)
            crash_point("resume_started")
            bound.info("runtime.run_resumed", request=job.request_id, outcome=job.outcome)
        deadline: asyncio.Timeout | None = None
        meter = TokenMeter(self._ctx.store, run_id)  # tokens on the run row as the run goes on
        try:
            deadline = asyncio.timeout(self._ctx.options.max_run_seconds)
            with metering(meter):
                if job is not None:
                    async with deadline:
                        result = await job.run()
                else:
                    prompts = [Prompt(m.id, m.sender, m.text) for m in run.prompts]
                    # a thread's root: its thread has no earlier turn to read
                    history = (
                        []
                        if opens_thread(thread.thread_id, prompts)
                        else await self._ctx.store.history(thread.channel, thread.thread_id)
                    )
                    request = RunRequest(run_id, thread.channel, thread.thread_id, history, prompts)
                    async with deadline:
                        result = await self._run(request)
                # the tokens not on the row yet: with the end, or now (a paused run)
                await meter.returned(result.metrics, ending=result.status != "paused")
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
            ids = run.prompt_ids
            if stopped_by is not None:
                await complete(self._ctx.store.finish_run(run_id, interrupted, ids, "failed"))
                await complete(self._say(run, f"Stopped by {stopped_by}."))
                bound.info("runtime.run_stopped", stopped_by=stopped_by)
                # The !stop consumed this cancellation; the task ends normally.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                return
            # Shutdown: back to queued so the next start answers them (unless the
            # run started a mutating call: recovery then posts the interrupted notice).
            await complete(self._ctx.store.finish_run(run_id, interrupted, ids, "queued"))
            bound.info("runtime.run_interrupted")
            raise
        except TimeoutError as exc:
            error = (
                f"run deadline of {self._ctx.options.max_run_seconds:g} s exceeded"
                if deadline is not None and deadline.expired()
                else f"TimeoutError: {exc}"
            )
            result = RunResult(reply="", status="failed", error=error)
        except Exception as exc:
            # Anything the backend raises (BackendError, a bug) fails this run only.
            bound.exception("runtime.run_error")
            result = RunResult(reply="", status="failed", error=f"{type(exc).__name__}: {exc}")

        if result.status == "paused":
            problem = await complete(self._paused(thread, run, result))
            if problem is None:
                return
            result = RunResult(reply="", metrics=result.metrics, status="failed", error=problem)
        try:
            # The model answered: the reply goes out and the run is recorded, whatever
            # is cancelled meanwhile (both are bounded: publish_timeout, the store's).
            await complete(self._deliver(run, result))
        except asyncio.CancelledError:
            if thread.stopped_by is None:
                raise  # shutdown: the run is recorded; let the cancel go on
            bound.info("runtime.stop_after_answer", stopped_by=thread.stopped_by)
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()

    async def _deliver(self, run: Run, result: RunResult) -> None:
        await deliver(self._ctx, run, result)
        if self._approvals is not None:
            self._approvals.finished(run.run_id)

    async def _say(self, run: Run, text: str) -> None:
        """A short notice in the run's thread, in reply to its last prompt."""
        await publish_quietly(
            self._ctx.publisher,
            self._ctx.options.publish_timeout,
            run.channel,
            run.thread_id,
            run.prompts[-1].id,
            text,
        )

    # ---- runs paused for approval -----------------------------------------------------

    async def _paused(self, thread: ThreadRun, run: Run, result: RunResult) -> str | None:
        """Hand a paused run to the desk: None when it waits now; else why it cannot
        (the run ends failed with that error).

        The thread is held before the request is published: a decision that
        arrives while the publish still waits for its ack finds the thread
        paused, and the resume job it leaves runs once this run's task ends.
        """
        if self._approvals is None:
            run.log.error("runtime.pause_without_approvals")
            return "the run paused for approval, but approvals are not set up"
        thread.paused = True
        problem = await self._approvals.pause(run, result)
        if problem is not None:
            thread.paused = False
        return problem

    def _hold(self, channel: str, thread_id: str) -> None:
        """Keep a thread busy while its run waits for approval (after a restart)."""
        thread = self._ctx.thread(channel, thread_id)
        thread.paused = True
        self._ctx.unready(thread)

    def _schedule_resume(self, job: ResumeJob) -> None:
        """A decided paused run goes on in its thread when a slot is free."""
        crash_point("decision_recorded")  # the desk recorded it (or its expiry) first
        thread = self._ctx.thread(job.channel, job.thread_id)
        thread.paused = False
        thread.resume = job
        if thread.active is None:
            self._ctx.make_ready(thread)
        self._pump()

    # ---- shutdown -------------------------------------------------------------------

    async def shutdown(self, grace: float | None = None) -> None:
        """Stop taking prompts, wait up to ``grace`` seconds, cancel and record the rest."""
        self._ctx.closing = True
        self._ctx.ready.clear()
        self._space.set()  # release an intake blocked on back-pressure
        grace = self._ctx.options.shutdown_grace if grace is None else grace
        runs = [t.active for t in self._ctx.threads.values() if t.active is not None]
        if runs:
            log.info("runtime.shutdown_waiting", active_runs=len(runs), grace_seconds=grace)
            _, pending = await asyncio.wait(runs, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("runtime.shutdown_cancelled", runs=len(pending))
        await _drain(self._tasks)
        await self._ctx.store.flush_deferred()


async def _drain(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Wait for owned tasks to end; cancelled ones are expected here."""
    pending = list(tasks)
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
