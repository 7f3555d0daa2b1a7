"""The console's ``/metrics``: the metrics put in front of the console's own app.

The console (``daemon.web``) guards every route with its session and CSRF
check; Prometheus scrapes without a session (the metrics hold counts, not
content). So :func:`with_metrics` routes ``GET /metrics`` to the metrics
before the console's guard sees the request, and everything else to the
console, unchanged. :mod:`daemon.app` wraps the console's app with it.
"""

from __future__ import annotations

from typing import Any

from daemon.telemetry.telemetry import Telemetry

__all__ = ["METRICS_PATH", "with_metrics"]

METRICS_PATH = "/metrics"


def with_metrics(app: Any, telemetry: Telemetry) -> Any:
    """``app`` (an ASGI app: the console) with ``telemetry``'s metrics at ``/metrics``,
    outside its guard."""
    metrics = telemetry.metrics_asgi()

    async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == METRICS_PATH:
            await metrics(scope, receive, send)
            return
        await app(scope, receive, send)

    return route
