"""The console served by uvicorn as a task on the daemon's own event loop.

On the daemon's loop, so a page reads the live runs, the REPLs and the
approvals desk directly, and decides through the same desk as the chat. How
it is served (bound first, no signal handlers of uvicorn's) is
:class:`daemon.asgi.LoopServer`, shared with the metrics; this module adds
the console's name, the time its live streams get at shutdown and the words
of a taken address.
"""

from __future__ import annotations

from typing import Any

from daemon.asgi import LoopServer

__all__ = ["CLOSE_TIMEOUT", "WebServer"]

CLOSE_TIMEOUT = 5  # seconds for open requests (live streams) to end at shutdown


class WebServer(LoopServer):
    """The console's ASGI ``app`` served on ``listen`` until :meth:`aclose`."""

    def __init__(self, app: Any, listen: str) -> None:
        super().__init__(
            app,
            listen,
            name="console",
            close_timeout=CLOSE_TIMEOUT,
            bind_hint="is another asyncai serving there? Set [web] listen to a free "
            "HOST:PORT (asyncai up: --web-listen)",
        )
