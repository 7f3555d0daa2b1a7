"""A stand-in for systemd's notify socket: collects every datagram the daemon sends."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

WAIT = 20.0  # bound on every wait (a loaded 2-core machine is slow)


class NotifySocket:
    """Binds ``path`` as a unix datagram socket; ``datagrams`` holds each datagram
    whole, ``states`` each of its lines (``READY=1``, ``STATUS=...``)."""

    def __init__(self, path: Path):
        self.path = path
        self.datagrams: list[str] = []
        self.states: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.setblocking(False)
        self._arrived = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            datagram = (await loop.sock_recv(self._sock, 65536)).decode()
            self.datagrams.append(datagram)
            self.states.extend(datagram.split("\n"))
            self._arrived.set()

    async def wait_for(self, prefix: str) -> str:
        """The first state starting with ``prefix`` (waits, bounded)."""
        async with asyncio.timeout(WAIT):
            while True:
                found = [s for s in self.states if s.startswith(prefix)]
                if found:
                    return found[0]
                self._arrived.clear()
                await self._arrived.wait()

    async def next_datagram(self, containing: str) -> str:
        """The next datagram (from now on) that contains ``containing`` (bounded)."""
        seen = len(self.datagrams)
        async with asyncio.timeout(WAIT):
            while True:
                for datagram in self.datagrams[seen:]:
                    if containing in datagram:
                        return datagram
                seen = len(self.datagrams)
                self._arrived.clear()
                await self._arrived.wait()

    async def close(self) -> None:
        """Stop reading and close the socket."""
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        self._sock.close()
