"""Page 7, health: the daemon (or each member of its cluster) with its uptime, its
channels' state, the MCP servers with their failed-start and retry state, the Monty
pool of each lane, and each model endpoint's latency.

The daemon fills a :class:`HealthReport` when the page is asked for
(``Sources.health``): it reads what it holds in memory, lists the cluster's live
members from the broker, and times one ``GET /models`` of each endpoint
(:meth:`daemon.model.loop.OpenAiCompatibleBackend.latency`), so the latency is
measured now, not remembered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.errors import AsyncaiError
from daemon.web.console import Console

__all__ = [
    "ChannelHealth",
    "EndpointHealth",
    "HealthReport",
    "MemberHealth",
    "PoolHealth",
    "ServerHealth",
    "gather_health",
    "routes",
    "uptime_text",
]


@dataclass(frozen=True)
class MemberHealth:
    """A daemon of the cluster (or the one daemon)."""

    name: str
    this: bool  # the daemon serving this console
    started: float | None  # epoch seconds; None: the member does not say (older asyncai)


@dataclass(frozen=True)
class ChannelHealth:
    """One channel the daemon follows, and its connection."""

    name: str
    connected: bool | None  # None: the transport does not say
    broken: bool


@dataclass(frozen=True)
class ServerHealth:
    """One MCP server: running, or failed at start and retried with backoff."""

    name: str
    pid: int | None
    tools: int
    failed: str | None
    retries: int


@dataclass(frozen=True)
class PoolHealth:
    """One lane's executor and its Monty pool."""

    channels: list[str]
    tool_mode: str
    min_processes: int | None
    max_processes: int | None
    live_scopes: int


@dataclass(frozen=True)
class EndpointHealth:
    """One model endpoint, timed now."""

    base_url: str
    model: str
    latency_ms: float | None
    error: str | None


@dataclass(frozen=True)
class HealthReport:
    """What the Health page shows."""

    nick: str
    started: float  # epoch seconds
    status_line: str
    problems: list[str]
    members: list[MemberHealth] = field(default_factory=list)
    cluster_error: str | None = None
    channels: list[ChannelHealth] = field(default_factory=list)
    servers: list[ServerHealth] = field(default_factory=list)
    pools: list[PoolHealth] = field(default_factory=list)
    endpoints: list[EndpointHealth] = field(default_factory=list)


def uptime_text(seconds: float) -> str:
    """``3d 4h``, ``2h 5m``, ``4m 10s``: two units, the largest first."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


async def gather_health(
    *,
    nick: str,
    started: float,
    status_line: str,
    problems: list[str],
    channel: Any,
    channels: Sequence[str],
    cluster: Any,
    mcp: Any,
    lanes: Any,
) -> HealthReport:
    """The report of a running daemon, read from its parts now: its channel client
    (``connected``, ``broken``), its cluster node (``members()``, ``member``; None
    alone), its MCP executor (``server_states()``; None when it was handed its
    tools) and its lanes (each channel's executor, tool mode and backend, whose
    endpoint is timed once per endpoint, all at once)."""
    members: list[MemberHealth] = []
    cluster_error = None
    if cluster is not None:
        try:
            found = await cluster.members()
        except AsyncaiError as exc:
            cluster_error = f"the cluster's members cannot be read: {exc}"
        else:
            me = cluster.member
            members = [MemberHealth(m, m == me, at) for m, at in sorted(found.items())]
    connected = getattr(channel, "connected", None)
    states = getattr(mcp, "server_states", None)
    pools: dict[int, PoolHealth] = {}
    backends: dict[tuple[str, str], Any] = {}
    for name in channels if lanes is not None else []:
        lane = lanes.lane(name)
        least, most = getattr(lane.executor, "pool_processes", None) or (None, None)
        live = int(getattr(lane.executor, "live_scopes", 0))
        mode = lane.policy.model.tool_mode
        pool = pools.setdefault(id(lane.executor), PoolHealth([], mode, least, most, live))
        pool.channels.append(name)
        params = lane.backend.params
        backends.setdefault((params.base_url, params.model or ""), lane.backend)
    timed = await asyncio.gather(*(backend.latency() for backend in backends.values()))
    return HealthReport(
        nick=nick,
        started=started,
        status_line=status_line,
        problems=problems,
        members=members,
        cluster_error=cluster_error,
        channels=[
            ChannelHealth(
                name,
                connected if isinstance(connected, bool) else None,
                channel is not None and bool(channel.broken),
            )
            for name in channels
        ],
        servers=[
            ServerHealth(s.name, s.pid, s.tools, s.failed, s.retries)
            for s in (states() if callable(states) else [])
        ],
        pools=list(pools.values()),
        endpoints=[
            EndpointHealth(url, model, latency, error)
            for (url, model), (latency, error) in zip(backends, timed, strict=True)
        ],
    )


def routes(console: Console) -> list[BaseRoute]:
    """``/health``, and the nav entry."""
    console.page("Health", "/health")

    async def page(request: Request) -> Response:
        if console.sources.health is None:
            return Response("this console has no health source\n", 503, media_type="text/plain")
        report: HealthReport = await console.sources.health()
        now = time.time()
        context = {
            "report": report,
            "uptime": uptime_text(now - report.started),
            "member_uptime": {
                m.name: uptime_text(now - m.started) for m in report.members if m.started
            },
        }
        return console.render(request, "health.html", context)

    return [Route("/health", page, methods=["GET"])]
