"""The scopes table: a thread's dumped REPL scope stored, replaced, dropped, pruned, listed."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions import SCHEMA_VERSION, Store, StoreError, scope_cutoff
from sessions.report import human_size, threads_report
from sessions.schema import MIGRATIONS

KEY = b"test key"


def mac(data: bytes) -> str:
    """The hex HMAC-SHA256 a caller would store beside ``data``."""
    return hmac.new(KEY, data, hashlib.sha256).hexdigest()


def raw(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read with a separate, plain sqlite3 connection: sees only what was committed."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql, params).fetchall()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A store with two threads, #ops/T1 and #dev/T2, each with one prompt."""
    async with Store(tmp_path / "a.db") as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x = 1", "2026-11-30T08:00:00Z")
        await store.runs.record_prompt("#dev", "T2", "M2", "bob", "y = 2", "2026-11-30T08:01:00Z")
        yield store


async def save(store: Store, data: bytes, *, thread: str = "T1", **changes: str) -> None:
    channel = "#ops" if thread == "T1" else "#dev"
    fields = {"monty_version": "0.0.3", "dumped": "2026-11-30T09:00:00Z", **changes}
    await store.scopes.save_scope(channel, thread, data=data, mac=mac(data), **fields)


@pytest.mark.parametrize(
    "data", [b"", b"\x00", b"\x00\xff" * 7, bytes(range(256)), b"\x80" * (1 << 20)]
)
async def test_a_scope_comes_back_byte_for_byte(store: Store, data: bytes) -> None:
    """Any bytes (empty, NULs, 1 MiB) load back exactly, with their size, version and MAC."""
    await save(store, data)
    got = await store.scopes.load_scope("#ops", "T1")
    assert got is not None
    assert (got.channel, got.thread_id, got.monty_version) == ("#ops", "T1", "0.0.3")
    assert (got.data, got.size, got.mac) == (data, len(data), mac(data))
    assert got.dumped == "2026-11-30T09:00:00.000Z"
    assert hmac.compare_digest(got.mac, mac(got.data))


async def test_no_scope_loads_as_none(store: Store) -> None:
    """A thread that never dumped a scope, and a thread that does not exist: None."""
    assert await store.scopes.load_scope("#ops", "T1") is None
    assert await store.scopes.load_scope("#ops", "nope") is None


async def test_saving_again_replaces_the_scope(store: Store) -> None:
    """One row per thread: the second save replaces bytes, size, version, time and MAC."""
    await save(store, b"old scope")
    await save(store, b"new", monty_version="0.0.4", dumped="2026-11-30T10:00:00+01:00")
    got = await store.scopes.load_scope("#ops", "T1")
    assert got is not None
    assert (got.data, got.size, got.monty_version, got.mac) == (b"new", 3, "0.0.4", mac(b"new"))
    assert got.dumped == "2026-11-30T09:00:00.000Z"
    assert raw(store.path, "SELECT count(*) FROM scopes") == [(1,)]


async def test_dumped_defaults_to_now(store: Store) -> None:
    """Without ``dumped`` the time of the save is stored, in the store's format."""
    before = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    await store.scopes.save_scope("#ops", "T1", monty_version="0.0.3", data=b"x", mac=mac(b"x"))
    got = await store.scopes.load_scope("#ops", "T1")
    assert got is not None
    assert got.dumped >= before
    assert got.dumped.endswith("Z")


async def test_saving_does_not_touch_the_threads_activity(store: Store) -> None:
    """Dumping a scope is not activity: the thread's last_active stays as it was."""
    before = raw(store.path, "SELECT last_active FROM threads WHERE thread_id = 'T1'")
    await save(store, b"x")
    assert raw(store.path, "SELECT last_active FROM threads WHERE thread_id = 'T1'") == before


async def test_a_scope_of_an_unknown_thread_is_refused(store: Store) -> None:
    """A thread is created by its prompts, never by a scope: StoreError, nothing stored."""
    with pytest.raises(StoreError, match="no such thread"):
        await store.scopes.save_scope("#ops", "T9", monty_version="0.0.3", data=b"x", mac=mac(b"x"))
    assert raw(store.path, "SELECT count(*) FROM scopes") == [(0,)]
    assert raw(store.path, "SELECT count(*) FROM threads WHERE thread_id = 'T9'") == [(0,)]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"monty_version": ""}, "no Monty version"),
        ({"mac": "not hex"}, "not a hex HMAC-SHA256"),
        ({"mac": mac(b"x").upper()}, "not a hex HMAC-SHA256"),
        ({"mac": mac(b"x")[:-2]}, "not a hex HMAC-SHA256"),
        ({"dumped": "yesterday"}, "not an ISO 8601 timestamp"),
    ],
)
async def test_bad_fields_are_refused(store: Store, changes: dict, match: str) -> None:
    """An empty version, a MAC that is not hex SHA-256, a bad time: StoreError, nothing stored."""
    fields = {"monty_version": "0.0.3", "data": b"x", "mac": mac(b"x"), **changes}
    with pytest.raises(StoreError, match=match):
        await store.scopes.save_scope("#ops", "T1", **fields)
    assert await store.scopes.load_scope("#ops", "T1") is None


