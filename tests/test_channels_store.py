"""The hub's message store on a real SQLite file: migrations, dedupe, retention, replay."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from channels.errors import HubStoreError
from channels.ids import ZERO_ID
from channels.store import MessageStore, NewMessage, Refused, Stored


def _new(client_id: str, text: str = "t", sender: str = "alice", channel: str = "#c") -> NewMessage:
    return NewMessage(channel, text, sender, client_id, thread=None, reply_to=None, more=False)


@pytest.fixture
async def store(tmp_path):
    """An open store over a fresh file."""
    made = MessageStore(tmp_path / "sub" / "hub.db", retention_count=3, retention_age=3600)
    await made.open()
    yield made
    await made.close()


async def test_a_blank_file_is_migrated_to_wal(store):
    """Opening creates the directory and the schema, in WAL mode, and records the version."""
    with closing(sqlite3.connect(store.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"messages"}


async def test_duplicates_in_and_across_batches(store):
    """A (sender, client_id) seen before, in this batch or an earlier one, is not stored again."""
    first = await store.store([_new("a"), _new("a", text="again"), _new("b")])
    assert [r.duplicate for r in first] == [False, True, False]
    assert first[1].message == first[0].message
    later = await store.store([_new("b"), _new("a", sender="bob")])
    assert later[0].duplicate
    assert later[0].message == first[2].message
    assert not later[1].duplicate  # another sender's client_id is its own
    rows = await store.after("#c", ZERO_ID, 10)
    assert [m.text for m in rows] == ["t", "t", "t"]
    assert [m.id for m in rows] == sorted(m.id for m in rows)


async def test_a_thread_of_another_channel_is_refused_in_its_batch(store):
    """Issue 26: in one batch, a publish in a thread whose root (or a reply) is in another
    channel is Refused and not stored; the others are stored, results in batch order."""
    [root] = await store.store([_new("r", channel="#ops")])
    ops = root.message.thread
    results = await store.store(
        [
            _new("a", channel="#pub"),
            NewMessage("#pub", "in", "eve", "b", thread=ops, reply_to=None, more=False),
            NewMessage("#ops", "ok", "bob", "c", thread=ops, reply_to=None, more=False),
        ]
    )
    assert isinstance(results[1], Refused)
    assert results[1].reason == f"thread {ops} is not a thread of #pub"
    assert [type(r) for r in results] == [Stored, Refused, Stored]
    assert [m.text for m in await store.after("#pub", ZERO_ID, 10)] == ["t"]
    assert [m.text for m in await store.after("#ops", ZERO_ID, 10)] == ["t", "ok"]


async def test_threads_default_to_the_root_id(store):
    """A message without thread starts its own; with one, it keeps it."""
    [root] = await store.store([_new("r")])
    assert root.message.thread == root.message.id
    reply = NewMessage(
        "#c", "re", "bob", "x", thread=root.message.id, reply_to=root.message.id, more=True
    )
    [stored] = await store.store([reply])
    assert (stored.message.thread, stored.message.reply_to, stored.message.more) == (
        root.message.id,
        root.message.id,
        True,
    )


async def test_retention_by_count_per_channel(store):
    """prune keeps the newest retention_count of each touched channel."""
    await store.store([_new(f"c{i}") for i in range(5)] + [_new("o", channel="#other")])
    assert await store.prune(["#c", "#other"]) == 2
    head, oldest = await store.bounds("#c")
    kept = await store.after("#c", ZERO_ID, 10)
    assert [m.id for m in kept] == sorted(m.id for m in kept)
    assert (oldest, head) == (kept[0].id, kept[-1].id)
    assert len(kept) == 3
    assert len(await store.after("#other", ZERO_ID, 10)) == 1


async def test_ids_continue_after_reopening(tmp_path):
    """A reopened store assigns ids after the largest stored one."""
    path = tmp_path / "hub.db"
    first = MessageStore(path, retention_count=10, retention_age=3600)
    await first.open()
    [a] = await first.store([_new("a")])
    await first.close()
    second = MessageStore(path, retention_count=10, retention_age=3600)
    await second.open()
    [b] = await second.store([_new("b")])
    await second.close()
    assert b.message.id > a.message.id


async def test_a_newer_schema_is_refused(tmp_path):
    """A file from a newer hub is not touched; the error says to upgrade."""
    path = tmp_path / "hub.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 99")
        db.commit()
    store = MessageStore(path, retention_count=10, retention_age=3600)
    with pytest.raises(HubStoreError, match="version 99"):
        await store.open()


async def test_an_unusable_path_is_a_store_error(tmp_path):
    """A path that cannot be a database is reported as HubStoreError, with the cause."""
    (tmp_path / "dir.db").mkdir()
    store = MessageStore(tmp_path / "dir.db", retention_count=10, retention_age=3600)
    with pytest.raises(HubStoreError, match="cannot open") as info:
        await store.open()
    assert info.value.__cause__ is not None
