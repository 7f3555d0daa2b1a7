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

With ``durable`` it does what the relay does, but its one transaction is the
daemon's for a prompt at the live edge (traced with ``sqlite3``'s trace callback
on 2026-12-05): the same ten statements on the store's own schema (created by
``sessions.Store``): the thread's row, the run's with its end and its time split,
the prompt's, the run's sender, the channel's cursor, the previous reply's ack in
the outbox, the thread's last record read, the question's and the answer's
records, and the reply's outbox row. The guarantees' cost in the store (nothing
lost, a reply published once, the transcript and the token limit's rows), with
none of the daemon's own Python around it: how much of the daemon's excess over
the relay the store's durable record is by itself.

Every prompt is handled at once, in a task of its own (no queue). It runs in
its own process, on uvloop as ``asyncai serve`` does:
``python bench/relay.py HUB_URL CHANNEL MODEL_URL DB [echo|durable]`` prints ``relay.ready``
on stderr once subscribed and runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import aiosqlite
import openai
import uvloop
from websockets.asyncio.client import ClientConnection, connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sessions import Store, now_iso, session_id, thread_key

NICK = "relay"


async def open_db(path: str, durable: bool = False) -> aiosqlite.Connection:
    """The database, opened as ``sessions.connection`` opens the store's writer
    (``durable``: with the store's schema, as ``sessions.Store`` migrates it)."""
    if durable:
        async with Store(Path(path)):
            pass
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
        mode: str = "",
    ):
        self.ws = ws
        self.channel = channel
        self.db = db
        self.echo = mode == "echo"
        self.durable = mode == "durable"
        self.last_run = ""  # the run whose reply the next transaction acks (``durable``)
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
        if self.durable:
            await self.db._execute(self.write_durable, frame, reply)
        else:
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

    def write_durable(self, frame: dict, reply: str) -> None:
        """The daemon's transaction for a prompt answered at once, statement by statement
        as ``sqlite3``'s trace shows it (values of the same kinds and sizes)."""
        conn = self.db._conn
        now, thread, run = now_iso(), thread_key(self.channel, frame["thread"]), str(uuid.uuid4())
        session = session_id(self.channel, frame["thread"])
        split = {"total": 0.004, "model_slot": 0.0, "prompt_eval": 0.003, "generation": 0.0}
        split |= {"sandbox": 0.0, "tools": 0.0, "approvals": 0.0, "daemon": 0.001}
        question = {"role": "user", "content": [{"type": "text", "text": frame["text"]}]}
        answer = {  # the shape of the daemon's assistant record
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": "fake-model",
            "content": [{"type": "text", "text": reply}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        record = (
            "INSERT INTO records (uuid, parent_uuid, thread, session_id, run_id, type, timestamp,"
            " message, tool_use_result, cwd, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)"
        )
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO threads (id, channel, thread_id, session_id, created, last_active)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET last_active = excluded.last_active",
                (thread, self.channel, frame["thread"], session, now, now),
            )
            conn.execute(
                "INSERT INTO runs (id, thread, started, finished, status, rounds, run_code_calls,"
                " nested_calls, bytes_in, bytes_out, final_round_forced, prompt_tokens,"
                " completion_tokens, extra, error)"
                " VALUES (?, ?, ?, ?, 'done', 1, 0, 0, 0, 0, 0, 10, 5, ?, NULL)",
                (run, thread, now, now, json.dumps({"split": split})),
            )
            conn.execute(
                "INSERT INTO prompts (id, thread, sender, text, ts, received, status, run_id,"
                " updated) VALUES (?, ?, ?, ?, ?, ?, 'done', ?, ?) ON CONFLICT (id) DO NOTHING",
                (frame["id"], thread, frame["from"], frame["text"], now, now, run, now),
            )
            conn.execute(
                "INSERT OR IGNORE INTO run_senders (sender, started, run_id) VALUES (?, ?, ?)",
                (frame["from"], now, run),
            )
            conn.execute(
                "INSERT INTO cursors (channel, message_id, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (channel) DO UPDATE SET message_id = excluded.message_id,"
                " updated = excluded.updated WHERE excluded.message_id > cursors.message_id",
                (self.channel, frame["id"], now),
            )
            conn.execute(
                "UPDATE outbox SET status = 'acked', acked = ?, message_id = ? WHERE run_id = ?",
                (now, frame["id"], self.last_run),
            )
            parent = conn.execute(
                "SELECT uuid FROM records WHERE thread = ? ORDER BY seq DESC LIMIT 1", (thread,)
            ).fetchone()
            first, second = str(uuid.uuid4()), str(uuid.uuid4())
            for uid, up, kind, message in (
                (first, parent[0] if parent else None, "user", question),
                (second, first, "assistant", answer),
            ):
                values = (uid, up, thread, session, run, kind, now, json.dumps(message))
                conn.execute(record, (*values, "/", "0"))
            conn.execute(
                "INSERT INTO outbox (run_id, channel, thread_id, reply_to, client_id, text,"
                " committed) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run, self.channel, frame["thread"], frame["id"], str(uuid.uuid4()), reply, now),
            )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        self.last_run = run

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
    db = await open_db(db_path, durable=mode == "durable")
    try:
        async with connect(hub_url, compression=None) as ws:
            await ws.send(json.dumps({"type": "hello", "nick": NICK}))
            json.loads(await ws.recv())  # welcome
            await ws.send(json.dumps({"type": "subscribe", "channel": channel}))
            while json.loads(await ws.recv()).get("type") != "subscribed":
                pass
            relay = Relay(ws, channel, model_url, db, mode)
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
