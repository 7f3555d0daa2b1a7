"""The floor for ``bench/daemon.py``: a do-nothing relay built from the daemon's libraries.

For each prompt on its channel it does the least a daemon must do, with the
same libraries the daemon uses, in the way the daemon uses them, and nothing
else (no intake, runtime, run slots, status frames, history, code mode or
logging):

- receives the prompt as a ``websockets`` client of the hub (the protocol's
  JSON frames parsed with the standard library's ``json``);
- asks the model for one chat completion with ``openai.AsyncOpenAI``, streamed
  as ``daemon/model/endpoint.py`` asks (the SDK's ``post`` with ``stream=True``,
  the usage asked for; issue 31) and reads it as the endpoint does: the body's
  lines to its end, each ``data:`` line's chunk decoded with ``json``, the reply's
  text joined from the chunks (not the SDK's iterator, which stops at ``[DONE]``
  and leaves its generators to the loop's finalizer);
- writes one transcript row with ``aiosqlite`` in one write transaction
  (``BEGIN IMMEDIATE``, the ``INSERT``, ``COMMIT``) run whole on aiosqlite's
  thread in one job, as the store runs its own (``StoreConnections._batch``),
  on a database opened as ``sessions.connection`` opens the store's
  (autocommit, WAL, ``synchronous=NORMAL``, ``busy_timeout``, ``foreign_keys``);
- publishes the reply (without waiting for its ack).

With ``echo`` as the fifth argument it only receives and publishes (the
reply is the prompt's text): no model, no database. That is the floor of the
hub and the benchmark's own process, which every reply crosses.

Every prompt is handled at once, in a task of its own (no queue). It runs in
its own process, on uvloop as ``asyncai serve`` does:
``python bench/relay.py HUB_URL CHANNEL MODEL_URL DB [echo]`` prints ``relay.ready``
on stderr once subscribed and runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from typing import Any

import aiosqlite
import openai
import uvloop
from websockets.asyncio.client import ClientConnection, connect

NICK = "relay"


async def open_db(path: str) -> aiosqlite.Connection:
    """The database, opened as ``sessions.connection`` opens the store's writer."""
    db = await aiosqlite.connect(path, isolation_level=None, timeout=5.0)
    await db.execute("PRAGMA busy_timeout = 5000")
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = NORMAL")
    await db.execute(
        "CREATE TABLE IF NOT EXISTS transcript (id TEXT PRIMARY KEY, thread TEXT NOT NULL,"
        " prompt TEXT NOT NULL, reply TEXT NOT NULL)"
    )
    return db


class Relay:
    """Prompt in, one model call, one row, reply out."""

    def __init__(
        self,
        ws: ClientConnection,
        channel: str,
        model_url: str,
        db: aiosqlite.Connection,
        echo: bool = False,
    ):
        self.ws = ws
        self.channel = channel
        self.db = db
        self.echo = echo
        self.client = openai.AsyncOpenAI(
            base_url=model_url, api_key="bench-key", max_retries=0, timeout=60.0
        )
        self.tasks: set[asyncio.Task[None]] = set()

    async def answer(self, frame: dict) -> None:
        """One prompt, start to end."""
        if self.echo:
            await self.publish(frame, frame["text"])
            return
        body = {"model": "fake-model", "messages": [{"role": "user", "content": frame["text"]}]}
        stream = await self.client.post(
            "/chat/completions",
            body={**body, "stream": True, "stream_options": {"include_usage": True}},
            cast_to=dict[str, Any],
            options={"timeout": 60.0},
            stream=True,
            stream_cls=openai.AsyncStream[dict[str, Any]],
        )
        parts = []
        try:  # the body's lines to its end, as the endpoint reads them (one data line an event)
            async for line in stream.response.aiter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:]).get("choices") or ():
                        parts.append((choice.get("delta") or {}).get("content") or "")
        finally:
            await stream.response.aclose()
        reply = "".join(parts)
        row = (frame["id"], frame["thread"], frame["text"], reply)
        await self.db._execute(self.write, row)  # one job; the thread runs them in turn
        await self.publish(frame, reply)

    def write(self, row: tuple[str, str, str, str]) -> None:
        """The transaction, on aiosqlite's thread."""
        conn = self.db._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO transcript (id, thread, prompt, reply) VALUES (?, ?, ?, ?)", row
            )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    async def publish(self, frame: dict, reply: str) -> None:
        """The reply in the prompt's thread."""
        await self.ws.send(
            json.dumps(
                {
                    "type": "publish",
                    "channel": self.channel,
                    "text": reply,
                    "thread": frame["thread"],
                    "reply_to": frame["id"],
                    "client_id": str(uuid.uuid4()),
                }
            )
        )

    async def run(self) -> None:
        """Read frames until the connection closes; each prompt answered in its own task."""
        async for raw in self.ws:
            frame = json.loads(raw)
            if frame.get("type") == "message" and frame.get("from") != NICK:
                task = asyncio.create_task(self.answer(frame))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)


async def main(hub_url: str, channel: str, model_url: str, db_path: str, mode: str = "") -> None:
    """Connect, subscribe, say ``relay.ready`` and relay until SIGTERM."""
    db = await open_db(db_path)
    try:
        async with connect(hub_url, compression=None) as ws:
            await ws.send(json.dumps({"type": "hello", "nick": NICK}))
            json.loads(await ws.recv())  # welcome
            await ws.send(json.dumps({"type": "subscribe", "channel": channel}))
            while json.loads(await ws.recv()).get("type") != "subscribed":
                pass
            relay = Relay(ws, channel, model_url, db, echo=mode == "echo")
            reading = asyncio.create_task(relay.run())
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            print('"relay.ready"', file=sys.stderr, flush=True)
            await stop.wait()
            reading.cancel()
            await asyncio.gather(reading, *relay.tasks, return_exceptions=True)
            await relay.client.close()
    finally:
        await db.close()


if __name__ == "__main__":
    uvloop.run(main(*sys.argv[1:6]))
