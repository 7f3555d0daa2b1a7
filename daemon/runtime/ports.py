"""What the scheduler is handed and what it takes: messages, options, and its ports.

The scheduler (:mod:`daemon.runtime.scheduler`) does no I/O of its own; the
store and the channel come in as the :class:`RuntimeStore` and
:class:`RuntimePublisher` protocols, the model as a :data:`RunFunction`.
The approval desk (:mod:`daemon.runtime.desk`) reaches SQLite only through
the :class:`ApprovalStore` port, the approvals table of ``sessions``.
:mod:`daemon.runtime.store` implements the store over ``sessions.Store``;
:mod:`daemon.runtime.intake` the publisher over a channel client. Also the two
pure rules about channel text the scheduler applies: :func:`mentions` and
:func:`reply_client_id`, and :func:`valid_text`, which every published text
goes through; and :class:`PublishRefused`, the one publish failure that
retrying cannot fix.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from daemon.errors import AsyncaiError
from daemon.runtime.runs import HistoryTurn, RunRequest, RunResult
from sessions import NewApproval, NewRule, StoredApproval, StoredPrompt
from sessions.model import InterruptedRun, PromptStatus
from sessions.outbox import OutboxReply

__all__ = [
    "ApprovalStore",
    "InboundMessage",
    "PublishRefused",
    "RecordOutcome",
    "RunFunction",
    "RuntimeCounts",
    "RuntimeOptions",
    "RuntimePublisher",
    "RuntimeStore",
    "mentions",
    "notice_client_id",
    "reply_client_id",
    "valid_text",
]

RecordOutcome = Literal["new", "pending", "finished"]
"""What recording a prompt found: first time seen; seen but not done yet; already done or failed."""


class PublishRefused(AsyncaiError):
    """The hub refused a publish for what it is (a bad frame, too large, a bad channel).

    Sending the same text again cannot succeed, unlike a timeout or a lost
    connection: the runtime ends the prompts it answered as failed instead
    of keeping them pending for the next start.
    """


@dataclass(frozen=True)
class InboundMessage:
    """One message from a channel, as the runtime needs it."""

    channel: str
    id: str
    thread: str
    sender: str
    text: str
    reply_to: str | None = None
    ts: str | None = None  # the hub's timestamp (ISO 8601, UTC); None: when it was received
    # the end of a split text whose first chunks were dropped (too many held at once):
    # not what its sender wrote, so not a prompt (its thread is told to send it again)
    cut: bool = False


@dataclass(frozen=True)
class RuntimeOptions:
    """The runtime's limits and policies (the ``[runtime]`` config section)."""

    max_concurrent_runs: int = 4
    max_queued_prompts: int = 256
    max_run_seconds: float = 900.0
    shutdown_grace: float = 20.0
    publish_timeout: float = 60.0  # the hub's ack of a reply
    shared_channels: frozenset[str] = frozenset()
    allowed_senders: frozenset[str] | None = None  # None: everyone may prompt
    # a channel's cap on its runs at once, within max_concurrent_runs (issue 29): not a
    # reservation, so the other channels may use every slot it leaves free
    channel_max_concurrent: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_concurrent_runs < 1:
            raise ValueError("max_concurrent_runs must be at least 1")
        if self.max_queued_prompts < 1:
            raise ValueError("max_queued_prompts must be at least 1")
        if any(cap < 1 for cap in self.channel_max_concurrent.values()):
            raise ValueError("a channel's max_concurrent_runs must be at least 1")
        if self.max_run_seconds <= 0 or self.publish_timeout <= 0 or self.shutdown_grace < 0:
            raise ValueError(
                "max_run_seconds and publish_timeout must be positive, shutdown_grace not negative"
            )


@dataclass(frozen=True)
class RuntimeCounts:
    """Live counts for systemd's ``STATUS=`` and the logs."""

    active_runs: int
    queued_prompts: int
    waiting_threads: int


class ApprovalStore(Protocol):
    """The approvals table, as the desk reaches it (``sessions``' approvals serve it)."""

    async def add_approval(self, new: NewApproval) -> None:
        """Store a paused run's request (one statement: all of it, or nothing)."""
        ...

    async def get_approval(self, request_id: str) -> StoredApproval | None:
        """The request with this id, or None."""
        ...

    async def decide_approval(
        self,
        request_id: str,
        status: Literal["approved", "denied", "expired", "stopped"],
        *,
        by: str,
        reason: str | None = None,
        scope: Literal["call", "run"] | None = None,
        rules: Sequence[NewRule] = (),
    ) -> bool:
        """Record the decision if the request is still pending; whether this call decided it
        (``rules``, of ``!approve ID always``: stored with it, in its transaction)."""
        ...

    async def mark_resumed(self, request_id: str) -> None:
        """The resumed run has taken the decision: it is not acted on again after a restart."""
        ...

    async def pending_approvals(self) -> list[StoredApproval]:
        """Requests still waiting for a decision, soonest expiry first."""
        ...

    async def unresumed_decisions(self) -> list[StoredApproval]:
        """Decided requests whose run was not resumed yet, oldest decision first."""
        ...

    async def run_approvals(self, run_id: str) -> list[StoredApproval]:
        """Every request of one run, oldest first (its grants, and a decision just taken)."""
        ...

    async def run_prompts(self, run_id: str) -> Sequence[StoredPrompt]:
        """The prompts a run answers (a paused run's, to resume it), oldest first."""
        ...


