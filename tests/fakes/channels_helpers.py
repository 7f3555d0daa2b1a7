"""Helpers for the channels tests: hub and client factories, a raw protocol client, backoffs.

Everything here is real (a hub on 127.0.0.1 port 0, websocket connections);
the only stand-ins are the backoffs, which never really sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from channels.client import WebSocketChannel
from channels.frames import Message
from channels.hub import Hub

WAIT = 5.0  # seconds: every wait in these tests is bounded by this


async def no_backoff(attempt: int) -> bool:
    """Retry at once (yielding to the loop), giving up after three attempts in a row."""
    await asyncio.sleep(0)
    return attempt <= 3


async def give_up(attempt: int) -> bool:
    """Never retry."""
    return False


class GatedBackoff:
    """A backoff that waits until the test opens the gate: reconnects happen exactly then."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self.calls = 0

    async def __call__(self, attempt: int) -> bool:
        self.calls += 1
        self.waiting.set()
        await self.gate.wait()
        return True


class Hubs:
    """Starts hubs on port 0 over one database file and closes them all at the end."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.hubs: list[Hub] = []

    async def start(self, **kwargs: Any) -> Hub:
        kwargs.setdefault("port", 0)
        hub = Hub(self.db, **kwargs)
        await hub.start()
        self.hubs.append(hub)
        return hub

    async def aclose(self) -> None:
        for hub in self.hubs:
            await hub.aclose()


class Clients:
    """Makes WebSocketChannels with test-friendly timeouts and closes them all at the end."""

    def __init__(self) -> None:
        self.clients: list[WebSocketChannel] = []

    async def connect(self, url: str, **kwargs: Any) -> WebSocketChannel:
        client = self.make(url, **kwargs)
        await client.connect()
        return client

    def make(self, url: str, **kwargs: Any) -> WebSocketChannel:
        kwargs.setdefault("ack_timeout", WAIT)
        kwargs.setdefault("connect_timeout", WAIT)
        kwargs.setdefault("backoff", no_backoff)
        if "token" not in kwargs:
            kwargs.setdefault("nick", "alice")
        client = WebSocketChannel(url, **kwargs)
        self.clients.append(client)
        return client

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()


class RawClient:
    """Speaks the protocol by hand, to send what WebSocketChannel never would."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, url: str, *, nick: str | None = "raw", **kwargs: Any) -> RawClient:
        ws = await connect(url, compression=None, **kwargs)
        raw = cls(ws)
        if nick is not None:
            await raw.send({"type": "hello", "nick": nick})
            assert (await raw.recv())["type"] == "welcome"
        return raw

    async def send(self, frame: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    async def recv(self) -> dict[str, Any]:
        async with asyncio.timeout(WAIT):
            return json.loads(await self.ws.recv())

    async def recv_type(self, frame_type: str) -> dict[str, Any]:
        """The next frame of ``frame_type``, skipping others."""
        while True:
            frame = await self.recv()
            if frame["type"] == frame_type:
                return frame

    async def until_closed(self) -> list[dict[str, Any]]:
        """Every frame until the hub closes the connection."""
        frames = []
        async with asyncio.timeout(WAIT):
            with contextlib.suppress(ConnectionClosed):  # any close code ends the list
                async for raw in self.ws:
                    frames.append(json.loads(raw))
        return frames

    async def close(self) -> None:
        await self.ws.close()


async def take(client: WebSocketChannel, count: int) -> list[Message]:
    """The next ``count`` messages, within the test bound."""
    out = []
    async with asyncio.timeout(WAIT):
        while len(out) < count:
            out.append(await client.receive())
    return out
