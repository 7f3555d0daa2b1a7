"""The runtime's store protocol over the sessions ``Store``.

``daemon.runtime.scheduler`` speaks in inbound messages and run results;
``sessions.store.Store`` (which may not import daemon/) speaks in rows. This
adapter is the whole translation, so neither side bends to the other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from daemon.runtime.ports import InboundMessage, RecordOutcome
from daemon.runtime.runs import HistoryTurn, RunResult
from daemon.runtime.scopes import SignedScopeStore
from daemon.tools import ThreadKey
from sessions import commands_row
from sessions.errors import ThreadLookupError
from sessions.ids import now_iso
from sessions.model import InterruptedRun, PromptStatus
from sessions.outbox import Ack, OutboxReply
from sessions.store import Store

__all__ = ["PASS_OVER_DELAY", "SessionsRuntimeStore"]

log = structlog.get_logger("asyncai.runtime")

# How long a write the daemon puts off may wait: the cursor past a message it passed
# over, and the hub's ack of a reply. Every reply the daemon publishes is acked and
# comes back to it as such a message; writing each was a store job a prompt (issue
# 31), and the next prompt's record, or one write a second, carries them. A crash
# before that write reads those messages again and ignores them again, and publishes
# those replies again, which the hub drops by their client_id (it keeps the first).
PASS_OVER_DELAY = 1.0


class SessionsRuntimeStore:
    """:class:`daemon.runtime.RuntimeStore` backed by an open sessions ``Store``.

    ``hold_cursor(channel)`` True keeps that channel's cursor where it is
    (:meth:`daemon.runtime.intake.ChunkJoiner.holds`: chunks of a prompt are
    held in memory, and a restart must see them again). :attr:`cursor_cap`,
    when set, is the furthest id the channel's cursor may move to (None: no
    limit): in a cluster, the message before the oldest prompt that another
    daemon has not answered yet, so a restart reads that prompt again.
    """

    def __init__(
        self,
        store: Store,
        *,
        history_turns: int = 20,
        history_chars: int = 24_000,
        hold_cursor: Callable[[str], bool] | None = None,
        scopes: SignedScopeStore | None = None,
    ):
        self.store = store
        self.scopes = scopes  # the REPL dumps held back until their run's end
        self.history_turns = history_turns
        self.history_chars = history_chars
        self._hold_cursor = hold_cursor
        self.cursor_cap: Callable[[str], str | None] | None = None
        self._passed: dict[str, str] = {}  # channel: the newest message passed over, unwritten
        self._acked: list[Ack] = []  # replies the hub acked, not marked yet
        # The deadline of the oldest cursor or ack not written: set when the first one
        # waits, cancelled when a prompt's record takes them all (a steady stream never
        # writes them alone); the task writing them alone once it passed.
        self._timer: asyncio.TimerHandle | None = None
        self._flush: asyncio.Task[None] | None = None
        self._newest: str | None = None  # no stored prompt's id is greater (None: not read)
        self._commands: dict[str, str] = {}  # channel: the newest command handled (read once)

    def _held(self, channel: str) -> bool:
        return self._hold_cursor is not None and self._hold_cursor(channel)

    def _capped(self, channel: str, message_id: str) -> str:
        cap = self.cursor_cap(channel) if self.cursor_cap is not None else None
        return message_id if cap is None else min(message_id, cap)

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Store the prompt and move the cursor to it (unless held), in one transaction,
        with the acks not written yet.

        A prompt newer than every prompt stored (the channel's live edge: the usual
        case) is new without a read, and when its cursor moves with it, that
        transaction is put off to the store's next write (``RunWriter.record_prompt``
        with ``defer``), which is its run's first write or its end: a prompt answered
        at once costs one transaction, not two (issue 31). A crash before then loses
        the prompt with the cursor's move, and the channel's replay from the cursor
        brings it back; every side effect of its run (a tool call's audit row, the
        reply) is written after it, in the same or a later transaction. Not in a cluster
        (see below)."""
        if self._newest is None:
            self._newest = await self.store.queries.newest_prompt_id() or ""
        held = self._held(message.channel)
        target = self._capped(message.channel, message.id)
        moves = not held and target == message.id
        # In a cluster (a cursor cap) prompts also arrive with another daemon's rows
        # (``Replica.apply_run_rows``), unseen here: always read there.
        fresh = moves and self.cursor_cap is None and message.id > self._newest
        self._newest = max(self._newest, message.id)
        acked, self._acked = self._acked, []
        try:
            new = await self.store.runs.record_prompt(
                message.channel,
                message.thread,
                message.id,
                message.sender,
                message.text,
                message.ts or now_iso(),
                advance_cursor=moves,
                acked=acked,
                defer=fresh,
            )
        except BaseException:
            self._acked[:0] = acked  # not written: still owed
            raise
        if target != message.id and target and not held:
            await self.store.cursors.set_cursor(message.channel, target)
        elif moves and self._passed.get(message.channel, "") <= message.id:
            self._passed.pop(message.channel, None)  # the cursor moved past it with the record
        self._taken()
        if new:
            return "new"
        stored = await self.store.queries.get_prompts([message.id])
        if stored and stored[0].status in ("done", "failed"):
            return "finished"
        return "pending"

    async def advance_cursor(self, channel: str, message_id: str) -> None:
        """A command handled: move the channel's cursor forward (never back), unless it is
        held; while the cursor stays behind the command (held, or capped in a cluster),
        remember the command as handled, so a restart that reads it again does not run it
        again (:meth:`command_replayed`)."""
        await self._move_cursor(channel, message_id)
        if self._held(channel) or self._capped(channel, message_id) != message_id:
            await self.store.cursors.set_cursor(commands_row(channel), message_id)
            self._commands[channel] = max(message_id, await self._command_mark(channel))

    async def command_replayed(self, channel: str, message_id: str) -> bool:
        """Whether the command ``message_id`` was handled already (read again after a
        restart because the cursor had stayed behind it)."""
        return message_id <= await self._command_mark(channel)

    async def _command_mark(self, channel: str) -> str:
        if channel not in self._commands:
            mark = await self.store.cursors.get_cursor(commands_row(channel))
            self._commands[channel] = mark or ""
        return self._commands[channel]

    async def _move_cursor(self, channel: str, message_id: str) -> None:
        """Move the channel's cursor forward (never back), unless it is held."""
        target = self._capped(channel, message_id)
        if target and not self._held(channel):
            await self.store.cursors.set_cursor(channel, target)

    async def pass_over(self, channel: str, message_id: str) -> None:
        """The cursor past ``message_id`` is written within :data:`PASS_OVER_DELAY`, by the
        next prompt's record or by :meth:`flush_deferred`, whichever comes first."""
        if message_id > self._passed.get(channel, ""):
            self._passed[channel] = message_id
        self._defer()

    def _defer(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(PASS_OVER_DELAY, self._due)

    def _taken(self) -> None:
        """A record took what waited: nothing is due (unless some of it is left)."""
        if self._timer is not None and not self._passed and not self._acked:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        if self._flush is not None:  # the last write alone still going: due again later
            self._defer()
            return
        self._flush = asyncio.get_running_loop().create_task(
            self._flush_now(), name="asyncai-deferred-writes"
        )

    async def _flush_now(self) -> None:
        try:
            await self._write_deferred()
        finally:
            self._flush = None

    async def flush_deferred(self) -> None:
        """Write the cursors passed over and the acks now (the runtime's shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._flush = self._flush, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._write_deferred()

    async def _write_deferred(self) -> None:
        passed, self._passed = self._passed, {}
        for channel, message_id in passed.items():
            try:
                await self._move_cursor(channel, message_id)
            except Exception as exc:  # the next start reads these messages again: no loss
                log.warning("runtime.cursor_not_written", channel=channel, error=repr(exc))
        acked, self._acked = self._acked, []
        if acked:
            try:
                await self.store.outbox.replies_acked(acked)
            except Exception as exc:  # the next start publishes them again; the hub drops them
                log.warning("runtime.acks_not_written", replies=len(acked), error=repr(exc))

    async def knows_thread(self, channel: str, thread_id: str) -> bool:
        """Whether prompts of this thread were recorded (the daemon takes part in it)."""
        await self.store.connection.flush()  # a record put off may be the thread's one
        try:
            await self.store.queries.resolve_thread(thread_id, channel)
        except ThreadLookupError:
            return False
        return True

    async def pending_prompts(self) -> list[InboundMessage]:
        """Close runs a crash left running (interrupted), then every prompt not done.

        Call once at start, before any run starts (``Store.recover``'s rule).
        """
        await self.store.runs.recover()
        return [
            InboundMessage(
                channel=p.channel,
                id=p.id,
                thread=p.thread_id,
                sender=p.sender,
                text=p.text,
                ts=p.ts,
            )
            for p in await self.store.queries.pending_prompts()
        ]

    async def interrupted_runs(self) -> list[InterruptedRun]:
        """Runs cut off after a mutating call, whose pending prompts must not run again."""
        return await self.store.queries.interrupted_runs()

    async def start_run(
        self,
        run_id: str,
        channel: str,
        thread_id: str,
        prompt_ids: list[str],
        *,
        defer: bool = False,
    ) -> None:
        """The run row, with its prompts claimed as running (with ``defer``, with the
        store's next write: ``RunWriter.start_run``); the thread's REPL dumps are held
        back from now until the run's end (:meth:`SignedScopeStore.open_run`)."""
        await self.store.runs.start_run(run_id, channel, thread_id, prompt_ids, defer=defer)
        if self.scopes is not None:
            self.scopes.open_run(ThreadKey(channel, thread_id), run_id)

    @property
    def tokens_with_end(self) -> bool:
        """True: :meth:`finish_run` writes the run's sums (:mod:`daemon.runtime.usage`)."""
        return True

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Model responses' tokens, on the run's row now."""
        await self.store.runs.add_run_tokens(run_id, prompt_tokens, completion_tokens)

    async def history(self, channel: str, thread_id: str) -> list[HistoryTurn]:
        """Earlier user and assistant text of the thread, within the configured bounds."""
        turns = await self.store.queries.history(
            channel, thread_id, turns=self.history_turns, chars=self.history_chars
        )
        return [HistoryTurn(role=t.role, text=t.text) for t in turns]

    async def finish_run(
        self,
        run_id: str,
        result: RunResult,
        prompt_ids: list[str],
        prompt_status: PromptStatus,
        *,
        reply: OutboxReply | None = None,
    ) -> None:
        """Records, metrics, run status and prompt status in one transaction; with a
        ``reply``, the reply in the outbox and the REPL dump the run left (if any).

        The dump is the one :attr:`scopes` held back for this run (see
        :class:`~daemon.runtime.scopes.SignedScopeStore`); a run that ends
        without a reply (interrupted, stopped) drops it, and the thread's later
        saves until its next run (a shutdown's), so the stored REPL reflects
        exactly the runs that ended with a reply.
        """
        scope = self.scopes.held(run_id) if self.scopes is not None and reply else None
        try:
            await self.store.runs.finish_run(
                run_id,
                result.status,
                result.records,
                result.metrics,
                prompt_ids,
                prompt_status,
                error=result.error,
                reply=reply,
                scope=scope,
            )
        finally:
            if self.scopes is not None:
                self.scopes.release(run_id, answered=reply is not None)

    async def unacked_replies(self) -> list[OutboxReply]:
        """Replies committed and not acknowledged (published again at start)."""
        acked = {ack.run_id for ack in self._acked}
        return [r for r in await self.store.outbox.unacked_replies() if r.run_id not in acked]

    async def reply_acked(self, run_id: str, message_id: str) -> None:
        """The hub acknowledged the run's reply: marked so within :data:`PASS_OVER_DELAY`,
        by the next prompt's record or by :meth:`flush_deferred`."""
        self._acked.append(Ack(run_id, message_id, now_iso()))
        self._defer()

    async def reply_refused(self, run_id: str, error: str) -> None:
        """The hub refused the run's reply: run and prompts end failed."""
        await self.store.outbox.reply_refused(run_id, error)

    async def set_prompt_status(self, prompt_ids: list[str], status: PromptStatus) -> None:
        """Status of prompts no run finished."""
        await self.store.runs.mark_prompts(prompt_ids, status)
