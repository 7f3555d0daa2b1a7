"""The wiring: a running daemon built from a :class:`~daemon.config.Config`.

:class:`Daemon` assembles the real pieces around :class:`daemon.runtime.Runtime`:

- the sessions ``Store`` (opened first: every prompt is recorded before
  anything else happens to it);
- the MCP servers over stdio, started once (:func:`build_mcp_executor`), and
  each channel's lane (:mod:`daemon.lanes`, issue 29): the tools its policy
  sees (a view of those servers), the executor its tool mode asks for
  (:func:`build_tool_executor`: code mode unless direct) with an audit
  observer that commits a ``tool_calls`` row as each call starts and ends (a
  mutating call waits for it), and the OpenAI-compatible backend of its
  endpoint (it appends the executor's variables note to the newest user
  message: after an eviction or a restart, the REPL is empty);
- the channel: subscribed with ``since`` = the stored cursor of each
  channel, after the prompts recorded but not done were scheduled again. A
  channel without a cursor is read from the daemon's first start (stored
  once, :meth:`sessions.store.Store.first_start_cursor`), so nothing
  published after the daemon was installed is missed. While chunks of a
  split prompt are held, the channel's cursor stays before them.

Before ``READY=1``, ``gc.freeze()`` hides startup's objects from the collector (a full
collection walking them stalled the loop 100-140 ms: ``bench/daemon.py``).

systemd (``Type=notify``, no extra dependency): ``READY=1`` once subscribed,
``WATCHDOG=1`` every half of ``WATCHDOG_USEC`` while the intake is alive, the
channel healthy and the runtime not wedged (:mod:`daemon.runtime.watchdog`),
``STATUS=`` with active runs, queued prompts and live REPL scopes, and
``STOPPING=1`` at shutdown.

While a run works, its progress goes to its thread as channel ``status``
frames (:mod:`daemon.runtime.progress`; never after the reply).

With ``[web] listen`` set, the operator's console (:mod:`daemon.web`, issue
30) is served by uvicorn on this same event loop, started last before
``READY=1`` and stopped first at shutdown; without its tokens file the daemon
does not start (the message says how to make one).

Shutdown (SIGTERM, SIGINT, or :meth:`Daemon.request_stop`), in a fixed order:
stop reading the channel, give active runs ``runtime.shutdown_grace`` seconds,
cancel the rest and record them interrupted (their prompts are answered after
the next start), close the executor (the Monty pool and the MCP servers), the
backend's HTTP client, the channel and the store. :meth:`Daemon.run` returns
0; 1 when the daemon could not start or the hub went away for good. Whatever
ends it (an unexpected error, a cancellation), it closes everything first, and
one failing close does not skip the others.

The only module that knows every part: it may import all of daemon/ but
``daemon.cli``, and ``channels`` and ``sessions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from channels.client import Channel, WebSocketChannel
from channels.errors import ChannelError
from channels.ids import id_for_time
from channels.nats import NatsChannel
from channels.notify import notify
from channels.transport import id_space, open_channel
from daemon.approvals import ApprovalPolicy, Decision, GatedTool, Verdict
from daemon.cluster import (
    ClusterNode,
    audited,
    clustered,
    counted,
    fenced,
    mirror,
    open_cluster,
)
from daemon.code_mode.repl import ScopeStore
from daemon.config import ChannelPolicy, Config
from daemon.errors import AsyncaiError, ConfigError
from daemon.lanes import Lanes, LaneTools, build_mcp_executor, build_tool_executor, channel_tools
from daemon.runtime import Runtime, RuntimeOptions, RuntimeStore, cancel_until_done
from daemon.runtime.audit import audit_observer
from daemon.runtime.desk import ApprovalDesk
from daemon.runtime.intake import ChannelPublisher, ChunkJoiner, inbound
from daemon.runtime.limits import SenderLimiter, SenderLimits
from daemon.runtime.progress import (
    PROGRESS_GRACE,
    PROGRESS_INTERVAL,
    RunProgress,
    progress_observer,
    showing_progress,
)
from daemon.runtime.runs import PausedRun, RunRequest, RunResult
from daemon.runtime.scopes import SignedScopeStore, load_or_create_key
from daemon.runtime.store import SessionsRuntimeStore
from daemon.runtime.timing import RunTimeline, WaitedDecision, timing_observer
from daemon.runtime.watchdog import health_problems, heartbeat
from daemon.telemetry import Readings, Telemetry, with_metrics
from daemon.tools import ToolExecutor
from sessions.errors import StoreError
from sessions.ids import thread_key
from sessions.scopes import Scopes, scope_cutoff
from sessions.store import Store

if TYPE_CHECKING:  # the console is imported only when [web] listen asks for it
    from daemon.web import Console, HealthReport, WebServer

__all__ = [
    "Daemon",
    "running",
    "runtime_options",
]

log = structlog.get_logger("asyncai.daemon")

# The backend enforces max_run_seconds itself and reports it well; the
# runtime's own deadline is a safety net just behind it.
RUN_DEADLINE_MARGIN = 30.0
# Monty's worker pool needs the loop a moment after closing (notes/monty.md §10).
POOL_SETTLE = 0.05


def runtime_options(config: Config) -> RuntimeOptions:
    """The runtime's limits and policies from ``[runtime]`` and ``[channels]``, and each
    channel's ``max_concurrent_runs`` (a cap within the daemon's, issue 29)."""
    allowed = config.channels.allowed_senders
    caps = {
        channel: cap
        for channel in config.channels.channels
        if (cap := config.policy(channel).max_concurrent_runs) is not None
    }
    return RuntimeOptions(
        max_concurrent_runs=config.runtime.max_concurrent_runs,
        max_queued_prompts=config.runtime.max_queued_prompts,
        max_run_seconds=config.runtime.max_run_seconds + RUN_DEADLINE_MARGIN,
        shutdown_grace=config.runtime.shutdown_grace,
        publish_timeout=config.runtime.publish_timeout,
        shared_channels=frozenset(config.channels.shared),
        allowed_senders=frozenset(allowed) if allowed else None,
        channel_max_concurrent=caps,
    )


# ---- the daemon -------------------------------------------------------------------------


class Daemon:
    """One daemon: :meth:`start`, then :meth:`wait` until stopped, then :meth:`aclose`.

    ``channel`` and ``executor`` replace the ones the config describes (tests
    and ``asyncai up`` pass a client for their in-process hub); an ``executor``
    handed in serves every channel as it is (no channel's tools are filtered). ``env`` is
    where ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` are read (default
    ``os.environ``). ``progress_interval``: seconds between two statuses of
    a run, at least; ``progress_grace``: seconds before a run's first one
    (tests pass 0 for both to see every one). ``warm_up``: send the
    system prompt once while starting, so a local model's prompt cache holds
    it before the first prompt (``asyncai up`` with the embedded model).
    """

    def __init__(
        self,
        config: Config,
        *,
        channel: Channel | None = None,
        executor: ToolExecutor | None = None,
        env: Mapping[str, str] | None = None,
        progress_interval: float = PROGRESS_INTERVAL,
        progress_grace: float = PROGRESS_GRACE,
        warm_up: bool = False,
    ):
        self.config = config
        self._warm_up = warm_up
        self._progress_interval = progress_interval
        self._progress_grace = progress_grace
        self._env = env
        self._channel = channel
        self._executor = executor
        self._mcp: Any = None  # the McpToolExecutor, when built here (to report its servers)
        self._lanes: Lanes | None = None  # each channel's tools, executor and model
        self._store: Store | None = None
        self.runtime: Runtime | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._intake: asyncio.Task[None] | None = None
        self._closed = False
        self._policy = ApprovalPolicy.from_config(config.approvals)
        self._policies: dict[str, ApprovalPolicy] = {}  # by channel, as calls need them
        self._desk: ApprovalDesk | None = None
        self._cluster: ClusterNode | None = None  # nats:// only: threads shared with others
        self._signed: SignedScopeStore | None = None  # one daemon's REPL dumps, in its SQLite
        # Chunks of split prompts, held until their last one (the cursor waits for them).
        self._joiner = ChunkJoiner()
        self._web: WebServer | None = None  # the console, when [web] listen is set
        self._started_at = time.time()  # the console's uptime counts from here
        self.console: Console | None = None
        # each working run's last status line, by thread key: what the console shows live
        self._statuses: dict[str, str] = {}
        # the one timing source of every run, and its readers when configured (issue 30)
        self.telemetry = Telemetry(
            otlp_endpoint=config.telemetry.otlp_endpoint,
            metrics_listen=config.telemetry.metrics_listen,
            metrics=config.web.listen is not None,  # the console serves /metrics too
            # a collector's credentials, as the OpenTelemetry spec names them
            otlp_headers=(os.environ if env is None else env).get("OTEL_EXPORTER_OTLP_HEADERS"),
            readings=Readings(
                active_runs=lambda: self.runtime.counts().active_runs if self.runtime else 0,
                queued_prompts=lambda: self.runtime.counts().queued_prompts if self.runtime else 0,
                approvals_pending=lambda: self._desk.pending if self._desk else 0,
                scopes_live=lambda: self._lanes.live_scopes if self._lanes else 0,
                scopes_saved=self._saved_scopes,
                channel_reconnects=lambda: getattr(self._channel, "reconnects", 0),
            ),
        )
        self._servers: dict[str, str | None] = {}  # tool -> its MCP server (span attributes)

    @property
    def store(self) -> Store:
        """The open sessions store (after :meth:`start`)."""
        if self._store is None:
            raise RuntimeError("the daemon is not started")
        return self._store

    @property
    def web_url(self) -> str | None:
        """The console's address as bound (after :meth:`start`), or None without one."""
        return self._web.url if self._web is not None else None

    @property
    def desk(self) -> ApprovalDesk | None:
        """The approval desk (after :meth:`start`): its rules in force, for status and tests."""
        return self._desk

    def request_stop(self) -> None:
        """Begin an orderly shutdown (what SIGTERM and SIGINT do)."""
        self._stop.set()

    async def run(self, ready: Callable[[], None] | None = None) -> int:
        """Start, call ``ready``, serve until stopped, shut down; the exit status.

        Everything is closed however this ends. A failure to start that is
        expected (the config, the hub, the store, the OS) is 1; anything else
        (a bug, a cancellation, ``KeyboardInterrupt``) is logged and raised
        after the close.
        """
        try:
            try:
                started = await self._start_unless_stopped()
            except (AsyncaiError, ChannelError, StoreError, OSError) as exc:
                log.error("daemon.start_failed", error=f"{type(exc).__name__}: {exc}")
                print(f"asyncai: the daemon did not start: {exc}", file=sys.stderr)
                return 1
            if not started:
                log.warning("daemon.stopped_while_starting")
                return 0
            if ready is not None:
                ready()
            return await self.wait()
        except asyncio.CancelledError:
            log.warning("daemon.cancelled")
            raise
        except BaseException as exc:
            log.error("daemon.crashed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            raise
        finally:
            await self.aclose()

    async def _start_unless_stopped(self) -> bool:
        """:meth:`start`, unless a stop request comes first (then False)."""
        # Starting may wait long for the hub (reconnect backoff): a stop request ends it.
        starting = asyncio.create_task(self.start(), name="asyncai-start")
        stop = asyncio.create_task(self._stop.wait(), name="asyncai-stop")
        try:
            await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not starting.done():
                starting.cancel()
            # Let a cancelled start unwind before anything is closed under it.
            await asyncio.gather(stop, starting, return_exceptions=True)
        if starting.cancelled():
            return False
        starting.result()  # its error, if it failed
        return True

    async def start(self) -> None:
        """Open the store, start the tools, connect, schedule leftovers, subscribe; READY=1."""
        config = self.config
        if config.web.listen is not None:
            from daemon.web import read_tokens

            read_tokens(config.web.tokens)  # no console without a way to log in: fail now
        store = self._store = await Store(config.sessions.db).open()
        # Stored at the first start only: a channel without a cursor is read from there.
        first_start = await store.cursors.first_start_cursor(id_for_time(time.time_ns() // 10**6))
        # A hub's ids and NATS's are different spaces: cursors of the other one are dropped.
        space = id_space(config.channels.url)
        if dropped := await store.cursors.claim_cursor_space(space):
            log.warning("daemon.cursors_reset", ids=space, dropped=dropped, read_from="first start")
        self._cluster = await open_cluster(config, self._store)
        try:
            await self.telemetry.start()
        except ValueError as exc:  # the headers: the only value read unchecked till now
            raise ConfigError(str(exc)) from exc
        except OSError as exc:
            raise ConfigError(
                f"[telemetry] metrics_listen {config.telemetry.metrics_listen!r} "
                f"cannot be served: {exc}"
            ) from exc
        lanes = self._lanes = Lanes(config, await self._lane_tools(store), gate=self.gate)
        # Start the servers and each channel's pool now: a broken setup fails before READY=1.
        await lanes.start(config.channels.channels or [""])
        if self._warm_up:
            # a local llama.cpp server: its prompt cache takes the system prompt now,
            # before READY=1, instead of during the first person's wait
            await lanes.warm_up(config.model.base_url)
        if self._channel is None:
            self._channel = open_channel(
                config.channels.url, token=config.channels.token, nick=config.channels.nick
            )
        await self._connect()
        publisher = fenced(self._cluster, ChannelPublisher(self._channel, config.channels.nick))
        self._desk = ApprovalDesk(
            store=store.approvals,
            publisher=publisher,
            policy=self._policy,
            resume=self._resume,
            publish_timeout=config.runtime.publish_timeout,
            mirror=mirror(self._cluster),
            policies=self._channel_policy,
            rules=store.rules,
        )
        self.runtime = Runtime(
            store=self._clustered(
                SessionsRuntimeStore(
                    self._store,
                    history_turns=config.runtime.history_turns,
                    history_chars=config.runtime.history_chars,
                    hold_cursor=self._joiner.holds,
                    scopes=self._signed,
                )
            ),
            publisher=publisher,
            run=self._run,
            options=runtime_options(config),
            approvals=self._desk,
            reset=lanes.reset if lanes.persistent else None,
            limiter=self._limiter(),
            limiters=self._channel_limiters(),
            tools=lanes.offer,
        )
        recovered = await self.runtime.recover()  # paused threads held (the desk) first
        for name in config.channels.channels:
            since = await store.cursors.get_cursor(name) or first_start
            await self._channel.subscribe(name, since=since)
        self._intake = asyncio.create_task(self._read_channel(), name="asyncai-intake")
        self._tasks.append(self._intake)
        if self._cluster is not None:
            self._cluster.start(self.runtime.submit, publisher)
        if config.web.listen is not None:
            await self._start_console(config.web.listen)
        gc.collect()
        gc.freeze()  # see the module docstring
        notify(f"READY=1\nSTATUS={self.status_line()}", env=self._env)
        failed = sorted(getattr(self._mcp, "failed_servers", {}) or {})
        if self._mcp is not None and not failed:  # (a server not up: its tools are unknown)
            self._warn_idle_globs([(d.server or "", d.name) for d in self._mcp.definitions()])
        log.warning(  # one line at start even without --verbose
            "daemon.ready",
            nick=self._channel.nick,
            channels=config.channels.channels,
            recovered_prompts=recovered,
            db=str(config.sessions.db),
            # A server that cannot start is logged with its stderr; the others keep working,
            # and it is retried with backoff: its tools join the next run once it is up.
            failed_servers=failed,
            **({"failed_servers_action": "retrying with backoff"} if failed else {}),
        )
        beat = heartbeat(self.health_problems, self.status_line, env=self._env)
        self._tasks.append(asyncio.create_task(beat, name="asyncai-heartbeat"))

    async def _start_console(self, listen: str) -> None:
        """The console on ``listen``, reading this daemon's store, runs and REPLs."""
        from daemon.web import Console, Sources, WebServer, console_app, server_tools

        assert self._store is not None
        self.console = Console(
            Sources(
                config=self.config,
                store=self._store,
                status=self._statuses.get,
                variables=self._lanes.scope_variables if self._lanes is not None else None,
                desk=self._desk,
                server_tools=lambda: server_tools(self._mcp, self._lanes),
                health=self._health_report,
            )
        )
        # /metrics on the console's address, outside its session check (Prometheus scrapes it)
        self._web = WebServer(with_metrics(console_app(self.console), self.telemetry), listen)
        await self._web.start()
        log.warning("daemon.console", url=self._web.url)

    async def _health_report(self) -> HealthReport:
        """The console's Health page, gathered now (:func:`daemon.web.gather_health`)."""
        from daemon.web import gather_health

        return await gather_health(
            nick=(self._channel.nick if self._channel else None) or self.config.channels.nick,
            started=self._started_at,
            status_line=self.status_line(),
            problems=self.health_problems(),
            channel=self._channel,
            channels=self.config.channels.channels,
            cluster=self._cluster,
            mcp=self._mcp,
            lanes=self._lanes,
        )

    def _clustered(self, store: SessionsRuntimeStore) -> RuntimeStore:
        """The runtime's store; in a cluster, one that tells the others what was answered."""
        return clustered(self._cluster, store, self._desk, self._lanes)

    async def _lane_tools(self, store: Store) -> LaneTools:
        """How a channel's lane gets its tools: a view of the one MCP executor (built and
        started once) with the executor its tool mode asks for around it; the executor
        handed to the daemon, when there is one, for every channel."""
        given = self._executor
        if given is not None:
            return lambda _config, _policy: (given, None)
        mcp = self._mcp = build_mcp_executor(self.config)
        audit = audited(self._cluster, audit_observer(store.audit))
        observer = progress_observer(timing_observer(audit, self._server_of))
        scopes = await self._scope_store(store.scopes)

        def build(config: Config, policy: ChannelPolicy) -> tuple[ToolExecutor, ToolExecutor]:
            view = channel_tools(mcp, policy.sees)
            executor = build_tool_executor(
                config,
                observer=observer,
                inner=view,
                gate=self.gate,
                scopes=scopes,
                shapes=store.shapes,  # learned return shapes (issue 19)
            )
            return executor, view

        return build

    def _warn_idle_globs(self, tools: list[tuple[str, str]]) -> None:
        """One warning per channel glob that names none of the daemon's tools (issue 29): a
        typo in a deny glob would otherwise refuse nothing without a word."""
        for name, policy in self.config.policies().items():
            for key, glob in policy.idle_globs(tools):
                log.warning(
                    "daemon.glob_matches_no_tool",
                    key=f'channel."{name}".{key}',
                    glob=glob,
                    tools=len(tools),
                )

    def _limiter(self) -> SenderLimiter | None:
        """The per-sender limits of ``[runtime]``, or None when both are unlimited."""
        runtime = self.config.runtime
        limits = SenderLimits(
            runtime.max_runs_per_sender_per_hour, runtime.max_tokens_per_sender_per_day
        )
        return None if limits.unlimited else counted(self._cluster, self.store.queries, limits)

    def _channel_limiters(self) -> Callable[[str], SenderLimiter | None]:
        """Each channel's per-sender limits (issue 29): a channel with a section of its own
        counts its own runs against its limits (its keys, else ``[runtime]``'s); the others
        share :meth:`_limiter`. In a cluster, each is counted on the broker."""
        shared = self._limiter()
        limiters: dict[str, SenderLimiter | None] = {}

        def limiter(channel: str) -> SenderLimiter | None:
            if channel not in limiters:
                policy = self.config.policy(channel)
                limits = SenderLimits(
                    policy.max_runs_per_sender_per_hour, policy.max_tokens_per_sender_per_day
                )
                if not policy.channel:
                    limiters[channel] = shared
                elif limits.unlimited:
                    limiters[channel] = None
                else:
                    limiters[channel] = counted(
                        self._cluster, self.store.queries, limits, channel=policy.channel
                    )
            return limiters[channel]

        return limiter

    async def _connect(self) -> None:
        """Connect now when the channel can (a hub's or NATS's), so the nick is known."""
        assert self._channel is not None
        if isinstance(self._channel, WebSocketChannel | NatsChannel):
            try:
                await self._channel.connect(retry=False)
                return
            except ChannelError as exc:
                log.warning(
                    "daemon.hub_unreachable",
                    url=self.config.channels.url,
                    error=str(exc),
                    action="retrying with backoff",
                )
            await self._channel.connect(retry=True)

    async def wait(self) -> int:
        """Until a stop is requested (0) or the intake ended because the hub is gone (1)."""
        assert self._intake is not None
        stop = asyncio.create_task(self._stop.wait(), name="asyncai-stop")
        try:
            await asyncio.wait([stop, self._intake], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            await asyncio.gather(stop, return_exceptions=True)
        if self._stop.is_set():
            return 0
        error = self._intake.exception() if not self._intake.cancelled() else None
        log.error("daemon.intake_ended", error=f"{type(error).__name__}: {error}")
        return 1

    async def aclose(self) -> None:
        """The orderly shutdown (idempotent); see the module docstring for the order.

        Each step runs even when one before it failed (that one is logged).
        """
        if self._closed:
            return
        self._closed = True
        notify("STOPPING=1", env=self._env)
        if self.console is not None:
            self.console.closing.set()  # its live streams end
        if self._web is not None:  # stop accepting first: no decision lands mid-shutdown
            await _closing("console", self._web.aclose())
        if self._intake is not None:
            await cancel_until_done(self._intake)
        if self.runtime is not None:
            await _closing("runtime", self.runtime.shutdown())
        if self._desk is not None:
            await _closing("approvals", self._desk.close())
        if self._cluster is not None:  # after the runtime: its last runs are recorded
            await _closing("cluster", self._cluster.close())
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # after the runtime: the last runs' traces are queued; /metrics stops here
        await _closing("telemetry", self.telemetry.aclose())
        lanes = self._lanes.lanes if self._lanes is not None else []
        built = self._lanes.built if self._lanes is not None else []
        # each lane's own executor (its pool; its view closes nothing), then the one
        # behind every channel: the MCP servers, or the executor handed to the daemon
        behind = [shared for shared in (self._executor, self._mcp) if shared is not None]
        executors = [*built, *behind]
        for executor in executors:
            await _closing("executor", executor.aclose())
        if executors:
            await asyncio.sleep(POOL_SETTLE)
        for lane in lanes:
            await _closing("backend", lane.backend.aclose())
        if self._channel is not None:
            await _closing("channel", self._channel.close())
        if self._store is not None:
            await _closing("store", self._store.aclose())
        log.warning("daemon.stopped")

    # ---- loops ----

    async def _read_channel(self) -> None:
        """Feed every channel message to the runtime, in order."""
        assert self._channel is not None
        assert self.runtime is not None
        async for message in self._channel:
            whole = self._joiner.feed(message)
            if whole is not None and self._cluster is not None:
                await self._cluster.feed(
                    inbound(whole, cut=self._joiner.last_cut), self._channel.nick or ""
                )
            elif whole is not None:
                await self.runtime.submit(inbound(whole, cut=self._joiner.last_cut))

    def health_problems(self) -> list[str]:
        """What keeps the watchdog from being fed now (empty: healthy)."""
        return health_problems(self._intake, self._channel, self.runtime)

    def status_line(self) -> str:
        """``active runs: 2, queued prompts: 3, live scopes: 5`` (systemd's STATUS=)."""
        counts = self.runtime.counts() if self.runtime is not None else None
        active = counts.active_runs if counts else 0
        queued = counts.queued_prompts if counts else 0
        # Only code-mode executors have REPL scopes; a direct-mode one has none.
        scopes = self._lanes.live_scopes if self._lanes is not None else 0
        return f"active runs: {active}, queued prompts: {queued}, live scopes: {scopes}"

    async def _scope_store(self, scopes: Scopes) -> ScopeStore:
        """Thread REPLs kept in ``scopes``, signed with the key beside it; old ones pruned."""
        if self._cluster is not None:
            return self._cluster.scopes  # where every daemon of the cluster reads them
        config = self.config
        key = load_or_create_key(config.sessions.db.parent)
        pruned = await scopes.prune_scopes(scope_cutoff(config.sessions.scope_retention_days))
        if pruned:
            log.info("daemon.scopes_pruned", scopes=pruned)
        max_bytes = config.code_mode.limits().max_scope_dump  # the default when unset
        self._signed = await SignedScopeStore.open(scopes, key, max_bytes=max_bytes)
        return self._signed

    async def _run(self, request: RunRequest) -> RunResult:
        """One run through the backend; the thread's saved REPL loaded first (for the note)
        and saved after it if a snippet changed it (see :meth:`SignedScopeStore.open_run`)."""
        assert self._lanes is not None
        lane = self._lanes.lane(request.channel)
        persistent = lane.persistent
        if persistent is not None:
            await persistent.restore_scope(request.thread, new=request.opens_thread)
        lane.noted.before_run(request.thread, had_earlier_runs=bool(request.history))
        async with self._timing(request) as timeline, self._progress(request):
            result = await lane.backend.run(request)
            timeline.run.attributes["status"] = result.status
        if persistent is not None:
            await persistent.checkpoint(request.thread)
        return result

    async def _resume(
        self, request: RunRequest, paused: PausedRun, decisions: Mapping[int, Decision]
    ) -> RunResult:
        """A paused run going on through the backend, once decided."""
        assert self._lanes is not None
        lane = self._lanes.lane(request.channel)
        if self._signed is not None:
            self._signed.open_run(request.thread, request.run_id)
        waits = [
            WaitedDecision(d.waited_ms / 1000, d.approved, d.kind, d.by) for d in decisions.values()
        ]
        async with self._timing(request, waits) as timeline, self._progress(request):
            result = await lane.backend.resume(
                request, paused.conversation, paused.pause, decisions
            )
            timeline.run.attributes["status"] = result.status
        if lane.persistent is not None:
            await lane.persistent.checkpoint(request.thread)
        return result

    def _timing(
        self, request: RunRequest, waits: list[WaitedDecision] | None = None
    ) -> contextlib.AbstractAsyncContextManager[RunTimeline]:
        """The run's timeline (the one timing source: traces, metrics, time split), current
        until the run returns; ``waits``: the approval waits a resumed run went on after."""
        last = request.prompts[-1] if request.prompts else None
        attributes = {
            "run_id": request.run_id,
            "channel": request.channel,
            "thread": request.thread_id,
            "sender": last.sender if last is not None else None,
            "prompt_id": last.id if last is not None else None,
        }
        return self.telemetry.timelines.timing_run(request.run_id, attributes, waits=waits or ())

    def _server_of(self, tool: str) -> str | None:
        """The MCP server that serves ``tool`` (a nested call's span says it), or None."""
        if tool not in self._servers and self._mcp is not None:
            # a server that failed at start adds its tools once up: read them again on a miss
            self._servers = {d.name: d.server for d in self._mcp.definitions()}
            self._servers.setdefault(tool, None)
        return self._servers.get(tool)

    async def _saved_scopes(self) -> int:
        """How many threads have a stored REPL in this daemon's SQLite (the metrics')."""
        return await self.store.scopes.count_scopes() if self._store is not None else 0

    def _progress(self, request: RunRequest) -> contextlib.AbstractAsyncContextManager[RunProgress]:
        """The run's progress, shown in its thread until the run returns."""
        channel = self._channel
        assert channel is not None  # start() made it

        key = thread_key(request.channel, request.thread_id)
        statuses = self._statuses

        async def send(text: str) -> None:
            statuses[key] = text
            await channel.status(request.channel, text, thread=request.thread_id)

        @contextlib.asynccontextmanager
        async def shown() -> AsyncIterator[RunProgress]:
            try:
                async with showing_progress(
                    send, interval=self._progress_interval, grace=self._progress_grace
                ) as progress:
                    yield progress
            finally:
                statuses.pop(key, None)

        return shown()

    def idle(self) -> bool:
        """Whether no run is active now (the local model server may be restarted)."""
        return self.runtime is None or self.runtime.counts().active_runs == 0

    async def warm_up_model(self) -> None:
        """Warm the models' prompt caches again (after the local server restarted)."""
        if self._lanes is not None:
            await self._lanes.warm_up(self.config.model.base_url)

    def _channel_policy(self, channel: str) -> ApprovalPolicy:
        """``channel``'s ``[approvals]`` (its ``[channel."#name".approvals]`` over the
        global section), built once per channel."""
        policy = self._policies.get(channel)
        if policy is None:
            policy = ApprovalPolicy.from_config(self.config.policy(channel).approvals)
            self._policies[channel] = policy
        return policy

    def gate(self, definition: GatedTool, arguments: dict[str, Any]) -> Verdict:
        """``[approvals]`` applied to one call (with the run's grants once running).

        Tests that hand the daemon their own executor build it with this gate.
        """
        if self._desk is not None:
            return self._desk.gate(definition, arguments)
        return self._policy.verdict(definition, arguments)


@contextlib.asynccontextmanager
async def running(daemon: Daemon) -> AsyncIterator[Daemon]:
    """``async with running(Daemon(config)) as d:`` started, and shut down on exit."""
    try:
        await daemon.start()
        yield daemon
    finally:
        await daemon.aclose()


async def _closing(part: str, work: Awaitable[None]) -> None:
    """Await one step of the shutdown; its failure is logged so the next steps still run."""
    try:
        await work
    except Exception as exc:
        log.error("daemon.close_failed", part=part, error=f"{type(exc).__name__}: {exc}")
