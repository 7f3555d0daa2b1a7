"""One daemon's part in a cluster: its connection, leases, router, scopes and audit export.

:class:`ClusterNode` is what :class:`daemon.app.Daemon` adds when
``[channels] url`` is a ``nats://`` URL. It owns three background tasks:

- the heartbeat and scan, every ``takeover_seconds / 6`` from the moment it
  joins: the member key rewritten, the live members read, and (once the
  runtime runs) the remembered prompts of other daemons' threads checked
  (:meth:`daemon.cluster.router.ThreadRouter.scan`);
- the hand-off: prompts of taken-over threads (and the notices of runs cut
  off after a mutating call) to the runtime, in thread order, so that the
  heartbeat never waits for the runtime's back-pressure;
- the audit exporter (:class:`daemon.cluster.audit.AuditExporter`).

The requests of runs paused for approval (and the ``!approve ID always`` rules,
:mod:`daemon.cluster.rules`) are shared and decided through
:class:`daemon.cluster.approvals.ClusterApprovals` (the desk's mirror, given to
the desk as it is built; it learns the desk in :meth:`ClusterNode.wrap`); a
taken-over thread's request is loaded into this daemon in the hand-off, before
the thread's newer messages.

The member key lives ``2/3 × takeover_seconds`` after its last beat, so a
daemon that dies (SIGKILL, a lost host) is gone from the members bucket
after at most that long, and its threads are taken over at the next scan of
another daemon: within ``5/6 × takeover_seconds``. A daemon that stops
cleanly removes its key at once.

A daemon whose channel policies differ from a live member's does not join
(:mod:`daemon.cluster.policies`): the start fails with one line naming the
channel.

The daemon's identity is ``cluster.member`` beside its database (a UUID
made at its first start), so a restarted daemon is the same member and
keeps its threads when it comes back in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import structlog
from nats.aio.client import Client

from daemon.cluster.approvals import ClusterApprovals, PausedStates
from daemon.cluster.audit import AuditExporter, ensure_audit_stream
from daemon.cluster.connect import connect_nats
from daemon.cluster.errors import ClusterError, ThreadMoved, honour_cancel
from daemon.cluster.history import stream_history, stream_replied
from daemon.cluster.leases import Leases
from daemon.cluster.policies import check_join, presence, read_started
from daemon.cluster.router import MovedApproval, Routed, ThreadRouter
from daemon.cluster.rules import ClusterRules
from daemon.cluster.scopes import ObjectScopeStore
from daemon.cluster.store import ClusterRuntimeStore
from daemon.cluster.usage import ClusterSenderLimiter, SenderCounts
from daemon.config import Config
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.interrupted import report_interrupted
from daemon.runtime.limits import SenderLimits, SenderUsage
from daemon.runtime.ports import InboundMessage, RuntimePublisher, mentions
from daemon.runtime.runs import HistoryTurn, current_tool_use
from daemon.runtime.scopes import load_or_create_key
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import AuditEntry, PersistentScopes, ThreadKey
from sessions.errors import StoreError
from sessions.model import InterruptedRun
from sessions.store import Store

__all__ = [
    "MEMBER_FILE",
    "ClusterNode",
    "is_cluster_url",
    "member_id",
    "open_cluster",
]

Item = Routed  # what the hand-off carries: prompts, notices, and moved approval requests

log = structlog.get_logger("asyncai.cluster")

MEMBER_FILE = "cluster.member"
CLOSE_TIMEOUT = 5.0  # seconds for the last audit export and leaving, at shutdown
ROUTE_RETRY = 0.5  # seconds between two tries to route a message while the broker is away


def is_cluster_url(url: str) -> bool:
    """Whether ``[channels] url`` names a NATS broker (the cluster is wired then)."""
    return url.startswith(("nats://", "tls://"))


def member_id(state_dir: Path) -> str:
    """This daemon's member id: ``state_dir/cluster.member``, made once."""
    path = state_dir / MEMBER_FILE
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    except OSError as exc:
        raise ClusterError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if found:
        return found
    made = uuid.uuid4().hex
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(made + "\n")
    except OSError as exc:
        raise ClusterError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return made


