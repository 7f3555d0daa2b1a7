"""The thread page's live stream (issue 30) over HTTP, without a browser.

A console over a real store on loopback: the stream sends the runs again when
a call starts or a run ends, and ends at shutdown so the daemon never waits
for an open page.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from daemon.config import Config
from daemon.web import Console, Sources, WebServer, console_app
from sessions import RunMetrics, Store
from sessions.testing import run_records, tool_call_row
from tests.test_web_auth import TOKEN, log_in, write_tokens

WAIT = 10.0


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Store, Console, WebServer]]:
    """A store with one running run in #ops/t1, and a console over it."""
    config = Config()
    config.web.tokens = write_tokens(tmp_path / "web.tokens", f"{TOKEN} operator\n")
    async with Store(tmp_path / "a.db") as store:
        await store.runs.record_prompt("#ops", "t1", "p1", "alice", "go", "2026-11-29T18:00:00Z")
        await store.runs.start_run("r1", "#ops", "t1", ["p1"])
        console = Console(Sources(config=config, store=store))
        server = WebServer(console_app(console), "127.0.0.1:0")
        await server.start()
        try:
            yield store, console, server
        finally:
            console.closing.set()
            await server.aclose()


async def events(response: httpx2.Response) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` of a Server-Sent Events stream."""
    event, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


async def test_the_stream_sends_the_runs_when_a_call_starts_and_when_the_run_ends(served):
    """No event until something changes; then the runs, with the new call; then the reply."""
    store, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        page = await client.get("/threads/%23ops/t1")
        assert page.status_code == 200
        assert 'data-events="/threads/%23ops/t1/events"' in page.text
        async with client.stream("GET", "/threads/%23ops/t1/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            received = events(stream)
            await asyncio.sleep(0.3)
            await store.audit.add_tool_call(
                tool_call_row("r1", "t1", tool="nap", record_uuid="not-stored-yet")
            )
            async with asyncio.timeout(WAIT):
                event, html = await anext(received)
            assert event == "update"
            assert 'data-tool="nap"' in html
            records = run_records("go", answer="All done.")
            await store.runs.finish_run("r1", "done", records, RunMetrics(), ["p1"], "done")
            async with asyncio.timeout(WAIT):
                event, html = await anext(received)
            assert event == "update"
            assert "All done." in html


async def test_an_open_stream_ends_at_shutdown_without_holding_it(served):
    """With a stream open, closing the console takes well under its close timeout."""
    _, console, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        async with client.stream("GET", "/threads/%23ops/t1/events") as stream:
            received = events(stream)
            started = time.monotonic()
            console.closing.set()
            await server.aclose()
            async with asyncio.timeout(WAIT):
                async for event, _ in received:
                    if event == "end":
                        break
            assert time.monotonic() - started < 2.0


async def test_a_missing_thread_is_404_for_the_page_and_its_stream(served):
    """A thread that does not exist: a 404 page, and no stream."""
    _, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        assert (await client.get("/threads/%23ops/nope")).status_code == 404
        assert (await client.get("/threads/%23ops/nope/events")).status_code == 404
        assert (await client.get("/threads/%23ops/nope/repl")).status_code == 404
