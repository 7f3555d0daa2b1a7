"""The runtime's store in a cluster: the local one, plus the thread entries and the audit.

:class:`ClusterRuntimeStore` wraps the daemon's
:class:`daemon.runtime.RuntimeStore` (its own SQLite) and adds what the other
daemons must see:

- after a run's prompts end (``done`` or ``failed``, so after the reply was
  published), the thread's ``answered`` marker moves to the newest of them,
  and the audit exporter is told that a run finished;
- a follow-up's earlier turns are read from the channel's stream
  (:mod:`daemon.cluster.history`), which holds every daemon's replies: this
  database holds only the turns this daemon answered;
- at start, the prompts the database has not answered are run only when the
  thread is (or becomes) this daemon's; those another daemon answered
  meanwhile are marked done here, those another live daemon holds wait in
  the router.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from daemon.cluster.errors import ClusterError
from daemon.cluster.history import bounded
from daemon.cluster.leases import Leases
from daemon.cluster.router import ThreadRouter
from daemon.runtime.ports import InboundMessage, RecordOutcome, RuntimeStore
from daemon.runtime.runs import HistoryTurn, RunResult
from sessions.model import InterruptedRun, PromptStatus
from sessions.outbox import OutboxReply

__all__ = ["ClusterRuntimeStore"]

log = structlog.get_logger("asyncai.cluster")

ThreadKey = tuple[str, str]
# (channel, thread, before) → the thread's turns before that message, from elsewhere
EarlierTurns = Callable[[str, str, str], Awaitable[list[HistoryTurn]]]
# run id → its thread and prompts, from the database (a run resumed after a restart)
StoredRun = Callable[[str], Awaitable[tuple[ThreadKey, list[str]] | None]]
# pauses between reads of a thread's turns from the stream: a follow-up waits for
# its context (a few seconds at most) rather than run without it
_HISTORY_RETRIES = (0.25, 1.0)
_REMEMBERED_PROMPTS = 100_000  # prompt → thread lookups kept (bounded; see _thread_of)


class ClusterRuntimeStore:
    """:class:`daemon.runtime.RuntimeStore` over ``inner``, reporting to the cluster."""

    def __init__(
        self,
        inner: RuntimeStore,
        leases: Leases,
        router: ThreadRouter,
        *,
        finished: Callable[[], None] | None = None,
        earlier: EarlierTurns | None = None,
        stored: StoredRun | None = None,
        not_rerun: Callable[[InterruptedRun], Awaitable[None]] | None = None,
    ):
        self._inner = inner
        self._leases = leases
        self._router = router
        self._finished = finished
        self._earlier = earlier
        self._stored = stored
        self._not_rerun = not_rerun  # a cut-off run's REPL dumps dropped before its notice
        self._threads: dict[str, ThreadKey] = {}  # prompt id → its thread
        self._runs: dict[str, tuple[ThreadKey, list[str]]] = {}  # while it runs: thread, prompts
        # committed with a reply not acked yet: its marker moves at the ack
        self._unacked: dict[str, tuple[ThreadKey, list[str]]] = {}
        # (run id, tokens) → counted on the broker too; set with per-sender limits
        self.tokens: Callable[[str, int], Awaitable[None]] | None = None

    def running_through(self, key: ThreadKey) -> str | None:
        """The newest prompt of the thread's run going on here (what a REPL dump saved
        now reflects), or None when the thread has no run here."""
        newest = [max(p) for run_key, p in self._runs.values() if run_key == key and p]
        return max(newest, default=None)

    def run(self, run_id: str) -> tuple[ThreadKey, list[str]] | None:
        """A running run's thread and prompts."""
        return self._runs.get(run_id)

    async def known_run(self, run_id: str) -> tuple[ThreadKey, list[str]] | None:
        """:meth:`run`, or a run not started by this process (a paused run resumed after
        a restart) read from the database and remembered until it finishes."""
        run = self._runs.get(run_id)
        if run is None and self._stored is not None:
            run = await self._stored(run_id)
            if run is not None:
                self._runs[run_id] = run
        return run

    def resuming(self, run_id: str, key: ThreadKey, prompt_ids: list[str]) -> None:
        """A decided paused run goes on: its thread known until it finishes (its
        mutating calls are recorded in the entry, like a run's that started here)."""
        self._runs[run_id] = (key, list(prompt_ids))

    def note(self, key: ThreadKey, prompt_ids: tuple[str, ...] | list[str]) -> None:
        """Remember the thread of prompts not recorded here (a moved run's notice)."""
        for prompt_id in prompt_ids:
            self._threads[prompt_id] = key

    def _note(self, message: InboundMessage) -> None:
        if len(self._threads) >= _REMEMBERED_PROMPTS:
            self._threads.clear()  # bounded; a forgotten prompt's marker waits for the next
        self._threads[message.id] = (message.channel, message.thread)

    async def _answered(self, key: ThreadKey | None, prompt_ids: list[str]) -> None:
        if key is None or not prompt_ids:
            return
        try:
            if not await self._leases.mark_answered(key[0], key[1], max(prompt_ids)):
                # it lost the thread: the holder answers these prompts (and moves the marker)
                log.warning("cluster.answered_not_marked", thread=key[1], reason="thread moved")
        except ClusterError as exc:
            # The reply is out and recorded here; a daemon taking the thread over
            # may run these prompts again, and the channel drops the repeated reply.
            log.warning("cluster.answered_not_marked", thread=key[1], error=str(exc))
        for prompt_id in prompt_ids:
            self._threads.pop(prompt_id, None)
        if self._finished is not None:
            self._finished()

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Stored locally (and its thread remembered for the marker)."""
        self._note(message)
        return await self._inner.record_prompt(message)

    async def advance_cursor(self, channel: str, message_id: str) -> None:
        """The local cursor."""
        await self._inner.advance_cursor(channel, message_id)

    async def command_replayed(self, channel: str, message_id: str) -> bool:
        """The local mark of commands handled."""
        return await self._inner.command_replayed(channel, message_id)

    async def pass_over(self, channel: str, message_id: str) -> None:
        """The local cursor, written soon."""
        await self._inner.pass_over(channel, message_id)

    async def flush_deferred(self) -> None:
        """The local cursors passed over and acks, written now."""
        await self._inner.flush_deferred()

    async def knows_thread(self, channel: str, thread_id: str) -> bool:
        """Local prompts of the thread, or the thread is this daemon's."""
        if self._router.holds(channel, thread_id):
            return True
        return await self._inner.knows_thread(channel, thread_id)

    async def pending_prompts(self) -> list[InboundMessage]:
        """The local prompts not done whose thread is this daemon's (see the module doc)."""
        pending = await self._inner.pending_prompts()
        keep, elsewhere = await self._router.recovered(pending)
        if elsewhere:
            await self._inner.set_prompt_status([m.id for m in elsewhere], "done")
            log.info("cluster.answered_elsewhere", prompts=len(elsewhere))
        for message in keep:
            self._note(message)
        return keep

    async def interrupted_runs(self) -> list[InterruptedRun]:
        """The local ones (their notice is this daemon's to post); their REPL dumps are
        dropped first, since they are not run again."""
        runs = await self._inner.interrupted_runs()
        if self._not_rerun is not None:
            for run in runs:
                await self._not_rerun(run)
        return runs

    async def start_run(
        self,
        run_id: str,
        channel: str,
        thread_id: str,
        prompt_ids: list[str],
        *,
        defer: bool = False,
    ) -> None:
        """The local run row; the run's thread remembered until it finishes."""
        self._runs[run_id] = ((channel, thread_id), list(prompt_ids))
        await self._inner.start_run(run_id, channel, thread_id, prompt_ids, defer=defer)

    @property
    def tokens_with_end(self) -> bool:
        """False with per-sender limits: the broker's count gets each response's
        tokens from :meth:`add_run_tokens` only (a run's end adds none there)."""
        return self.tokens is None and self._inner.tokens_with_end

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Locally, as they are spent; then, with per-sender limits, on the broker for
        each of the run's senders (:mod:`daemon.cluster.usage`)."""
        await self._inner.add_run_tokens(run_id, prompt_tokens, completion_tokens)
        if self.tokens is None:
            return
        try:
            await self.tokens(run_id, prompt_tokens + completion_tokens)
        except ClusterError as exc:
            # recorded locally: only the other daemons' view of this sender is short
            log.warning("cluster.tokens_not_counted", run_id=run_id, error=str(exc))

    async def history(self, channel: str, thread_id: str) -> list[HistoryTurn]:
        """The thread's turns before the running prompts, read back from the channel's
        stream, within the local bounds; the local history when there is no stream to
        read, or when it cannot be read after a retry or two.

        Why not the local history when it has turns: it holds only what this
        daemon answered. A thread that moved here and back, or one this daemon
        answered, then another after a takeover, then this one again after a
        clean shutdown, has local turns that lack the other daemon's; only the
        stream has every reply. (Seen: a moved thread's follow-up answered with
        the REPL that moved but none of the turns.)
        """
        here = (channel, thread_id)
        running = [p for key, prompts in self._runs.values() if key == here for p in prompts]
        if self._earlier is None or not running or thread_id >= min(running):
            return await self._inner.history(channel, thread_id)
        error = ""
        for pause in (0.0, *_HISTORY_RETRIES):
            await asyncio.sleep(pause)
            try:
                earlier = await self._earlier(channel, thread_id, min(running))
            except ClusterError as exc:
                error = str(exc)
                log.info("cluster.history_retry", thread=thread_id, error=error)
                continue
            max_turns = getattr(self._inner, "history_turns", 20)
            max_chars = getattr(self._inner, "history_chars", 24_000)
            return bounded(earlier, max_turns, max_chars)
        log.warning("cluster.history_not_read", thread=thread_id, error=error)
        return await self._inner.history(channel, thread_id)

    async def finish_run(
        self,
        run_id: str,
        result: RunResult,
        prompt_ids: list[str],
        prompt_status: PromptStatus,
        *,
        reply: OutboxReply | None = None,
    ) -> None:
        """Locally; then, when the prompts ended, the thread's marker moves past them:
        at once, or, for a run whose reply is in the outbox, once the hub acked it.

        Why not at the commit: a daemon that dies between its commit and its
        publish has the reply in its own outbox only, and may never come back.
        With the marker still before the prompts, the daemon taking the thread
        over runs them again (on the REPL from before the run, :mod:`.scopes`),
        and its reply goes out with the same ``client_id``. If the first one
        did reach the broker, the taking daemon sees it in the stream and
        moves the marker past its prompts as it takes the thread
        (:meth:`.Leases.take_over`), so they are not run again: a re-run would
        be coalesced with any follow-up that came meanwhile into one run, whose
        reply, under the follow-up's ``client_id``, the broker would keep too.
        """
        await self._inner.finish_run(run_id, result, prompt_ids, prompt_status, reply=reply)
        if prompt_status not in ("done", "failed"):
            self._runs.pop(run_id, None)
            return
        run = await self.known_run(run_id)
        self._runs.pop(run_id, None)
        key = run[0] if run is not None else self._thread_of(prompt_ids)
        if reply is not None and key is not None:
            self._unacked[run_id] = (key, list(prompt_ids))
            return
        await self._answered(key, prompt_ids)

    async def unacked_replies(self) -> list[OutboxReply]:
        """The local outbox (each reply's thread remembered for its marker)."""
        replies = await self._inner.unacked_replies()
        for reply in replies:
            key = (reply.channel, reply.thread_id)
            self._unacked.setdefault(reply.run_id, (key, list(reply.prompt_ids)))
        return replies

    async def reply_acked(self, run_id: str, message_id: str) -> None:
        """Locally; then the thread's marker moves past the run's prompts."""
        await self._inner.reply_acked(run_id, message_id)
        await self._answered(*self._unacked.pop(run_id, (None, [])))

    async def reply_refused(self, run_id: str, error: str) -> None:
        """Locally (the run and its prompts failed); then the thread's marker moves."""
        await self._inner.reply_refused(run_id, error)
        await self._answered(*self._unacked.pop(run_id, (None, [])))

    async def set_prompt_status(self, prompt_ids: list[str], status: PromptStatus) -> None:
        """Locally; prompts that ended move their thread's marker too."""
        await self._inner.set_prompt_status(prompt_ids, status)
        if status in ("done", "failed"):
            await self._answered(self._thread_of(prompt_ids), prompt_ids)

    def _thread_of(self, prompt_ids: list[str]) -> ThreadKey | None:
        for prompt_id in prompt_ids:
            if prompt_id in self._threads:
                return self._threads[prompt_id]
        return None