class ClusterNode:
    """See the module docstring. :meth:`open`, :meth:`start`, then :meth:`close`."""

    def __init__(
        self,
        nc: Client,
        store: Store,
        *,
        nick: str,
        member: str,
        takeover_seconds: float,
        scope_key: bytes,
        max_scope_bytes: int,
        scope_retention: float,
        state_dir: Path,
        publish_timeout: float = 60.0,
    ):
        self._nc = nc
        self._store = store
        self._nick = nick
        # the runtime's rules of who is answered ([channels] shared, allowed_senders)
        self.shared_channels: frozenset[str] = frozenset()
        self.allowed_senders: frozenset[str] | None = None
        self._publish_timeout = publish_timeout
        self._wrapped: ClusterRuntimeStore | None = None
        self._publisher: RuntimePublisher | None = None
        js = nc.jetstream()
        self.takeover_seconds = takeover_seconds
        self.leases = Leases(js, nick, member, member_ttl=takeover_seconds * 2 / 3)
        self.router = ThreadRouter(self.leases, replied=self._replied)
        self.scopes = ObjectScopeStore(
            js, nick, scope_key, max_bytes=max_scope_bytes, retention_seconds=scope_retention
        )
        self.exporter = AuditExporter(js, store.replica, state_dir, interval=takeover_seconds)
        self.approvals = ClusterApprovals(
            PausedStates(js, nick, scope_key, retention_seconds=scope_retention),
            self.leases,
            store,
            ClusterRules(js, nick, store.rules),
        )
        self.counts = SenderCounts(js, nick)  # per-sender limits, across the daemons
        self._js = js
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._submit: Callable[[InboundMessage], Awaitable[object]] | None = None
        # taken-over prompts on their way to the runtime; a thread's new messages wait behind
        self._handoff: deque[Item] = deque()
        self._handing: Counter[tuple[str, str]] = Counter()
        self._handoff_ready = asyncio.Event()

    @classmethod
    async def open(
        cls,
        url: str,
        store: Store,
        *,
        token: str | None,
        nick: str,
        takeover_seconds: float,
        scope_key: bytes,
        max_scope_bytes: int,
        scope_retention: float,
        state_dir: Path,
        publish_timeout: float = 60.0,
        policies: Mapping[str, str] | None = None,
    ) -> ClusterNode:
        """Connect, open the buckets and the audit stream, check that this daemon's channel
        ``policies`` (digests by channel) are the live members' (:mod:`.policies`:
        :class:`PolicyMismatch` if not), beat once."""
        member = member_id(state_dir)
        nc = await connect_nats(url, token=token, name=f"asyncai-cluster-{member[:8]}")
        node = cls(
            nc,
            store,
            nick=nick,
            member=member,
            takeover_seconds=takeover_seconds,
            scope_key=scope_key,
            max_scope_bytes=max_scope_bytes,
            scope_retention=scope_retention,
            state_dir=state_dir,
            publish_timeout=publish_timeout,
        )
        try:
            await node.leases.open()
            if policies is not None:
                node.leases.presence = presence(policies, started=time.time())
                check_join(policies, await node.leases.member_values(), me=member)
            await node.scopes.open()
            await node.approvals.states.open()
            if node.approvals.rules is not None:
                await node.approvals.rules.open()
            await node.counts.open()
            await ensure_audit_stream(node._js)
            await node.router.beat()
        except BaseException:
            await nc.close()
            raise
        # Beating from now on: starting the rest of the daemon (the pool, the MCP
        # servers) may take longer than the key lives, and a daemon whose key is gone
        # while it claims threads would lose them to the others at once.
        node._tasks.append(asyncio.create_task(node._beat(), name="asyncai-cluster"))
        log.warning("cluster.joined", member=member, live=sorted(node.router.live))
        return node

    async def members(self) -> dict[str, float | None]:
        """The cluster's live members (this daemon's too) and when each started (None:
        its key does not say). Raises :class:`ClusterError` when the broker is away."""
        return {m: read_started(v) for m, v in (await self.leases.member_values()).items()}

    @property
    def member(self) -> str:
        """This daemon's member name."""
        return self.leases.member

    def wrap(
        self,
        inner: SessionsRuntimeStore,
        desk: ApprovalDesk | None = None,
        executor: object = None,
    ) -> ClusterRuntimeStore:
        """The runtime's store reporting to the cluster; its cursor kept before the
        prompts other daemons have not answered yet (a restart reads them again).
        ``desk``'s requests are shared with the other daemons, decided once.
        ``executor``'s REPL of a thread taken over (back) is dropped, if it keeps
        REPLs: the stored one is newer."""
        if isinstance(executor, PersistentScopes):
            forget = executor.forget

            async def taken(key: tuple[str, str]) -> None:
                await forget(ThreadKey(*key))

            self.router.on_taken = taken
        inner.cursor_cap = self.router.cursor_cap
        self._wrapped = ClusterRuntimeStore(
            inner,
            self.leases,
            self.router,
            finished=self.exporter.kick,
            earlier=self._earlier,
            stored=self._stored_run,
            not_rerun=self._not_rerun,
        )
        if desk is not None:
            self.approvals.bind(desk, self._wrapped)
        self.scopes.bind(self.leases, self._wrapped.running_through)
        return self._wrapped

    def limiter(
        self, local: SenderUsage, limits: SenderLimits, *, channel: str | None = None
    ) -> ClusterSenderLimiter:
        """The per-sender limits counted on the broker across the daemons
        (:mod:`daemon.cluster.usage`); ``local``: this daemon's database, checked
        when the broker cannot be reached; ``channel``: a channel's own limiter, which
        counts that channel's runs only. Call after :meth:`wrap`.

        A run's tokens are added on the broker by one limiter that counts tokens (the
        runs are the sender's, whichever limiter admitted them)."""
        limiter = ClusterSenderLimiter(
            self.counts, local, limits, run_senders=self._run_senders, channel=channel
        )
        wrapped = self._wrapped
        if wrapped is not None and (
            wrapped.tokens is None or limits.max_tokens_per_day is not None
        ):
            wrapped.tokens = limiter.spent
        return limiter

    async def _run_senders(self, run_id: str) -> set[str]:
        try:
            return {p.sender for p in await self._store.approvals.run_prompts(run_id)}
        except StoreError as exc:
            raise ClusterError(f"cannot read the senders of run {run_id}: {exc}") from exc

    def start(
        self, submit: Callable[[InboundMessage], Awaitable[object]], publisher: RuntimePublisher
    ) -> None:
        """Start the heartbeat-and-scan loop, the hand-off of taken-over prompts to
        ``submit`` (the runtime's; notices through ``publisher``) and the audit exporter."""
        self._submit = submit
        self._publisher = publisher
        for notice in self.router.notices:
            self._hand(notice)
        self.router.notices.clear()
        for work, name in (
            (self._hand_off(), "asyncai-cluster-handoff"),
            (self.exporter.run(), "asyncai-audit-export"),
        ):
            self._tasks.append(asyncio.create_task(work, name=name))

    async def feed(self, message: InboundMessage, own_nick: str) -> None:
        """One inbound message: to the runtime if its thread is this daemon's (behind
        any taken-over prompts of the thread still being handed over), else remembered.

        A message no daemon answers (a sender outside ``allowed_senders``; in a
        shared channel, no mention of the nick in a thread nobody holds) goes
        to the runtime as it is, which ignores it: no thread is claimed for it
        and no daemon remembers it.
        """
        assert self._submit is not None, "start() first"
        for ready in await self._route(message, own_nick):
            if isinstance(ready, InboundMessage) and not self._handing[_key(ready)]:
                await self._submit(ready)
            else:
                self._hand(ready)

    async def _route(self, message: InboundMessage, own_nick: str) -> list[Item]:
        # The broker away for a moment (a restart) must not end the intake; away
        # for longer than a takeover, the daemon gives up (exit 1, systemd restarts it).
        deadline = asyncio.get_running_loop().time() + self.takeover_seconds
        while True:
            try:
                if await self._unanswered(message, own_nick):
                    self.router.seen(message)
                    return [message]  # the runtime ignores it (and moves the cursor)
                return await self.router.route(message, own_nick)
            except ClusterError as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                log.warning("cluster.route_failed", error=str(exc), action="retrying")
                await asyncio.sleep(ROUTE_RETRY)

    async def _unanswered(self, message: InboundMessage, own_nick: str) -> bool:
        """Whether no daemon would answer ``message`` (the runtime's own rules)."""
        if message.sender == own_nick:
            return False  # routed: the router notes where the channel is
        if self.allowed_senders is not None and message.sender not in self.allowed_senders:
            return True
        if message.channel not in self.shared_channels or mentions(message.text, own_nick):
            return False
        return await self.leases.get(message.channel, message.thread) is None

    def _hand(self, item: Item) -> None:
        self._handing[_key(item)] += 1
        self._handoff.append(item)
        self._handoff_ready.set()

    async def _hand_off(self) -> None:
        """Taken-over prompts to the runtime, in order; never blocks the heartbeat."""
        assert self._submit is not None
        while True:
            honour_cancel()
            await self._handoff_ready.wait()
            while self._handoff:
                item = self._handoff.popleft()
                key = _key(item)
                try:
                    if isinstance(item, InboundMessage):
                        await self._submit(item)
                    elif isinstance(item, MovedApproval):
                        await self._adopt(item)
                    else:
                        await self._report(item)
                finally:
                    self._handing[key] -= 1
                    if not self._handing[key]:
                        del self._handing[key]
            self._handoff_ready.clear()

    async def _stored_run(self, run_id: str) -> tuple[tuple[str, str], list[str]] | None:
        try:
            prompts = await self._store.approvals.run_prompts(run_id)
        except StoreError as exc:
            log.warning("cluster.run_not_read", run_id=run_id, error=str(exc))
            return None
        if not prompts:
            return None
        return (prompts[0].channel, prompts[0].thread_id), [p.id for p in prompts]

    async def _earlier(self, channel: str, thread: str, before: str) -> list[HistoryTurn]:
        return await stream_history(self._js, channel, thread, before, self._nick)

    async def _replied(self, channel: str, thread: str) -> str:
        return await stream_replied(self._js, channel, thread, self._nick)

    async def _adopt(self, moved: MovedApproval) -> None:
        """A moved thread's request, loaded here; if it cannot be, its prompts run again."""
        assert self._submit is not None
        if not await self.approvals.adopt(moved):
            for message in moved.prompts:
                await self._submit(message)

    async def _report(self, run: InterruptedRun) -> None:
        """The notice of a run the old holder cut off after a mutating call; its
        prompts then count as answered (the single-daemon rule, moved)."""
        assert self._wrapped is not None
        assert self._publisher is not None
        await self._not_rerun(run)
        self._wrapped.note((run.channel, run.thread_id), run.prompt_ids)
        await report_interrupted(run, self._wrapped, self._publisher, self._publish_timeout)

    async def _not_rerun(self, run: InterruptedRun) -> None:
        """A run cut off after a mutating call is noticed, not run again: its REPL dumps
        go first, so the thread's REPL goes on from before it (:mod:`.scopes`)."""
        if not run.prompt_ids:
            return
        try:
            await self.scopes.forget_from(
                ThreadKey(run.channel, run.thread_id), min(run.prompt_ids)
            )
        except ClusterError as exc:
            log.warning("cluster.scope_not_forgotten", thread=run.thread_id, error=str(exc))

    async def mutating_started(self, entry: AuditEntry) -> None:
        """Record in the thread's entry, before the call goes out, that the current
        run starts a mutating call (a daemon taking over then does not repeat it).

        Fails closed (issue 26 §2.3): a call that cannot be recorded on the
        broker (unreachable, the bucket refused the write, the run is not
        known here) raises :class:`ClusterError`, and code mode does not make
        it. It is also the fence of the call: :class:`ThreadMoved` when another
        daemon holds the thread now (this one's lease lapsed while the snippet ran).
        """
        context = current_tool_use.get()
        if context is None or self._wrapped is None:
            log.error("cluster.mutating_not_recorded", tool=entry.tool, error="no run")
            raise ClusterError(f"no run of this daemon's to record the call of {entry.tool} under")
        run = await self._wrapped.known_run(context.run_id)
        if run is None:
            log.error("cluster.mutating_not_recorded", run_id=context.run_id, error="unknown run")
            raise ClusterError(f"run {context.run_id} is not known to the cluster")
        (channel, thread), prompts = run
        try:
            await self.leases.mark_mutating(
                channel, thread, context.run_id, prompts, (entry.tool, entry.arguments)
            )
        except ThreadMoved as exc:
            log.error(
                "cluster.call_fenced",
                channel=channel,
                thread=thread,
                run_id=context.run_id,
                tool=entry.tool,
                owner=exc.owner,
            )
            raise
        except ClusterError as exc:
            log.error("cluster.mutating_not_recorded", thread=thread, error=str(exc))
            raise

    async def _beat(self) -> None:
        interval = self.takeover_seconds / 6
        while True:
            honour_cancel()
            await asyncio.sleep(interval)
            try:
                await self.router.beat()
                if self._submit is not None:  # started: taken-over prompts have a runtime
                    await self.router.scan(self._hand)
            except ClusterError as exc:
                log.warning("cluster.beat_failed", error=str(exc), action="retrying")

    async def close(self) -> None:
        """Stop the loops, send the last audit, leave the members (threads move now)."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # bounded: a task that swallowed its cancel must not hold the shutdown
            _, pending = await asyncio.wait(self._tasks, timeout=CLOSE_TIMEOUT)
            if pending:
                log.error("cluster.tasks_not_stopped", tasks=[repr(t) for t in pending])
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.exporter.send_new()
                await self.leases.leave()
        except (ClusterError, TimeoutError, OSError) as exc:
            log.warning("cluster.leave_failed", error=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self._nc.close()


async def open_cluster(config: Config, store: Store) -> ClusterNode | None:
    """The cluster part of a daemon whose ``[channels] url`` is ``nats://``; else None.

    The scope key is the daemon's own ``scope.key`` (beside its database),
    which must be the same file on every daemon of the cluster.
    """
    if not is_cluster_url(config.channels.url):
        return None
    state_dir = config.sessions.db.parent
    node = await ClusterNode.open(
        config.channels.url,
        store,
        token=config.channels.token,
        nick=config.channels.nick,
        takeover_seconds=config.channels.takeover_seconds,
        scope_key=load_or_create_key(state_dir),
        max_scope_bytes=config.code_mode.limits().max_scope_dump,
        scope_retention=config.sessions.scope_retention_days * 86_400,
        state_dir=state_dir,
        publish_timeout=config.runtime.publish_timeout,
        policies={name: policy.digest() for name, policy in config.policies().items()},
    )
    node.shared_channels = frozenset(config.channels.shared)
    node.allowed_senders = frozenset(config.channels.allowed_senders) or None
    return node


def _key(item: Item) -> tuple[str, str]:
    if isinstance(item, InboundMessage | MovedApproval):
        return item.channel, item.thread
    return item.channel, item.thread_id
