"""The console's pages put together: every page's routes behind the guard.

Each page module has ``routes(console)``, which adds its nav entry and
returns its routes; :func:`console_app` is the one list of them.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from daemon.web import approvals, audit, health, repl, thread, threads, usage
from daemon.web.app import Guard, build_app
from daemon.web.console import Console

__all__ = ["console_app"]


def console_app(console: Console) -> Guard:
    """The ASGI app of ``console``: login, static files and every page, guarded."""
    routes: list[BaseRoute] = [
        *threads.routes(console),
        *thread.routes(console),
        *repl.routes(console),
        *approvals.routes(console),
        *audit.routes(console),
        *usage.routes(console),
        *health.routes(console),
    ]
    return build_app(console, routes)