class RuntimeStore(Protocol):
    """What the runtime needs from the sessions store."""

    async def record_prompt(self, message: InboundMessage) -> RecordOutcome:
        """Store an inbound prompt (idempotent by its id) and advance the channel cursor to it."""
        ...

    async def advance_cursor(self, channel: str, message_id: str) -> None:
        """Remember that every message up to ``message_id`` was handled (a command)."""
        ...

    async def command_replayed(self, channel: str, message_id: str) -> bool:
        """Whether the command ``message_id`` was handled already: read again after a
        restart because the channel's cursor had stayed behind it."""
        ...

    async def pass_over(self, channel: str, message_id: str) -> None:
        """A message the daemon does not act on (its own, an ignored sender's, one not
        addressed to it): the cursor moves past it soon, in the write of a later cursor
        or of the next prompt's record; a crash before that only reads it again, and it is
        ignored again."""
        ...

    async def flush_deferred(self) -> None:
        """Write the cursors :meth:`pass_over` moved and the acks :meth:`reply_acked`
        noted, not written yet (at shutdown)."""
        ...

    async def knows_thread(self, channel: str, thread_id: str) -> bool:
        """Whether the daemon has recorded prompts in this thread (takes part in it)."""
        ...

    async def pending_prompts(self) -> list[InboundMessage]:
        """Prompts recorded but not done, oldest first; runs left running become interrupted.

        Prompts of a run paused for approval are not among them.
        """
        ...

    async def interrupted_runs(self) -> list[InterruptedRun]:
        """Runs cut off after starting a mutating call whose prompts are still pending
        (read after :meth:`pending_prompts`): those prompts must not run again."""
        ...

    async def start_run(
        self,
        run_id: str,
        channel: str,
        thread_id: str,
        prompt_ids: list[str],
        *,
        defer: bool = False,
    ) -> None:
        """Write the run row and mark its prompts running; with ``defer``, with the
        store's next write (in its transaction) rather than in one of their own."""
        ...

    @property
    def tokens_with_end(self) -> bool:
        """Whether a model response's tokens may wait for the run's end (whose
        transaction writes the run's sums) or its next request (:mod:`.usage`)."""
        ...

    async def add_run_tokens(self, run_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add model responses' tokens to the run's row now."""
        ...

    async def history(self, channel: str, thread_id: str) -> list[HistoryTurn]:
        """The thread's earlier user and assistant text, within the history bounds."""
        ...

    async def finish_run(
        self,
        run_id: str,
        result: RunResult,
        prompt_ids: list[str],
        prompt_status: PromptStatus,
        *,
        reply: OutboxReply | None = None,
    ) -> None:
        """In one transaction: records, metrics, the run's status and its prompts' status;
        with ``reply``, the reply in the outbox and the thread's REPL dump of the run.

        The run's token counts never go down (see :meth:`add_run_tokens`)."""
        ...

    async def unacked_replies(self) -> list[OutboxReply]:
        """Replies committed and not acknowledged by the hub, oldest first."""
        ...

    async def reply_acked(self, run_id: str, message_id: str) -> None:
        """The hub acknowledged the run's reply: marked soon, in a later write (a crash
        before it publishes the reply again at the next start, and the hub drops it by
        its ``client_id``); :meth:`unacked_replies` leaves it out from now on."""
        ...

    async def reply_refused(self, run_id: str, error: str) -> None:
        """The hub refused the run's reply: the run and its prompts end failed."""
        ...

    async def set_prompt_status(self, prompt_ids: list[str], status: PromptStatus) -> None:
        """Set the status of prompts that no run finished (dropped by ``!stop``)."""
        ...


class RuntimePublisher(Protocol):
    """What the runtime needs from the channel client."""

    @property
    def nick(self) -> str:
        """The daemon's own nick (from the hub's ``welcome``)."""
        ...

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Publish and wait for the hub's ack; returns the new message's id."""
        ...


RunFunction = Callable[[RunRequest], Awaitable[RunResult]]
"""One run: ``OpenAiCompatibleBackend.run`` in the daemon."""


def mentions(text: str, nick: str) -> bool:
    """Whether ``text`` mentions ``nick`` as a word (``@nick``, ``nick:``, ``hi nick``).

    Case-insensitive; ``nicky`` or ``x-nick`` do not count, so a nick that is
    part of a longer name does not wake the daemon in a shared channel.
    """
    if not nick:
        return False
    pattern = rf"(?<![\w.@-])@?{re.escape(nick)}(?![\w-])"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def reply_client_id(channel: str, last_prompt_id: str) -> str:
    """The reply's publish ``client_id``, derived from the prompt it answers.

    If the daemon dies after the hub acked a reply but before the prompts were
    marked done, the prompt runs again after the restart and its reply is
    published with the same ``client_id``: the hub acks the first message
    again instead of storing a second answer.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"asyncai-reply:{channel}/{last_prompt_id}"))


def notice_client_id(channel: str, last_prompt_id: str) -> str:
    """The ``client_id`` of the notice that replaces a refused reply.

    Not the reply's own: the hub may have stored the first chunks of a split
    reply before it refused a later one, and would ack the notice with them.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"asyncai-refused:{channel}/{last_prompt_id}"))


def valid_text(text: str) -> str:
    """``text`` as valid Unicode, so it can go out as UTF-8: surrogate code points fixed.

    A model's JSON may carry ``"\\ud800"``, which ``json.loads`` turns into a
    lone surrogate that no UTF-8 encoder takes. A high and low surrogate in a
    row become the character they encode; every other surrogate becomes
    U+FFFD. Text without surrogates comes back unchanged (the same object).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 with surrogatepass keeps every code unit; decoding pairs them
        # up and replaces the ones that have no partner.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
