"""Page 3, the REPL of a thread: its variables and its saved copy, read-only.

The variables are the ones the variables note lists (name, type and size,
from the same probe, which also takes a short preview of each), as the
daemon's REPL of the thread holds them now (``Sources.variables``); the saved
copy is the stored dump's size and time.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.web.console import Console

__all__ = ["parse_described", "routes"]

_SIZED = re.compile(r"^(?P<type>[^\[]+)\[(?P<size>\d+)\]$")


def parse_described(described: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    """``[("rows", "list[3]", "[1, 2, 3]")]`` as rows of name, type, size (``len``; empty
    if none) and preview."""
    out = []
    for name, description, preview in described:
        m = _SIZED.match(description)
        kind, size = (m.group("type"), m.group("size")) if m else (description, "")
        out.append({"name": name, "type": kind, "size": size, "preview": preview})
    return out


def routes(console: Console) -> list[BaseRoute]:
    """The REPL page of a thread."""
    views = console.sources.store.views

    async def repl_page(request: Request) -> Response:
        channel = request.path_params["channel"]
        thread_id = request.path_params["thread_id"]
        page = await views.thread(channel, thread_id, runs=0)
        if page is None:
            return console.render(
                request, "missing.html", {"what": f"thread {thread_id} in {channel}"}, 404
            )
        probe = console.sources.variables
        described = probe(channel, thread_id) if probe is not None else None
        return console.render(
            request,
            "repl.html",
            {
                "thread": page,
                "variables": None if described is None else parse_described(described),
            },
        )

    return [Route("/threads/{channel}/{thread_id}/repl", repl_page, methods=["GET"])]
