"""Page 1, the threads: each thread's channel, first prompt, last activity, status and counts.

Filters by channel, sender and status are query parameters, so a filtered
list is a link one can keep.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.web.console import Console

__all__ = ["routes"]


def routes(console: Console) -> list[BaseRoute]:
    """The threads page at ``/``, and its nav entry."""
    console.page("Threads", "/")

    async def threads_page(request: Request) -> Response:
        found = await console.sources.store.queries.threads(limit=200)
        return console.render(request, "threads.html", {"threads": found})

    return [Route("/", threads_page, methods=["GET"])]
