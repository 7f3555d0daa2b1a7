"""An ASGI app served by uvicorn as a task on the daemon's own event loop.

The console (``daemon.web``) and the metrics (``daemon.telemetry``) are both
served this way, so the one way lives here, below both: the socket is bound
before uvicorn starts (an address in use is an ``OSError`` at the daemon's
start naming the key that set it, not uvicorn's ``sys.exit``), and uvicorn's
own signal handlers and logging configuration are left out: SIGTERM and
SIGINT are the daemon's, which stops each server in its shutdown
(:meth:`LoopServer.aclose`).

The port may be reachable by strangers, and every connection is a file
descriptor of the daemon's process, which its database, channels and MCP
servers need too. So a connection gets :data:`REQUEST_TIMEOUT` seconds to send
a whole request (head and body; the answer, a live stream's included, may take
as long as it takes) and between two requests, and past
:data:`MAX_CONNECTIONS` open ones a new connection is closed at once
(:class:`_Protocol`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import structlog
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["START_TIMEOUT", "LoopServer", "parse_listen"]

log = structlog.get_logger("asyncai.asgi")

START_TIMEOUT = 10.0  # seconds for uvicorn to start serving on the bound socket
REQUEST_TIMEOUT = 30.0  # seconds a connection has to send a whole request
MAX_CONNECTIONS = 256  # open connections of one server; past it a new one is closed


def parse_listen(listen: str) -> tuple[str, int]:
    """``("127.0.0.1", 6690)`` from ``"127.0.0.1:6690"`` (``[::1]:6690`` for IPv6);
    ValueError when it is not ``HOST:PORT``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request and a cap on connections.

    The deadline is armed when the connection opens and when an answer ends; when
    it passes, the connection is closed unless a request has arrived whole and is
    being answered (uvicorn's own keep-alive timer is cancelled by any byte, so a
    client sending one now and then would hold its connection for good).
    """

    _deadline: asyncio.TimerHandle | None = None

    # narrower than asyncio.Protocol's BaseTransport, as uvicorn's own override is
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > MAX_CONNECTIONS:
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._disarm()  # the connection is the WebSocket protocol's now
        super().handle_websocket_upgrade(event)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(REQUEST_TIMEOUT, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the daemon owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LoopServer:
    """``app`` served on ``listen`` from :meth:`start` until :meth:`aclose`.

    ``name`` names the task and the log event; ``close_timeout`` is how long
    open requests (a console's live streams) get to end at shutdown before
    they are cut; ``bind_hint`` is added to the error of an address that
    cannot be bound (which key or flag sets it).
    """

    def __init__(
        self,
        app: Any,
        listen: str,
        *,
        name: str,
        close_timeout: float = 5.0,
        bind_hint: str = "",
    ) -> None:
        self._app = app
        self.listen = listen
        self._host, self._port = parse_listen(listen)
        self._name = name
        self._close_timeout = close_timeout
        self._bind_hint = bind_hint
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    @property
    def port(self) -> int | None:
        """The bound port (port 0 becomes the one the OS chose); None before :meth:`start`."""
        return None if self._socket is None else int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` as bound."""
        if self._socket is None:
            raise RuntimeError(f"the {self._name} server is not started")
        host, port = self._socket.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    async def start(self) -> None:
        """Bind, then serve in a task; returns once uvicorn accepts connections.

        Raises ``OSError`` when the address cannot be bound.
        """
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        try:
            self._socket = socket.create_server((self._host, self._port), family=family)
        except OSError as exc:
            hint = f": {self._bind_hint}" if self._bind_hint else ""
            raise OSError(
                exc.errno,
                f"the {self._name} cannot listen on {self.listen} ({exc.strerror or exc}){hint}",
            ) from exc
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=int(self._close_timeout),
            proxy_headers=False,
            server_header=False,
            http=_Protocol,
        )
        server = self._server = _Server(config)
        self._task = asyncio.create_task(server.serve([self._socket]), name=f"asyncai-{self._name}")
        async with asyncio.timeout(START_TIMEOUT):
            while not server.started:
                if self._task.done():
                    self._task.result()  # its error
                    raise RuntimeError(f"the {self._name} server ended while starting")
                await asyncio.sleep(0.01)
        log.info("asgi.listening", server=self._name, url=self.url)

    async def aclose(self) -> None:
        """Stop accepting, let open requests end, then cut them; close. Idempotent."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                async with asyncio.timeout(self._close_timeout + 1.0):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._server.force_exit = True
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            self._server = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
