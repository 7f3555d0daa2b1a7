"""Page 2, a thread: the conversation as people saw it, each run unfolded, updated live.

Each run shows its prompts and reply, and unfolds into the model's rounds,
each ``run_code`` snippet (highlighted) with its result or error, every
nested call with its arguments, outcome, duration and bytes, and the
approval requests with who decided and how long they waited. The newest
:data:`~sessions.views.RUNS_PER_PAGE` runs are shown (``?runs=all`` for every
one), so a thread of a thousand runs still loads at once.

Live: the page listens to ``/threads/C/T/events`` (Server-Sent Events). The
stream polls the thread's version mark (:meth:`sessions.ThreadViews.thread_version`,
one indexed read) and the run's status line every :data:`POLL` seconds, and
sends the runs again, rendered, when either changed. The database is the one
source, so a call another daemon of a cluster ran shows the same way. A
stream ends at shutdown or after :data:`STREAM_MAX` seconds (the browser
reconnects by itself); a HEAD of it is its headers only.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from daemon.web.console import Console
from daemon.web.highlight import highlight
from sessions import ThreadPage, thread_key

__all__ = ["POLL", "STREAM_MAX", "routes"]

POLL = 0.25  # seconds between two looks at a thread while its page is open
STREAM_MAX = 600.0  # a stream is ended after this long; EventSource reconnects
HEARTBEAT = 15.0  # a comment line this often keeps proxies from closing an idle stream
LINE_END = re.compile(r"\r\n|\r|\n")  # where an EventSource ends a line: CR counts too


def _sse(event: str, data: str) -> str:
    """One Server-Sent Event: every line of ``data`` as its own ``data:`` line.

    A line ends at CRLF, LF or a lone CR, as the browser reads the stream: a CR
    left inside a ``data:`` line (a prompt or a tool's result may hold one) would
    end it there and start a line of the writer's choosing (``event: end``). The
    browser joins the lines with LF, as HTML reads a CR anyway.
    """
    lines = "".join(f"data: {line}\n" for line in LINE_END.split(data))
    return f"event: {event}\n{lines}\n"


def routes(console: Console) -> list[BaseRoute]:
    """The thread page and its live stream."""
    views = console.sources.store.views

    async def load(request: Request) -> tuple[ThreadPage | None, str, str]:
        channel = request.path_params["channel"]
        thread_id = request.path_params["thread_id"]
        every = request.query_params.get("runs") == "all"
        page = await views.thread(channel, thread_id, runs=None if every else 50)
        return page, channel, thread_id

    def context(page: ThreadPage) -> dict[str, Any]:
        return {
            "thread": page,
            "live": console.sources.status(thread_key(page.channel, page.thread_id)),
            "highlight": highlight,
        }

    async def thread_page(request: Request) -> Response:
        page, channel, thread_id = await load(request)
        if page is None:
            return console.render(
                request, "missing.html", {"what": f"thread {thread_id} in {channel}"}, 404
            )
        return console.render(request, "thread.html", context(page))

    async def thread_events(request: Request) -> Response:
        page, channel, thread_id = await load(request)
        if page is None:
            return PlainTextResponse("no such thread", status_code=404)
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        if request.method == "HEAD":  # the headers only: no stream to hold for STREAM_MAX
            return Response(media_type="text/event-stream", headers=headers)
        every = request.query_params.get("runs") == "all"
        key = thread_key(channel, thread_id)

        async def stream() -> AsyncIterator[str]:
            last: tuple[Any, ...] | None = None
            started = time.monotonic()
            beat = started
            yield "retry: 1000\n\n"
            while not console.closing.is_set() and time.monotonic() - started < STREAM_MAX:
                mark = (
                    await views.thread_version(channel, thread_id),
                    console.sources.status(key),
                )
                if mark != last:
                    if last is not None:
                        fresh = await views.thread(channel, thread_id, runs=None if every else 50)
                        if fresh is not None:
                            yield _sse("update", console.fragment("runs.html", context(fresh)))
                    last = mark
                elif time.monotonic() - beat > HEARTBEAT:
                    beat = time.monotonic()
                    yield ": alive\n\n"
                try:
                    async with asyncio.timeout(POLL):
                        await console.closing.wait()
                except TimeoutError:
                    pass
            yield _sse("end", "")

        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    return [
        Route("/threads/{channel}/{thread_id}", thread_page, methods=["GET"]),
        Route("/threads/{channel}/{thread_id}/events", thread_events, methods=["GET"]),
    ]
