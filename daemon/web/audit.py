"""Page 5, the audit: every nested tool call, filtered by server, tool, mutating, outcome,
sender, channel and time, and the same rows as CSV.

The filters are query parameters (a filtered audit is a link one can keep, and
``/audit.csv`` with the same ones exports exactly what the page lists, up to
:data:`CSV_LIMIT` rows). The rows name a call's tool, not its server, so a
server filter is the tools the daemon's servers serve now
(``Sources.server_tools``). :func:`filters_of` reads the query into the
store's arguments, and says what it could not read instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from daemon.web.console import Console
from sessions import StoreError, audit_csv_lines
from sessions.ids import parse_since

__all__ = ["CSV_LIMIT", "PAGE_LIMIT", "AuditFilters", "filters_of", "routes", "server_tools"]

PAGE_LIMIT = 200  # rows on the page
CSV_LIMIT = 100_000  # rows in one export
OUTCOMES = ("started", "ok", "error", "cancelled", "unknown")


@dataclass
class AuditFilters:
    """The store's audit arguments a query asked for, and what was wrong with it."""

    values: dict[str, str] = field(default_factory=dict)  # as typed, for the form
    arguments: dict[str, Any] = field(default_factory=dict)  # for AuditLog.entries
    problems: list[str] = field(default_factory=list)


def server_tools(mcp: Any, lanes: Any) -> dict[str, list[str]]:
    """The tools each MCP server serves now, by server: the MCP executor's routes
    (``routes``: tool → server), else (the daemon was handed its executor) the tools
    its lanes offer that name their server."""
    found: dict[str, list[str]] = {}
    routes = getattr(mcp, "routes", None)
    if isinstance(routes, dict):
        for tool, server in routes.items():
            found.setdefault(server, []).append(tool)
        return found
    for lane in lanes.lanes if lanes is not None else []:
        for definition in lane.offered():
            if definition.server and definition.name not in found.get(definition.server, []):
                found.setdefault(definition.server, []).append(definition.name)
    return found


def filters_of(query: Mapping[str, str], server_tools: Mapping[str, list[str]]) -> AuditFilters:
    """The filters of a query string. ``since``/``until`` take what ``asyncai audit
    --since`` takes (a date, midnight UTC, or an ISO datetime); ``server`` one of the
    daemon's servers (``server_tools``: its tools)."""
    found = AuditFilters()
    for name in ("server", "tool", "mutating", "outcome", "sender", "channel", "since", "until"):
        value = (query.get(name) or "").strip()
        found.values[name] = value
        if not value:
            continue
        if name == "server":
            if value not in server_tools:
                known = ", ".join(sorted(server_tools)) or "none"
                found.problems.append(f"no server {value!r} (this daemon's: {known})")
            else:
                found.arguments["tools"] = list(server_tools[value])
        elif name == "mutating":
            if value not in ("yes", "no"):
                found.problems.append("mutating is yes or no")
            else:
                found.arguments["mutating"] = value == "yes"
        elif name == "outcome":
            if value not in OUTCOMES:
                found.problems.append(f"outcome is one of {', '.join(OUTCOMES)}")
            else:
                found.arguments["outcome"] = value
        elif name in ("since", "until"):
            try:
                found.arguments[name] = parse_since(value)
            except (ValueError, StoreError) as exc:
                found.problems.append(f"{name}: {exc}")
        else:
            found.arguments[name] = value
    return found


def routes(console: Console) -> list[BaseRoute]:
    """``/audit`` and ``/audit.csv``, and the nav entry."""
    console.page("Audit", "/audit")
    store = console.sources.store
    servers: Callable[[], Mapping[str, list[str]]] = console.sources.server_tools

    async def page(request: Request) -> Response:
        filters = filters_of(request.query_params, servers())
        entries = (
            []
            if filters.problems
            else await store.audit.entries(limit=PAGE_LIMIT, **filters.arguments)
        )
        query = str(request.url.query)
        context = {
            "entries": entries,
            "f": filters.values,
            "problems": filters.problems,
            "servers": sorted(servers()),
            "outcomes": OUTCOMES,
            "csv": "/audit.csv" + (f"?{query}" if query else ""),
            "limit": PAGE_LIMIT,
        }
        return console.render(request, "audit.html", context, 400 if filters.problems else 200)

    async def export(request: Request) -> Response:
        filters = filters_of(request.query_params, servers())
        if filters.problems:
            return Response("; ".join(filters.problems) + "\n", 400, media_type="text/plain")
        entries = await store.audit.entries(limit=CSV_LIMIT, **filters.arguments)
        return StreamingResponse(
            iter(audit_csv_lines(entries)),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="asyncai-audit.csv"'},
        )

    return [
        Route("/audit", page, methods=["GET"]),
        Route("/audit.csv", export, methods=["GET"]),
    ]
