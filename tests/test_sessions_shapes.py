"""The tool_shapes table (issue 19): a learned return shape per channel (issue 29), server and
tool, replaced."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from sessions import Store, StoredShape, StoreError
from sessions.schema import MIGRATIONS
from tests.test_sessions_store import raw

SHAPE = '{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}'


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An empty store."""
    async with Store(tmp_path / "a.db") as store:
        yield store


async def test_a_shape_is_stored_per_channel_server_and_tool_and_replaced(store: Store) -> None:
    """Saving again replaces the tool's shape in its channel (and its version); other tools
    and other channels keep theirs."""
    assert await store.shapes.load_shapes() == []
    await store.shapes.save_shape(
        "cat",
        "get_x",
        channel="#ops",
        server_version="1.0",
        shape=SHAPE,
        observed="2026-11-30T10:00:00.000Z",
    )
    await store.shapes.save_shape(
        "", "get_x", channel="#ops", server_version="", shape="{}", observed="2026-11-30T10:00:01Z"
    )
    await store.shapes.save_shape(
        "cat",
        "get_x",
        channel="#help",
        server_version="1.0",
        shape=SHAPE,
        observed="2026-11-30T10:00:03Z",
    )
    await store.shapes.save_shape(
        "cat",
        "get_x",
        channel="#ops",
        server_version="2.0",
        shape="{}",
        observed="2026-11-30T10:00:02Z",
    )
    assert await store.shapes.load_shapes() == [
        StoredShape("#help", "cat", "get_x", "1.0", SHAPE, "2026-11-30T10:00:03Z"),
        StoredShape("#ops", "", "get_x", "", "{}", "2026-11-30T10:00:01Z"),
        StoredShape("#ops", "cat", "get_x", "2.0", "{}", "2026-11-30T10:00:02Z"),
    ]


async def test_shapes_survive_reopening_the_database(tmp_path: Path) -> None:
    """A restarted daemon reads the shapes it learned before."""
    async with Store(tmp_path / "a.db") as store:
        await store.shapes.save_shape(
            "cat", "get_x", channel="#ops", server_version="1.0", shape=SHAPE
        )
    async with Store(tmp_path / "a.db") as store:
        (row,) = await store.shapes.load_shapes()
    got = (row.channel, row.server, row.tool, row.server_version, row.shape)
    assert got == ("#ops", "cat", "get_x", "1.0", SHAPE)
    assert row.observed.endswith("Z")


@pytest.mark.parametrize(
    ("tool", "shape", "message"),
    [
        ("", SHAPE, "no tool name"),
        ("get_x", "{not json", "not JSON"),
        ("get_x", "[1, 2]", "not a JSON object"),
    ],
)
async def test_a_shape_no_reader_could_use_is_refused(
    store: Store, tool: str, shape: str, message: str
) -> None:
    """Bad input is a StoreError naming the tool; nothing is stored."""
    with pytest.raises(StoreError, match=message):
        await store.shapes.save_shape("cat", tool, channel="#ops", server_version="1", shape=shape)
    assert await store.shapes.load_shapes() == []


async def test_migration_9_drops_the_shapes_no_channel_was_recorded_for(tmp_path: Path) -> None:
    """A version-8 database's shapes were learned in some channel nobody recorded: shown to
    every channel before, they are dropped (a cache, learned again), not handed to one."""
    path = tmp_path / "old.db"
    async with Store(path, migrations=MIGRATIONS[:8]):
        pass
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT INTO tool_shapes (server, tool, server_version, shape, observed)"
            " VALUES ('test', 'echo', '1', ?, '2026-11-30T10:00:00Z')",
            (SHAPE,),
        )
    assert len(raw(path, "SELECT * FROM tool_shapes")) == 1
    async with Store(path) as store:
        assert await store.shapes.load_shapes() == []
        await store.shapes.save_shape(
            "test", "echo", channel="#ops", server_version="1", shape=SHAPE
        )
        assert [r.channel for r in await store.shapes.load_shapes()] == ["#ops"]
    assert raw(path, "SELECT name FROM schema_migrations WHERE version = 9") == [
        ("shape_channels",)
    ]