async def test_drop_removes_only_that_threads_scope(store: Store) -> None:
    """``!reset``: the thread's dump goes, the other thread's stays; a second drop finds none."""
    await save(store, b"one")
    await save(store, b"two", thread="T2")
    assert await store.scopes.drop_scope("#ops", "T1") is True
    assert await store.scopes.load_scope("#ops", "T1") is None
    assert await store.scopes.drop_scope("#ops", "T1") is False
    assert await store.scopes.drop_scope("#ops", "never") is False
    kept = await store.scopes.load_scope("#dev", "T2")
    assert kept is not None
    assert kept.data == b"two"


async def test_prune_deletes_the_dumps_older_than_the_bound(store: Store) -> None:
    """Dumps strictly before the bound go, the rest stay; the count is returned."""
    await save(store, b"old", dumped="2026-10-01T00:00:00Z")
    await save(store, b"new", thread="T2", dumped="2026-11-30T00:00:00Z")
    assert await store.scopes.prune_scopes("2026-11-30T00:00:00Z") == 1
    assert await store.scopes.load_scope("#ops", "T1") is None
    assert await store.scopes.load_scope("#dev", "T2") is not None
    assert await store.scopes.prune_scopes("2026-11-30T00:00:00Z") == 0
    with pytest.raises(StoreError, match="older_than"):
        await store.scopes.prune_scopes("last month")


def test_scope_cutoff_is_retention_days_before_now() -> None:
    """30 days of retention on 2026-11-30 keeps what was dumped from 2026-10-31 on."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert scope_cutoff(30, now) == "2026-10-31T12:00:00.000Z"
    assert scope_cutoff(0, now) == "2026-11-30T12:00:00.000Z"
    with pytest.raises(StoreError, match="negative"):
        scope_cutoff(-1, now)


async def test_the_thread_listing_shows_the_scope_size(store: Store) -> None:
    """threads() has the stored scope's size, None without one; the table and JSON show it."""
    await save(store, b"\x00" * 1229)
    sizes = {t.thread_id: t.scope_bytes for t in await store.queries.threads()}
    assert sizes == {"T1": 1229, "T2": None}
    table = await threads_report(store.queries, limit=10, as_json=False)
    assert table[0].split()[-1] == "SCOPE"
    rows = {line.split()[3]: line.split()[-2:] for line in table[1:]}
    assert rows == {"T1": ["1.2", "KiB"], "T2": ["0", "-"]}
    lines = await threads_report(store.queries, limit=10, as_json=True)
    assert any('"thread_id": "T1"' in line and '"scope_bytes": 1229' in line for line in lines)
    assert any('"thread_id": "T2"' in line and '"scope_bytes": null' in line for line in lines)


async def test_the_listing_reads_the_scope_size_by_primary_key(store: Store) -> None:
    """The size comes from the scopes row by its key, never from a scan of scopes."""
    plan = await store.queries.explain("SELECT size FROM scopes WHERE thread = ?", ("#ops/T1",))
    assert any("USING INDEX sqlite_autoindex_scopes_1" in step for step in plan), plan
    plan = await store.queries.explain("DELETE FROM scopes WHERE dumped < ?", ("2026-11-30",))
    assert not any(step.startswith("SCAN scopes") for step in plan), plan


async def test_a_scope_survives_reopening(tmp_path: Path) -> None:
    """Closed and opened again (a restart), the store gives the same bytes back."""
    path = tmp_path / "a.db"
    async with Store(path) as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x = 1", "2026-11-30T08:00:00Z")
        await save(store, b"\x01\x02\x03")
    async with Store(path) as store:
        got = await store.scopes.load_scope("#ops", "T1")
        assert got is not None
        assert (got.data, got.mac) == (b"\x01\x02\x03", mac(b"\x01\x02\x03"))


async def test_migration_3_adds_the_scopes_table_to_a_version_2_database(tmp_path: Path) -> None:
    """A database at version 2 with threads gains an empty scopes table; its threads list
    with no scope, and can store one."""
    path = tmp_path / "a.db"
    async with Store(path, migrations=MIGRATIONS[:2]) as old:
        await old.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-30T08:00:00Z")
    assert raw(path, "PRAGMA user_version") == [(2,)]
    async with Store(path) as store:
        assert [t.scope_bytes for t in await store.queries.threads()] == [None]
        await save(store, b"x")
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(path, "SELECT name FROM schema_migrations WHERE version = 3") == [("scopes",)]
    assert raw(path, "SELECT thread, size FROM scopes") == [("#ops/T1", 1)]


async def test_the_size_cannot_lie_about_the_bytes(store: Store) -> None:
    """The table itself refuses a row whose size is not the length of its bytes."""
    with closing(sqlite3.connect(store.path)) as db, pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO scopes VALUES ('#ops/T1', '0.0.3', '2026-11-30T09:00:00.000Z', 5, ?, ?)",
            (b"abc", mac(b"abc")),
        )


@given(st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 64)))
def test_human_size_gives_a_short_label_for_any_size(size: int | None) -> None:
    """Any size (or none) is ``-``, ``N B`` under 1 KiB, or one decimal and a 1024 unit."""
    label = human_size(size)
    if size is None:
        assert label == "-"
    elif size < 1024:
        assert label == f"{size} B"
    else:
        number, unit = label.split()
        assert unit in {"KiB", "MiB", "GiB", "TiB"}
        assert unit == "TiB" or float(number) < 1024
        assert float(number) >= 1.0
