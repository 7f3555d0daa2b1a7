"""The console served by uvicorn as a task on the daemon's own event loop.

On the daemon's loop, so a page reads the live runs, the REPLs and the
approvals desk directly, and decides through the same desk as the chat. The
socket is bound here before uvicorn starts (an address in use is an
``OSError`` at the daemon's start, not uvicorn's ``sys.exit``), and uvicorn's
own signal handlers are left out: SIGTERM and SIGINT are the daemon's, which
stops the console first at shutdown (:meth:`WebServer.aclose`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import structlog
import uvicorn

__all__ = ["CLOSE_TIMEOUT", "START_TIMEOUT", "WebServer", "parse_listen"]

log = structlog.get_logger("asyncai.web")

START_TIMEOUT = 10.0  # seconds for uvicorn to start serving on the bound socket
CLOSE_TIMEOUT = 5  # seconds for open requests (live streams) to end at shutdown


def parse_listen(listen: str) -> tuple[str, int]:
    """``("127.0.0.1", 6690)`` from ``"127.0.0.1:6690"`` (``[::1]:6690`` for IPv6)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the daemon owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class WebServer:
    """An ASGI ``app`` served on ``listen`` until :meth:`aclose`."""

    def __init__(self, app: Any, listen: str) -> None:
        self._app = app
        self._listen = listen
        self._host, self._port = parse_listen(listen)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` as bound (port 0 becomes the port the OS chose)."""
        if self._socket is None:
            raise RuntimeError("the console is not started")
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
            raise OSError(
                exc.errno,
                f"the console cannot listen on {self._listen} ({exc.strerror or exc}): "
                "is another asyncai serving there? Set [web] listen to a free HOST:PORT "
                "(asyncai up: --web-listen)",
            ) from exc
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=CLOSE_TIMEOUT,
            proxy_headers=False,
            server_header=False,
        )
        server = self._server = _Server(config)
        self._task = asyncio.create_task(server.serve([self._socket]), name="asyncai-web")
        async with asyncio.timeout(START_TIMEOUT):
            while not server.started:
                if self._task.done():
                    self._task.result()  # its error
                    raise RuntimeError("the console's server ended while starting")
                await asyncio.sleep(0.01)
        log.info("web.listening", url=self.url)

    async def aclose(self) -> None:
        """Stop accepting, let open requests end (live streams are told to), close. Idempotent."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT + 1.0):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._server.force_exit = True
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._socket is not None:
            self._socket.close()
