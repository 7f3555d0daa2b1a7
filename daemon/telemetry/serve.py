"""``/metrics`` on its own address (``[telemetry] metrics_listen``): uvicorn on the daemon's loop.

For a daemon without the console, or one that wants the metrics apart from
it. How it is served (the socket bound first, so an address in use fails the
daemon's start; no signal handlers or logging configuration of uvicorn's) is
:class:`daemon.asgi.LoopServer`, shared with the console. Only ``/metrics``
answers; any other path is 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from daemon.asgi import LoopServer

__all__ = ["MetricsServer"]

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def only_metrics(app: Asgi) -> Asgi:
    """``app`` at ``/metrics``; 404 elsewhere."""

    async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return
        if scope.get("path") == "/metrics":
            await app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"not found\n"})

    return route


class MetricsServer(LoopServer):
    """Serves ``app`` (the metrics) at ``/metrics`` on ``listen``: :meth:`start`, :meth:`aclose`."""

    def __init__(self, app: Asgi, listen: str) -> None:
        super().__init__(only_metrics(app), listen, name="metrics", close_timeout=5.0)
