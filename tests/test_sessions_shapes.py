"""The tool_shapes table (issue 19): a learned return shape per server and tool, replaced."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sessions import Store, StoredShape, StoreError

SHAPE = '{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}'


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An empty store."""
    async with Store(tmp_path / "a.db") as store:
        yield store


async def test_a_shape_is_stored_per_server_and_tool_and_replaced(store: Store) -> None:
    """Saving again replaces the tool's shape (and its version); other tools keep theirs."""
    assert await store.shapes.load_shapes() == []
    await store.shapes.save_shape(
        "cat", "get_x", server_version="1.0", shape=SHAPE, observed="2026-11-30T10:00:00.000Z"
    )
    await store.shapes.save_shape(
        "", "get_x", server_version="", shape="{}", observed="2026-11-30T10:00:01.000Z"
    )
    await store.shapes.save_shape(
        "cat", "get_x", server_version="2.0", shape="{}", observed="2026-11-30T10:00:02.000Z"
    )
    assert await store.shapes.load_shapes() == [
        StoredShape("", "get_x", "", "{}", "2026-11-30T10:00:01.000Z"),
        StoredShape("cat", "get_x", "2.0", "{}", "2026-11-30T10:00:02.000Z"),
    ]


async def test_shapes_survive_reopening_the_database(tmp_path: Path) -> None:
    """A restarted daemon reads the shapes it learned before."""
    async with Store(tmp_path / "a.db") as store:
        await store.shapes.save_shape("cat", "get_x", server_version="1.0", shape=SHAPE)
    async with Store(tmp_path / "a.db") as store:
        (row,) = await store.shapes.load_shapes()
    assert (row.server, row.tool, row.server_version, row.shape) == ("cat", "get_x", "1.0", SHAPE)
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
        await store.shapes.save_shape("cat", tool, server_version="1", shape=shape)
    assert await store.shapes.load_shapes() == []
