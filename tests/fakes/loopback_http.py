"""A scripted HTTP server on loopback for http_get's tests: each connection runs a handler."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handle: Handler) -> AsyncIterator[int]:
    """An asyncio server on 127.0.0.1 that reads a request head and runs
    ``handle``; yields its port. Handlers still running are cancelled at the end."""
    tasks: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        writers.append(writer)
        try:
            # the client going away (its deadline) is how most of these handlers end
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                await handle(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        # drop every connection: a handler still sending or reading sees it
        # and ends (asyncio logs an error for a cancelled handler task)
        for writer in writers:
            writer.transport.abort()
        async with asyncio.timeout(10):
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
