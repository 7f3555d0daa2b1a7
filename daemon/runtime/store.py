"""The runtime's store protocol over the sessions ``Store``.

``daemon.runtime.scheduler`` speaks in inbound messages and run results;
``sessions.store.Store`` (which may not import daemon/) speaks in rows. This
adapter is the whole translation, so neither side bends to the other.
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.runtime.ports import InboundMessage, RecordOutcome
from daemon.runtime.runs import HistoryTurn, RunResult
from daemon.runtime.scopes import SignedScopeStore
from daemon.tools import ThreadKey
from sessions.errors import ThreadLookupError
from sessions.ids import now_iso
from sessions.model import InterruptedRun, PromptStatus
from sessions.outbox import OutboxReply
from sessions.store import Store

__all__ = ["SessionsRuntimeStore"]


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

    def _held(self, channel: str) -> bool:
        return self._hold_cursor is not None and self._hold_cursor(channel)

    def _capped(self, channel: str, message_id: str) -> str:
        cap = self.cursor_cap(channel) if self.cursor_cap is not None else None
        return message_id if cap is None else min(message_id, cap)

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Store the prompt and move the cursor to it (unless held), in one transaction."""
        target = self._capped(message.channel, message.id)
        new = await self.store.runs.record_prompt(
            message.channel,
            message.thread,
            message.id,
            message.sender,
            message.text,
            message.ts or now_iso(),
            advance_cursor=not self._held(message.channel) and target == message.id,
        )
        if target != message.id and target and not self._held(message.channel):
            await self.store.cursors.set_cursor(message.channel, target)
        if new:
            return "new"
        stored = await self.store.queries.get_prompts([message.id])
        if stored and stored[0].status in ("done", "failed"):
            return "finished"
        return "pending"

    async def advance_cursor(self, channel: str, message_id: str) -> None:
        """Move the channel's cursor forward (never back), unless it is held."""
        target = self._capped(channel, message_id)
        if target and not self._held(channel):
            await self.store.cursors.set_cursor(channel, target)

    async def knows_thread(self, channel: str, thread_id: str) -> bool:
        """Whether prompts of this thread were recorded (the daemon takes part in it)."""
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
        self, run_id: str, channel: str, thread_id: str, prompt_ids: list[str]
    ) -> None:
        """The run row, with its prompts claimed as running; the thread's REPL dumps are
        held back from now until the run's end (:meth:`SignedScopeStore.open_run`)."""
        await self.store.runs.start_run(run_id, channel, thread_id, prompt_ids)
        if self.scopes is not None:
            self.scopes.open_run(ThreadKey(channel, thread_id), run_id)

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """One model response's tokens, on the run's row now."""
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
        return await self.store.outbox.unacked_replies()

    async def reply_acked(self, run_id: str, message_id: str) -> None:
        """The hub acknowledged the run's reply."""
        await self.store.outbox.reply_acked(run_id, message_id)

    async def reply_refused(self, run_id: str, error: str) -> None:
        """The hub refused the run's reply: run and prompts end failed."""
        await self.store.outbox.reply_refused(run_id, error)

    async def set_prompt_status(self, prompt_ids: list[str], status: PromptStatus) -> None:
        """Status of prompts no run finished."""
        await self.store.runs.mark_prompts(prompt_ids, status)
