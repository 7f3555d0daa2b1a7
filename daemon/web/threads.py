"""Page 1, the threads: each thread's channel, first prompt, last activity, status and counts.

Filters by channel, sender and status are query parameters, so a filtered
list is a link one can keep. A running thread shows its run's live status
line (the one the chat sees).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.web.console import Console
from sessions import THREAD_STATUSES, thread_key

__all__ = ["routes"]


def _filter(value: str | None) -> str | None:
    """A filter's value: None when absent or empty (the form sends empty fields)."""
    value = (value or "").strip()
    return value or None


def routes(console: Console) -> list[BaseRoute]:
    """The threads page at ``/``, and its nav entry."""
    console.page("Threads", "/")
    views = console.sources.store.views

    async def threads_page(request: Request) -> Response:
        query = request.query_params
        channel = _filter(query.get("channel"))
        sender = _filter(query.get("sender"))
        status = _filter(query.get("status"))
        if status not in (None, *THREAD_STATUSES):
            status = None
        found = await views.threads(channel=channel, sender=sender, status=status)
        live = {
            (t.channel, t.thread_id): line
            for t in found
            if (line := console.sources.status(thread_key(t.channel, t.thread_id)))
        }
        return console.render(
            request,
            "threads.html",
            {
                "threads": found,
                "live": live,
                "channels": await views.channels(),
                "statuses": THREAD_STATUSES,
                "chosen": {
                    "channel": channel or "",
                    "sender": sender or "",
                    "status": status or "",
                },
            },
        )

    return [Route("/", threads_page, methods=["GET"])]
