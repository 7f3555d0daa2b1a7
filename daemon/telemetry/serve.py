"""``/metrics`` on its own address (``[telemetry] metrics_listen``): uvicorn on the daemon's loop.

For a daemon without the console, or one that wants the metrics apart from
it. The socket is bound here, before uvicorn starts, so an address in use
fails the daemon's start with an ``OSError`` naming it (uvicorn would exit
the process instead); uvicorn's own signal handlers are not installed (the
daemon owns SIGTERM and SIGINT), nor its logging configuration. Only
``/metrics`` answers; any other path is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import structlog
import uvicorn

__all__ = ["START_TIMEOUT", "MetricsServer", "parse_listen"]

log = structlog.get_logger("asyncai.telemetry")

START_TIMEOUT = 10.0
"""Seconds uvicorn may take to start serving."""

STOP_TIMEOUT = 5.0
"""Seconds it may take to stop once asked; then it is cancelled."""

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as ``(host, port)``; ValueError otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the daemon's own handle SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


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


class MetricsServer:
    """Serves ``app`` (the metrics) at ``/metrics`` on ``listen``: :meth:`start`, :meth:`aclose`."""

    def __init__(self, app: Asgi, listen: str) -> None:
        self.listen = listen
        self._app = only_metrics(app)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None  # the bound port (listen's, or the one port 0 found)

    async def start(self) -> None:
        """Bind and serve; OSError when the address cannot be bound."""
        host, port = parse_listen(self.listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app, log_config=None, access_log=False, lifespan="off", server_header=False
        )
        server = self._server = _Server(config)
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="asyncai-metrics")
        async with asyncio.timeout(START_TIMEOUT):
            while not server.started:
                if self._task.done():
                    self._task.result()  # its error
                    raise OSError(f"the metrics server on {self.listen} stopped while starting")
                await asyncio.sleep(0.01)
        log.info("telemetry.metrics_serving", listen=self.listen, port=self.port)

    async def aclose(self) -> None:
        """Stop serving (bounded by :data:`STOP_TIMEOUT`, then cancelled)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await asyncio.gather(self._task, return_exceptions=True)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._server = self._task = None
