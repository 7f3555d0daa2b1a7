"""One seed's world, served: its data built by every data module, the loopback HTTP
server for its pages, and the six MCP servers over its files.

``build_world`` calls ``build()`` of every module of :data:`DOMAINS`;
``open_world`` builds one and serves it for as long as its ``async with`` lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.questions.core import Template, World
from bench.questions.servers import server_entries

#: The data modules, ``bench/questions/<domain>.py``: each has ``build`` and ``TEMPLATES``.
DOMAINS = ("kcp", "web", "git", "sql", "tooless")

#: The loopback HTTP server's port, in the URLs of the web questions: fixed (a dev
#: server's usual one, chosen before any run), so every run asks the very same prompts.
HTTP_PORT = 8000

#: The seed-0 world as the examples file's questions and snippets name it: a run's.
EXAMPLES_ROOT = "/tmp/asyncai-bench/seed-0"
EXAMPLES_URL = f"http://127.0.0.1:{HTTP_PORT}"


def domains() -> list[ModuleType]:
    """The data modules, in :data:`DOMAINS` order."""
    return [importlib.import_module(f"bench.questions.{name}") for name in DOMAINS]


def templates() -> list[Template]:
    """Every template of every data module, in module order."""
    return [t for module in domains() for t in module.TEMPLATES]


def build_world(seed: int, root: Path, base_url: str) -> World:
    """``seed``'s world under ``root`` (made empty first): every data module's ``build``."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    world = World(
        seed=seed,
        root=root,
        base_url=base_url.rstrip("/"),
        kcp_fixtures=root / "fixtures",
        repo=root / "repo",
        db=root / "shop.db",
    )
    world.kcp_fixtures.mkdir()
    for module in domains():
        module.build(world)
    return world


def example_templates(questions: list[str]) -> list[str | None]:
    """The template id of each worked example's question (``[model] examples`` of the
    bench, ``bench/questions/examples.toml``), or None: the template whose seed-0
    question, in the terms the file writes (:data:`EXAMPLES_ROOT`, :data:`EXAMPLES_URL`),
    is word for word the example's. A dev question is not shown its own template's
    solved snippet (its score would be the example's, not the model's)."""
    with tempfile.TemporaryDirectory(prefix="asyncai-bench-examples-") as folder:
        world = build_world(0, Path(folder) / "seed-0", EXAMPLES_URL)
        by_text = {in_file_terms(t.make(world).text, world): t.id for t in templates()}
    return [by_text.get(q) for q in questions]


def in_file_terms(text: str, world: World) -> str:
    """``text`` of ``world`` with its directory and URL written as the examples file
    writes them (seed 0's, as a run builds it)."""
    return text.replace(world.base_url, EXAMPLES_URL).replace(str(world.root), EXAMPLES_ROOT)


def default_base() -> Path:
    """Where a run builds its worlds: a fixed path, since prompts name the repository
    and a path that changed from run to run would change them."""
    return Path(tempfile.gettempdir()) / "asyncai-bench"


@dataclass
class Served:
    """A world while it is served: the world, and the ``mcpServers`` entries of all six
    servers (the executor that connects them is the caller's)."""

    world: World
    servers: dict[str, Any]


@contextlib.asynccontextmanager
async def open_world(
    seed: int, *, http_port: int = HTTP_PORT, base: Path | None = None
) -> AsyncIterator[Served]:
    """``seed``'s world (in ``base/seed-N``), its HTTP server on ``http_port`` (0: any
    free port) and its servers' entries.

    ``base`` defaults to :func:`default_base` with a fixed port (a second run on the
    same port fails to bind first, so it never shares the directory), else to a
    temporary directory. Raises :class:`OSError` when the port is taken.
    """
    files: dict[str, tuple[str, str]] = {}
    http = await asyncio.start_server(lambda r, w: _serve(files, r, w), "127.0.0.1", http_port)
    try:
        port = http.sockets[0].getsockname()[1]
        with contextlib.ExitStack() as stack:
            if base is None:
                if http_port:
                    base = default_base()
                else:
                    base = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            world = build_world(seed, base / f"seed-{seed}", f"http://127.0.0.1:{port}")
            files.update(world.http_files)
            world.http_files = files  # one dict: a page added later is served too
            # list_kcps reports a kcp running when its kubeconfig's port accepts
            listener = stack.enter_context(socket.socket())
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            scratch = base / f"seed-{seed}.servers"  # the kubectl filter, the kcp directory
            shutil.rmtree(scratch, ignore_errors=True)
            yield Served(world, server_entries(world, scratch, listener))
    finally:
        http.close()
        await http.wait_closed()


async def _serve(
    files: dict[str, tuple[str, str]], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One request: the page at its path (query string included), or 404."""
    try:
        request = await reader.readline()
        while (await reader.readline()).strip():
            pass  # headers
        parts = request.decode("latin-1").split()
        path = parts[1] if len(parts) > 1 else "/"
        if path.startswith(("http://", "https://")):  # an absolute-form request (a proxy's)
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        found = files.get(path)
        status = "200 OK" if found else "404 Not Found"
        content_type, body = found or ("text/plain", "not found")
        data = body.encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass  # the client went away
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
