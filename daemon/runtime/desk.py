"""The approval desk: the runtime's service that stores a paused run, takes decisions, resumes it.

The values it acts on (a :class:`~daemon.approvals.Pause`, its pending calls,
a :class:`~daemon.approvals.Decision`), the policy, the commands and the words
are :mod:`daemon.approvals`'; the rows are ``sessions``', reached only
through the :class:`~daemon.runtime.ports.ApprovalStore` port. It is
one piece because requests, decisions (from the thread or the console), ``!stop``
and expiry all go through one desk's shared state (its expiry timers, the
runs' grants, the rules in force, and the lock that lets exactly one decision
of a request win).

:class:`ApprovalDesk` sits beside the scheduler (:mod:`daemon.runtime.scheduler`),
which binds its two hooks to it: hold a thread busy while its run waits, and
run a decided request's :class:`~daemon.runtime.context.ResumeJob` in its thread.

- as the :data:`~daemon.approvals.ApprovalGate` it applies the call's channel's
  ``[approvals]`` (issue 29: ``policies``, the channel's table over the global
  section) to each mutating call, with the run's ``!approve ID run`` grants
  and the channel's ``!approve ID always`` rules (the run and its channel come
  from ``current_tool_use``, which the backend sets around every tool call);
- :meth:`pause` takes a paused run from the scheduler (which holds its thread
  first): it stores the request in ONE statement (calls, snapshot,
  conversation), publishes it in the thread and arms its expiry; a request
  that cannot be published or stored ends the run failed, never a silent
  wait for the expiry;
- :meth:`handle` takes ``!show ID`` (the request again, in full, for anyone in
  the thread) and ``!approve ID [run|always]`` / ``!deny ID [reason]``: a nick
  that may not decide (by the channel's approvers), an unknown id or one
  already decided gets one line,
  and nothing runs; :meth:`decide` takes the same commands from outside the thread
  (the console), through the same code and rights, and says a decision taken in
  the thread; a decision is recorded once and the run is handed back to
  the scheduler as a ``ResumeJob`` (it takes a concurrency slot then, not
  while it waits). The request is read once per decision: what the decision
  changed is read back with the run's other requests (its grants);
- :meth:`stop` is ``!stop`` on a paused run (the same right as a decision);
  :meth:`start` re-arms the expiry of pending requests and resumes decisions
  not acted on after a restart; :meth:`adopt` does the same for one request
  another daemon stored here.

``!approve ID always`` leaves a rule per ``server.tool`` of the request: only a
nick of the channel's explicit ``approvers`` may say it (else one line says
why, and nothing is decided). The rules are written in the same transaction
as the decision (and in a cluster on the broker before it), so the call the
approval lets run never runs without its rule standing. The gate reads the
rules from memory (it is synchronous); the desk reads them again from the
store (in a cluster, the broker) every ``rules_refresh`` seconds
(:data:`RULES_REFRESH`), which is how soon a rule revoked with ``asyncai
approvals --revoke`` stops applying in a running daemon.

With several daemons an :class:`ApprovalMirror` (``daemon.cluster``), given at
construction, shares each request and takes each decision across the daemons
first: once, wherever the thread is.

Nothing is kept only in memory that a restart needs: the request, its
decision and the run's grants are rows of the ``approvals`` table, the rules
rows of ``approval_rules``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import structlog

from daemon.approvals import (
    AllowRule,
    ApprovalPolicy,
    Approve,
    Decision,
    Deny,
    GatedTool,
    Malformed,
    Pause,
    PendingCall,
    RuleBook,
    Show,
    Verdict,
    always_granted_text,
    always_refused_text,
    decided_elsewhere_text,
    echoed,
    new_request_id,
    new_rule_id,
    parse_decision,
    request_text,
)
from daemon.crashpoints import crash_point
from daemon.errors import AsyncaiError
from daemon.runtime.context import Outcome, ResumeJob, Run
from daemon.runtime.deliver import publish_quietly
from daemon.runtime.ports import ApprovalStore, InboundMessage, RuntimePublisher, reply_client_id
from daemon.runtime.runs import PausedRun, Prompt, RunRequest, RunResult, current_tool_use
from sessions import NewApproval, NewRule, StoredApproval, StoredRule
from sessions.ids import iso_utc

__all__ = [
    "RULES_REFRESH",
    "ApprovalDesk",
    "ApprovalMirror",
    "Decided",
    "RequestNotPublished",
    "ResumeFunction",
    "RuleStore",
    "Shared",
]

log = structlog.get_logger("asyncai.approvals")

ResumeFunction = Callable[[RunRequest, PausedRun, Mapping[int, Decision]], Awaitable[RunResult]]
"""Go on with a paused run: ``OpenAiCompatibleBackend.resume`` in the daemon."""

Shared = Literal["ok", "moved", "retry"]
RETRY_DECISION = 5.0  # seconds before an expiry the cluster could not record is tried again
RULES_REFRESH = 1.0  # seconds between two reads of the "always" rules (how soon a revoke applies)


Say = Callable[[str], Awaitable[None]]
"""Tell the one who asked for a decision one line (in the thread, or back to the console)."""


@dataclass(frozen=True)
class Decided:
    """What a decision taken outside the thread (:meth:`ApprovalDesk.decide`) came to:
    whether it decided the request, and every line its decider was told (a refusal, or
    the lines the thread was given)."""

    decided: bool
    lines: list[str]


@dataclass(frozen=True)
class _Asker:
    """Who asks for a decision, where from, and where the answers go.

    ``thread`` None: from outside any thread (the console), so the request is
    found by its id alone; ``announce`` then says a decision in the request's
    thread, which did not see the command."""

    sender: str
    thread: tuple[str, str] | None
    say: Say
    announce: Callable[[StoredApproval, str], Awaitable[None]] | None = None
    where: str = "the thread"


class ApprovalMirror(Protocol):
    """Where the daemons of a cluster share requests and take decisions once."""

    async def shared(self, request: NewApproval, prompt_ids: list[str]) -> None:
        """The request was stored here: share it (a failure is logged, never raised)."""
        ...

    async def decide(self, request: StoredApproval, outcome: Outcome) -> Shared:
        """Take the decision across the daemons first: "ok" (go on), "moved" (another
        daemon holds the thread, or it was decided there), "retry" (the broker is away)."""
        ...

    async def share_rules(self, rules: Sequence[NewRule]) -> bool:
        """Put ``!approve ID always`` rules on the broker, before the decision they ride
        on: whether they are there (False: the broker did not answer; nothing decided)."""
        ...

    async def withdraw_rules(self, rules: Sequence[NewRule]) -> None:
        """Take rules shared for a decision that was then not taken here off the broker
        (a failure is logged, never raised)."""
        ...

    async def rules_in_force(self) -> Sequence[StoredRule]:
        """The rules in force across the daemons (the broker's), with this daemon's
        copy brought in line (raises when the broker cannot be read)."""
        ...


class RuleStore(Protocol):
    """The ``approval_rules`` table, as the desk reads it (``sessions``' rules serve it)."""

    async def rules(self, *, revoked: bool = False) -> list[StoredRule]:
        """The rules in force."""
        ...


class RequestNotPublished(AsyncaiError):
    """A paused run's request could not be published (the hub refused it, or no ack
    came within ``publish_timeout``): the request is closed and the run fails."""


def _iso(seconds: float) -> str:
    return iso_utc(datetime.fromtimestamp(seconds, UTC))


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class ApprovalDesk:
    """Requests, decisions and expiry of paused runs; see the module docstring."""

    def __init__(
        self,
        *,
        store: ApprovalStore,
        publisher: RuntimePublisher,
        policy: ApprovalPolicy,
        resume: ResumeFunction,
        publish_timeout: float = 60.0,
        clock: Callable[[], float] = time.time,
        mirror: ApprovalMirror | None = None,
        policies: Callable[[str], ApprovalPolicy] | None = None,
        rules: RuleStore | None = None,
        rules_refresh: float = RULES_REFRESH,
    ):
        self._store = store
        self._publisher = publisher
        self.policy = policy  # the global [approvals]: a call outside any channel's run
        self._policies = policies  # each channel's (None: ``policy`` everywhere)
        self._rules = rules  # None: no "always" rules (they are refused)
        self._rules_refresh = rules_refresh
        self._book = RuleBook()
        self._grants_made = 0  # rules granted here: a refresh read before one is stale
        self._rules_unread = False  # the last refresh failed (logged once until one works)
        self._refresher: asyncio.Task[None] | None = None
        self._resume = resume
        self._publish_timeout = publish_timeout
        self._clock = clock
        self._grants: dict[str, set[str]] = {}  # run id -> server.tool approved for the run
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._schedule: Callable[[ResumeJob], None] | None = None
        self._hold: Callable[[str, str], None] | None = None
        self._mirror = mirror  # several daemons: daemon.cluster's
        self._deciding = asyncio.Lock()

    def bind(
        self, *, schedule: Callable[[ResumeJob], None], hold: Callable[[str, str], None]
    ) -> None:
        """The scheduler's hooks: run a :class:`ResumeJob`; keep a thread busy while paused."""
        self._schedule, self._hold = schedule, hold

    # ---- the gate ---------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Requests this daemon holds waiting for a decision (each has its expiry armed)."""
        return len(self._timers)

    def policy_of(self, channel: str) -> ApprovalPolicy:
        """The ``[approvals]`` in force in ``channel`` (its own table over the global one)."""
        if self._policies is None or not channel:
            return self.policy
        return self._policies(channel)

    @property
    def rules(self) -> RuleBook:
        """The ``!approve ID always`` rules the gate applies now."""
        return self._book

    def gate(self, definition: GatedTool, arguments: dict[str, Any]) -> Verdict:
        """The call's channel's verdict on one call, with the current run's grants and the
        channel's "always" rule for the tool."""
        context = current_tool_use.get()
        if context is None:
            return self.policy.verdict(definition, arguments)
        granted = self._grants.get(context.run_id, set())
        always = self._book.find(context.channel, definition.qualified_name)
        policy = self.policy_of(context.channel)
        return policy.verdict(definition, arguments, granted=granted, always=always)

    # ---- a run pauses -----------------------------------------------------------------

    async def pause(self, run: Run, result: RunResult) -> str | None:
        """Take a paused run: stored, asked in the thread. None when it waits now;
        else why it cannot, and the run ends failed with that error.

        The scheduler holds the thread before this is called: a decision that
        arrives while the publish still waits for its ack finds the thread
        paused, and the resume job it leaves runs once the run's task ends.
        """
        try:
            request_id = await self._paused(run, result)
        except RequestNotPublished as exc:
            run.log.error("runtime.request_not_published", error=str(exc))
            return str(exc)
        except Exception as exc:
            run.log.exception("runtime.pause_failed")
            return f"the approval request could not be stored ({type(exc).__name__}: {exc})"
        crash_point("approval_published")  # stored, and asked in the thread
        run.log.info("runtime.run_paused", request=request_id)
        return None

    async def _paused(self, run: Run, result: RunResult) -> str:
        """Store the request (one statement), publish it, arm its expiry; its id."""
        assert result.paused is not None
        channel, thread_id, run_id, prompts = run.channel, run.thread_id, run.run_id, run.prompts
        pause = result.paused.pause
        request_id = new_request_id()
        requester = prompts[0].sender if prompts else ""
        now = self._clock()
        policy = self.policy_of(channel)
        expires = now + policy.expire_after
        conversation = {**result.paused.conversation, "pause_state": pause.state}
        new = NewApproval(
            id=request_id,
            run_id=run_id,
            channel=channel,
            thread_id=thread_id,
            requested_by=requester,
            expires=_iso(expires),
            calls=[asdict(c) for c in pause.calls],  # read back with PendingCall(**c)
            conversation=conversation,
            snapshot=pause.snapshot,
            requested=_iso(now),
        )
        await self._store.add_approval(new)
        if self._mirror is not None:  # before the id is published: any holder knows it then
            await self._mirror.shared(new, [p.id for p in prompts])
        crash_point("approval_stored")
        log.warning(
            "approvals.requested",
            request=request_id,
            run_id=run_id,
            channel=channel,
            thread=thread_id,
            calls=[f"{c.server}.{c.tool}" if c.server else c.tool for c in pause.calls],
        )
        text = request_text(
            request_id,
            pause.calls,
            deciders=policy.who_decides(requester),
            always=self._offers_always(policy),
        )
        reply_to = prompts[-1].id if prompts else thread_id
        if not await self._publish_request(channel, thread_id, reply_to, text, request_id):
            return request_id  # decided already: the hub had it, only its ack was lost
        self._arm(request_id, expires - now)
        return request_id

    async def _publish_request(
        self, channel: str, thread_id: str, reply_to: str, text: str, request_id: str
    ) -> bool:
        """Publish the request (True), as a reply is published: the channel resends it
        until ``publish_timeout``; then the request ends ``stopped`` (never resumed)
        and :class:`RequestNotPublished` fails the run, like a reply that cannot be
        published. False when a decision came first (nothing to fail then)."""
        try:
            async with asyncio.timeout(self._publish_timeout):
                await self._publisher.publish(
                    channel,
                    text,
                    thread=thread_id,
                    reply_to=reply_to,
                    client_id=reply_client_id(channel, f"approval:{request_id}"),
                )
            return True
        except Exception as exc:
            problem = f"the approval request could not be published ({type(exc).__name__}: {exc})"
            stored = await self._store.get_approval(request_id)
            decided = stored is not None and await self._decide(
                stored, "stopped", by=self._publisher.nick, reason=problem
            )
            if decided is False:
                log.warning("approvals.decided_unacked", request=request_id, error=problem)
                return False
            if decided:
                await self._store.mark_resumed(request_id)  # the run ends failed, not here
            raise RequestNotPublished(problem) from exc

    # ---- decisions ----------------------------------------------------------------------

    async def handle(self, message: InboundMessage) -> bool:
        """Take ``message`` if it is a decision (answered, acted on); False otherwise."""
        parsed = parse_decision(message.text)
        if parsed is None:
            return False

        async def say(text: str) -> None:
            await self._say(message, text)

        asker = _Asker(message.sender, (message.channel, message.thread), say)
        await self._take(parsed, asker)
        return True

    async def decide(self, command: str, *, by: str, where: str = "the console") -> Decided:
        """A decision taken outside the thread (the console): ``command`` is what ``by``
        would type in the thread (``!approve ID``, ``!approve ID run``, ``!approve ID
        always``, ``!deny ID [reason]``), parsed and decided by the very code of
        :meth:`handle`, with the same rights (the request's channel's approvers, or the
        prompt's author; "always" only for listed approvers). What a person in the
        thread would be told (a refusal, "already decided") comes back to the caller
        and not to the thread; a decision taken is said in the thread (its one line,
        then what the thread reads after the command: the rules "always" left), before
        the run goes on."""
        parsed = parse_decision(command)
        if parsed is None or isinstance(parsed, Show):
            return Decided(False, [f"not a decision: {command!r}"])
        answers: list[str] = []

        async def say(text: str) -> None:
            answers.append(text)

        thread: list[tuple[str, str, str]] = []  # (channel, thread, reply_to) once known

        async def announce(request: StoredApproval, text: str) -> None:
            if not thread:
                prompts = await self._store.run_prompts(request.run_id)
                reply_to = prompts[-1].id if prompts else request.thread_id
                thread.append((request.channel, request.thread_id, reply_to))
            channel, thread_id, reply_to = thread[0]
            answers.append(text)
            await publish_quietly(
                self._publisher,
                self._publish_timeout,
                channel,
                thread_id,
                reply_to,
                text,
                client_id=reply_client_id(channel, f"approval:{request.id}:{len(answers)}"),
            )

        decided = await self._take(parsed, _Asker(by, None, say, announce, where))
        return Decided(decided, answers)

    async def _take(self, parsed: Approve | Deny | Show | Malformed, asker: _Asker) -> bool:
        """A parsed decision (or ``!show``) from ``asker``: answered, acted on; whether a
        request was decided by it."""
        if isinstance(parsed, Malformed):
            await asker.say(parsed.problem)
            return False
        request = await self._store.get_approval(parsed.request_id)
        if request is None or (
            asker.thread is not None and (request.channel, request.thread_id) != asker.thread
        ):
            where = " in this thread" if asker.thread is not None else ""
            await asker.say(f"There is no approval request {echoed(parsed.request_id)}{where}.")
            return False
        who = f" by {request.decided_by}" if request.decided_by else ""
        if isinstance(parsed, Show):  # the request again, in full: anyone may read it
            calls = [PendingCall(**c) for c in request.calls]
            status = None if request.status == "pending" else f"{request.status}{who}"
            policy = self.policy_of(request.channel)
            text = request_text(
                request.id,
                calls,
                deciders=policy.who_decides(request.requested_by),
                decided=status,
                always=self._offers_always(policy),
            )
            await asker.say(text)
            return False
        if request.status != "pending":
            await asker.say(f"Request {request.id} was already {request.status}{who}.")
            return False
        if await self._refused(asker.sender, asker.say, request):
            return False
        rules: list[NewRule] = []
        if isinstance(parsed, Approve):
            refused = self._refused_now(request)
            if refused is not None:  # a deny written since it asked wins over any approval
                await asker.say(
                    f"Request {request.id} cannot be approved: {refused} now; !deny it to end it."
                )
                return False
            outcome: Outcome = "approved"
            scope: Literal["call", "run"] = "run" if parsed.whole_run else "call"
            reason = ""
            if parsed.always:
                refusal = self._always_refused(asker.sender, request)
                if refusal is not None:
                    await asker.say(refusal)
                    return False
                rules = self._new_rules(request, by=asker.sender)
                if rules and not await self._share_rules(asker.say, request, rules):
                    return False
        else:
            assert isinstance(parsed, Deny)
            outcome, scope, reason = "denied", "call", parsed.reason
        decided_here = await self._decide(
            request,
            outcome,
            by=asker.sender,
            reason=reason or None,
            scope=scope,
            say=asker.say,
            rules=rules,
        )
        if not decided_here and rules and self._mirror is not None:
            await self._mirror.withdraw_rules(rules)
        if decided_here is None:
            return False  # the cluster refused it; the asker was told why
        if not decided_here:
            await asker.say(f"Request {request.id} was already decided.")
            return False
        log.warning(
            "approvals.decided",
            request=request.id,
            decision=outcome,
            by=asker.sender,
            scope=scope,
            always=[r.tool for r in rules] or None,
            where=asker.where,
        )
        if asker.announce is not None:  # the thread did not see the command: it reads this
            always = isinstance(parsed, Approve) and parsed.always
            text = decided_elsewhere_text(
                request.id,
                asker.sender,
                approved=outcome == "approved",
                scope="always" if always else scope,
                reason=reason,
                where=asker.where,
            )
            await asker.announce(request, text)
        if rules:
            self._book = RuleBook([*self._book, *(_allow_rule(r) for r in rules)])
            self._grants_made += 1
            log.warning(
                "approvals.rules_granted",
                request=request.id,
                channel=request.channel,
                rules={r.id: r.tool for r in rules},
                by=asker.sender,
            )
            granted = [(r.id, r.tool) for r in rules]
            text = always_granted_text(request.channel, granted)
            if asker.announce is not None:
                await asker.announce(request, text)
            else:
                await asker.say(text)
        await self._hand_over(request)
        return True

    def offers_always(self, channel: str) -> bool:
        """Whether a request in ``channel`` offers ``!approve ID always`` (the console's
        Always button): this daemon keeps rules, and the channel lists approvers."""
        return self._offers_always(self.policy_of(channel))

    def _offers_always(self, policy: ApprovalPolicy) -> bool:
        """Whether a request in a channel of ``policy`` offers ``!approve ID always``."""
        return self._rules is not None and bool(policy.approvers)

    def _refused_now(self, request: StoredApproval) -> str | None:
        """Why the request's channel refuses one of its calls now (None: it refuses none).

        A request asked under the policy then in force; a ``deny`` glob or ``mode =
        "deny"`` written since (and a restart) refuses its calls, and an approval
        must not make them: an approved call leaves the sandbox without the gate."""
        policy = self.policy_of(request.channel)
        for call in request.calls:
            asked = _Asked(_qualified(call), call.get("why") == "destructive")
            verdict = policy.verdict(asked, call.get("arguments") or {})
            if verdict.action == "deny":
                return verdict.reason
        return None

    def _always_refused(self, sender: str, request: StoredApproval) -> str | None:
        """Why ``sender``'s ``!approve ID always`` is refused (None: it is not)."""
        policy = self.policy_of(request.channel)
        if self._rules is None:
            return "'always' is not available here: this daemon keeps no rules."
        if policy.may_grant_always(sender):
            return None
        return always_refused_text(request.id, request.channel, sender, policy.approvers)

    def _new_rules(self, request: StoredApproval, *, by: str) -> list[NewRule]:
        """One rule per ``server.tool`` of the request without a rule in its channel yet."""
        tools = dict.fromkeys(_qualified(c) for c in request.calls)
        granted = _iso(self._clock())
        return [
            NewRule(new_rule_id(), request.channel, tool, by, granted, request.id)
            for tool in tools
            if self._book.find(request.channel, tool) is None
        ]

    async def _share_rules(self, say: Say, request: StoredApproval, rules: list[NewRule]) -> bool:
        """In a cluster, the rules on the broker before the decision (else one line)."""
        if self._mirror is None or await self._mirror.share_rules(rules):
            return True
        await say(
            f"Request {request.id} could not be decided now (the daemons' broker did not "
            "take the rule); please send the decision again.",
        )
        return False

    async def stop(self, message: InboundMessage) -> bool:
        """``!stop`` (``message``) on a paused run of its thread: the request ends as
        stopped, and the run is handed back to end there; False when the thread has no
        pending request. Stopping decides the request, so it needs the right to decide:
        anyone else gets the one line ``!deny`` would give them, and nothing stops."""
        for request in await self._store.pending_approvals():
            if (request.channel, request.thread_id) != (message.channel, message.thread):
                continue

            async def say(text: str) -> None:
                await self._say(message, text)

            if await self._refused(message.sender, say, request):
                return True
            decided_here = await self._decide(request, "stopped", by=message.sender)
            if decided_here is None:
                return True  # the thread's run is another daemon's now, or later
            if decided_here:
                await self._hand_over(request)
                return True
        return False

    async def _refused(self, sender: str, say: Say, request: StoredApproval) -> bool:
        """Whether ``sender`` may not decide ``request`` (then told so, by ``say``): by the
        approvers of the request's channel."""
        policy = self.policy_of(request.channel)
        if policy.may_decide(sender, request.requested_by):
            return False
        await say(
            f"{sender} may not decide request {request.id}: only "
            f"{policy.who_decides(request.requested_by)} may.",
        )
        return True

    async def resumed(self, request_id: str) -> None:
        """The scheduler finished (or paused again) the resumed run: the decision is used."""
        await self._store.mark_resumed(request_id)

    # ---- start and stop ---------------------------------------------------------------

    async def start(self) -> int:
        """After a restart: keep paused threads busy, re-arm expiries, publish each
        pending request again, resume decisions taken but not acted on. Returns how
        many requests it found. The "always" rules are read first, and again
        every ``rules_refresh`` seconds from then on."""
        await self.refresh_rules()
        if self._rules is not None and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="approval rules")
        pending = await self._store.pending_approvals()
        for request in pending:
            self._restore(request)
            await self._ask_again(request)
        decided = await self._store.unresumed_decisions()
        for request in decided:
            if self._hold is not None:
                self._hold(request.channel, request.thread_id)
            await self._hand_over(request)
        if pending or decided:
            log.info("approvals.restored", pending=len(pending), decided=len(decided))
        return len(pending) + len(decided)

    async def adopt(self, request_id: str) -> bool:
        """A pending request another daemon stored here (its thread moved): its thread
        kept busy, its expiry armed, so ``!approve ID`` resumes it here; False when
        it is not pending."""
        request = await self._store.get_approval(request_id)
        if request is None or request.status != "pending":
            return False
        self._restore(request)
        log.warning("approvals.adopted", request=request_id, thread=request.thread_id)
        return True

    async def _ask_again(self, request: StoredApproval) -> None:
        """Publish a pending request again, under its own ``client_id``: the hub keeps
        one copy, and a request stored just before a crash cut its publish off is
        seen (issue 26). A failure is logged: the next start tries again."""
        calls = [PendingCall(**c) for c in request.calls]
        policy = self.policy_of(request.channel)
        deciders = policy.who_decides(request.requested_by)
        prompts = await self._store.run_prompts(request.run_id)
        await publish_quietly(
            self._publisher,
            self._publish_timeout,
            request.channel,
            request.thread_id,
            prompts[-1].id if prompts else request.thread_id,
            request_text(request.id, calls, deciders=deciders, always=self._offers_always(policy)),
            client_id=reply_client_id(request.channel, f"approval:{request.id}"),
        )

    def _restore(self, request: StoredApproval) -> None:
        if self._hold is not None:
            self._hold(request.channel, request.thread_id)
        if request.id not in self._timers:
            self._arm(request.id, _seconds(request.expires) - self._clock())

    async def refresh_rules(self) -> None:
        """Read the rules in force again (in a cluster, the broker's); a failure is logged
        and the rules read before stay in force."""
        if self._rules is None:
            return
        before = self._grants_made
        try:
            found: Sequence[StoredRule]
            if self._mirror is not None:
                found = await self._mirror.rules_in_force()
            else:
                found = await self._rules.rules()
        except Exception as exc:
            if not self._rules_unread:  # once per outage, not every second
                log.warning("approvals.rules_not_read", error=f"{type(exc).__name__}: {exc}")
            self._rules_unread = True
            return
        if self._rules_unread:
            log.warning("approvals.rules_read_again")
            self._rules_unread = False
        if self._grants_made != before:
            return  # read before a rule granted meanwhile: the next refresh has it
        book = RuleBook(_allow_rule(r) for r in found)
        gone = {r.id for r in self._book} - {r.id for r in book}
        if gone:
            log.warning("approvals.rules_revoked", rules=sorted(gone))
        self._book = book

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._rules_refresh)
            await self.refresh_rules()

    async def close(self) -> None:
        """Cancel the rules' refresh and the expiry timers (the requests stay stored and
        are re-armed at start)."""
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None
        timers = list(self._timers.values())
        self._timers.clear()
        for task in timers:
            task.cancel()
        await asyncio.gather(*timers, return_exceptions=True)

    # ---- internals --------------------------------------------------------------------

    def _arm(self, request_id: str, delay: float) -> None:
        task = asyncio.create_task(
            self._expire_later(request_id, max(0.0, delay)), name=f"approval {request_id}"
        )
        self._timers[request_id] = task
        task.add_done_callback(lambda t: self._timer_done(request_id, t))

    def _timer_done(self, request_id: str, task: asyncio.Task[None]) -> None:
        if self._timers.get(request_id) is task:  # not a timer armed again since
            del self._timers[request_id]

    async def _expire_later(self, request_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            request = await self._store.get_approval(request_id)
            if request is None or request.status != "pending":
                return  # decided meanwhile
            decided_here = await self._decide(request, "expired", by="expiry", retry=True)
            if not decided_here:
                return  # decided meanwhile, moved, or armed again
            log.warning("approvals.expired", request=request_id)
            await self._hand_over(request)
        except Exception:
            # the request stays pending in the store; the next start expires it
            log.exception("approvals.expiry_failed", request=request_id)

    async def _decide(
        self,
        request: StoredApproval,
        outcome: Outcome,
        *,
        by: str,
        reason: str | None = None,
        scope: Literal["call", "run"] | None = None,
        say: Say | None = None,
        retry: bool = False,
        rules: Sequence[NewRule] = (),
    ) -> bool | None:
        """Record the decision once: with several daemons across them first, then here.
        True: decided by this call; False: decided before; None: the cluster refused
        it (another daemon holds the thread, or the broker did not answer: then ``say``
        tells the asker, or with ``retry`` the expiry is armed again)."""
        async with self._deciding:  # one decision at a time: an expiry and an !approve race
            if self._mirror is not None:
                shared = await self._mirror.decide(request, outcome)
                if shared != "ok":
                    if shared == "moved":
                        await self._forget(request)
                        text = f"Request {request.id} was already decided, or its thread moved."
                    else:
                        text = (
                            f"Request {request.id} could not be decided now (the daemons' "
                            "broker did not answer); please send the decision again."
                        )
                        if retry:
                            self._arm(request.id, RETRY_DECISION)
                    if say is not None:
                        await say(text)
                    return None
            return await self._store.decide_approval(
                request.id, outcome, by=by, reason=reason, scope=scope, rules=rules
            )

    async def _forget(self, request: StoredApproval) -> None:
        """Another daemon holds the thread (or decided it): the local copy ends unresumed."""
        timer = self._timers.pop(request.id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        if await self._store.decide_approval(
            request.id, "stopped", by="cluster", reason="the thread moved to another daemon"
        ):
            await self._store.mark_resumed(request.id)
        log.warning("approvals.moved", request=request.id, thread=request.thread_id)

    async def _hand_over(self, request: StoredApproval) -> None:
        """Give the scheduler the job that goes on with the decided run.

        ``request`` as read before its decision: the decision is read back with
        the run's other requests (one read for both: its grants, and this one).
        """
        timer = self._timers.pop(request.id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        stored = await self._store.run_prompts(request.run_id)
        prompts = [
            InboundMessage(p.channel, p.id, p.thread_id, p.sender, p.text, ts=p.ts) for p in stored
        ]
        for earlier in await self._store.run_approvals(request.run_id):
            if earlier.id == request.id:
                request = earlier  # with its decision
            if earlier.status == "approved" and earlier.scope == "run":
                self._grants.setdefault(request.run_id, set()).update(
                    _qualified(c) for c in earlier.calls
                )
        if request.status == "pending":
            raise RuntimeError(f"approval {request.id} is not decided")
        outcome: Outcome = request.status
        job = ResumeJob(
            request_id=request.id,
            run_id=request.run_id,
            channel=request.channel,
            thread_id=request.thread_id,
            prompts=prompts,
            outcome=outcome,
            run=lambda: self._go_on(request, prompts),
        )
        if self._schedule is None:
            raise RuntimeError("the approval desk is not bound to a scheduler")
        self._schedule(job)

    async def _go_on(self, request: StoredApproval, prompts: list[InboundMessage]) -> RunResult:
        """The resumed run's result (or, for a stopped request, the stop)."""
        if request.status == "stopped":
            by = request.decided_by or "someone"
            return RunResult(
                reply=f"Stopped by {by}.", status="interrupted", error=f"stopped by {by}"
            )
        decisions = self._decisions(request)
        conversation = dict(request.conversation)
        state = conversation.pop("pause_state", {})
        calls = tuple(PendingCall(**c) for c in request.calls)
        pause = Pause(calls=calls, snapshot=request.snapshot, state=state)
        run_request = RunRequest(
            run_id=request.run_id,
            channel=request.channel,
            thread_id=request.thread_id,
            history=[],
            prompts=[Prompt(m.id, m.sender, m.text) for m in prompts],
        )
        return await self._resume(run_request, PausedRun(pause, conversation), decisions)

    def finished(self, run_id: str) -> None:
        """The run is over: its grants go (they never outlive it)."""
        self._grants.pop(run_id, None)

    def _decisions(self, request: StoredApproval) -> dict[int, Decision]:
        waited = 0.0
        if request.decided is not None:
            waited = max(0.0, (_seconds(request.decided) - _seconds(request.requested)) * 1000)
        if request.status == "approved":
            decision = Decision(True, request.decided_by or "", "", waited, "approved")
        elif request.status == "expired":
            expire_after = self.policy_of(request.channel).expire_after
            reason = f"the request expired after {expire_after:g} s"
            decision = Decision(False, "expiry", reason, waited, "expired")
        else:
            decision = Decision(
                False, request.decided_by or "", request.reason or "", waited, "denied"
            )
        return {int(c["call_id"]): decision for c in request.calls}

    async def _say(self, asked: InboundMessage, text: str) -> None:
        """Answer ``asked`` with a line in its thread; a failure is logged (the state is
        in the store)."""
        await publish_quietly(
            self._publisher,
            self._publish_timeout,
            asked.channel,
            asked.thread,
            asked.id,
            text,
            client_id=reply_client_id(asked.channel, f"approval:{asked.id}"),
        )


@dataclass(frozen=True)
class _Asked:
    """A stored request's call as the gate reads a tool: it asked, so it is mutating."""

    qualified_name: str
    destructive: bool
    mutating: bool = True


def _allow_rule(rule: NewRule | StoredRule) -> AllowRule:
    return AllowRule(
        rule.id, rule.channel, rule.tool, rule.granted_by, rule.granted, rule.request_id
    )


def _qualified(call: Mapping[str, Any]) -> str:
    server = call.get("server")
    return f"{server}.{call['tool']}" if server else str(call["tool"])
