"""The modules one prompt's path runs through, as the calls show it (docs/layout.md).

In this process: a real hub, the daemon (its store, runtime, model loop, code
mode on a Monty pool, the MCP test server over stdio) and a person's
WebSocket client; only the model is scripted (``tests/fakes/fake_openai.py``):
one ``run_code`` whose snippet calls a tool, then the answer. After one warm-up
prompt, every Python call on every thread from the person's publish until the
store has the run's end is recorded (``sys.setprofile``), and the project's
modules it entered are printed by package, with the functions called in each
and how often. What runs in other processes is not seen: the Monty workers
(pydantic-monty), the MCP server, and ``atirc pub`` itself (``channels/cli.py``)
when a person uses it instead of this client.

    .venv/bin/python bench/prompt_path.py [--functions]

About 20 seconds. The section "One prompt's path" of docs/layout.md is this
list; run it again when the house changes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import io
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from channels.client import WebSocketChannel  # noqa: E402
from channels.hub import Hub  # noqa: E402
from daemon.app import Daemon  # noqa: E402
from daemon.config import load_config  # noqa: E402
from daemon.logging import configure_logging  # noqa: E402
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls  # noqa: E402

PACKAGES = ("daemon", "channels", "sessions", "servers")
TEST_SERVER = ROOT / "tests" / "fakes" / "mcp_test_server.py"
WAIT = 30.0

calls: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def profile(frame: FrameType, event: str, arg: Any) -> None:
    """Count each call of a function of the project, by file."""
    if event != "call":
        return
    name = frame.f_code.co_filename
    if name.startswith(str(ROOT)):
        rel = name[len(str(ROOT)) + 1 :]
        if rel.split("/", 1)[0] in PACKAGES:
            calls[rel][frame.f_code.co_qualname] += 1


CONFIG = """
[model]
base_url = "{model}"
model = "fake-model"
api_key = "test-key"
retries = 0

[channels]
url = "{hub}"
nick = "asyncai"
channels = ["#ops"]

[sessions]
db = "asyncai.db"

[mcp_servers.test]
command = "{python}"
args = ["{server}", "--label", "path"]
"""


async def ask(db: Path, person: WebSocketChannel, text: str) -> None:
    """Publish a prompt, wait for the daemon's reply in its thread and the reply's ack.

    The store is read with ``sqlite3`` itself, so that the wait calls nothing of
    the project's and the walk records the daemon's calls alone.
    """
    ack = await person.publish("#ops", text)
    async with asyncio.timeout(WAIT):
        async for message in person:
            if message.sender == "asyncai" and message.thread == ack.thread:
                break
        while not _acked(db, ack.id):  # noqa: ASYNC110 -- bounded polling of the file
            await asyncio.sleep(0.01)


def _acked(db: Path, prompt_id: str) -> bool:
    """Whether the reply of the run that answered the prompt is marked acked in the outbox."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        row = connection.execute(
            "SELECT o.status FROM prompts p JOIN outbox o ON o.run_id = p.run_id WHERE p.id = ?",
            (prompt_id,),
        ).fetchone()
    return row is not None and row[0] == "acked"


async def walk(tmp: Path) -> None:
    """Start everything, warm up with one prompt, then record a prompt's path."""
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = tmp / "asyncai.toml"
        path.write_text(
            CONFIG.format(
                model=fake.base_url, hub=hub.url, python=sys.executable, server=TEST_SERVER
            )
        )
        db = tmp / "asyncai.db"
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        person = WebSocketChannel(hub.url, nick="alice")
        await person.connect()
        await person.subscribe("#ops")
        try:
            fake.add(Reply("warm"))
            await ask(db, person, "warm up")
            fake.add(ToolCalls(("run_code", {"code": "r = await echo(text='pods')\nlen(r)"})))
            fake.add(Reply("4 pods."))
            threading.setprofile(profile)
            sys.setprofile(profile)
            try:
                await ask(db, person, "which pods are not running?")
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type] -- None clears it
        finally:
            await person.close()
            await daemon.aclose()


def main() -> None:
    """Run the walk and print the modules by package."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--functions", action="store_true", help="name the functions called")
    args = parser.parse_args()
    configure_logging(verbose=False, stream=io.StringIO())  # the daemon's log is not the point
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(walk(Path(tmp)))
    by_package: dict[str, list[str]] = collections.defaultdict(list)
    for rel in sorted(calls):
        package = rel.rsplit("/", 1)[0] if "/" in rel else rel
        by_package[package].append(rel)
    total = sum(len(v) for v in by_package.values())
    print(f"{total} modules, {sum(sum(c.values()) for c in calls.values())} calls")
    for package, files in by_package.items():
        names = ", ".join(Path(f).stem for f in files)
        print(f"- `{package}/` ({len(files)}): {names}")
        if args.functions:
            for f in files:
                top = ", ".join(f"{n} ×{k}" for n, k in calls[f].most_common(8))
                print(f"    {f}: {top}")


if __name__ == "__main__":
    main()
