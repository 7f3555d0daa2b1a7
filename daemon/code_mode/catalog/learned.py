"""The shapes code mode learned, by server and tool, and their store (issue 19).

A tool without an output schema returns ``Any``. The first successful
result that is a parsed JSON object or array (:func:`~daemon.code_mode.catalog.shapes.learnable`)
gives it a shape (:func:`~daemon.code_mode.catalog.shapes.infer_shape`); a later
result that no longer fits is merged in (:func:`~daemon.code_mode.catalog.shapes.merge`).
Each change bumps :attr:`ShapeBook.version`, which makes the executor build
its catalog again: the stub then says ``Returns (observed): ...`` (so the
``run_code`` description changes only when a shape is learned or
refreshed), ``describe()`` shows it, and the next note of the thread whose
snippet saw it says so once (:func:`shape_notice`).

Shapes are kept per channel, server and tool (issue 29): a shape learned from
a run of ``#ops`` is shown (stub, ``describe()``, ``search_tools()``, the
harness's examples) only to runs of ``#ops``, even where channels share one
executor, and after a restart too. What a tool returned in one channel (the
keys of a private result, say) is data of that channel; ``""`` is the
channel of a call made outside any thread. :meth:`ShapeBook.channel` is one
channel's view. Each is kept with the server's ``serverInfo.version``:
a stored shape of another version is not used (the next result teaches the
new one and replaces it). A declared output schema always wins: such a tool
is never observed. A large result that goes into the sandbox as text
(:mod:`~daemon.code_mode.lazy`) is parsed on the host only to learn a
first shape, and only up to :data:`MAX_OBSERVED_CHARS`; it is not checked
against a known one (parsing it on the host is what the text path saves).

The store (a :class:`ShapeStore`, each shape a :class:`ShapeRecord`; the sessions
store serves it) is read once at start and
written as shapes change, each write bounded by :data:`SAVE_TIMEOUT`; a
failure is logged and costs only the stored copy.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from daemon.code_mode.catalog.schema import return_sketch
from daemon.code_mode.catalog.shapes import (
    dump_shape,
    fits,
    infer_shape,
    learnable,
    load_shape,
    merge,
)
from daemon.tools import ToolCallOutput, ToolDefinition

__all__ = [
    "MAX_NOTICE_CHARS",
    "MAX_OBSERVED_CHARS",
    "SAVE_TIMEOUT",
    "ChannelShapes",
    "LearnedShape",
    "ShapeBook",
    "ShapeRecord",
    "ShapeStore",
    "shape_notice",
]


class ShapeRecord(Protocol):
    """One learned return shape as stored (issue 19): per channel (issue 29), server and
    tool, with the version."""

    @property
    def channel(self) -> str:
        """The channel whose run taught it ("" for a call outside any thread)."""
        ...

    @property
    def server(self) -> str:
        """The MCP server ("" for a tool of no server)."""
        ...

    @property
    def tool(self) -> str:
        """The tool's MCP name."""
        ...

    @property
    def server_version(self) -> str:
        """The server's ``serverInfo.version`` when the shape was learned ("" when unknown)."""
        ...

    @property
    def shape(self) -> str:
        """The shape: a JSON schema as compact JSON text."""
        ...


class ShapeStore(Protocol):
    """Where code mode keeps the return shapes it learned from tools without an output schema."""

    async def load_shapes(self) -> Sequence[ShapeRecord]:
        """Every stored shape."""
        ...

    async def save_shape(
        self, server: str, tool: str, *, channel: str, server_version: str, shape: str
    ) -> None:
        """Store the tool's shape in ``channel``, replacing any earlier one; raises on failure."""
        ...


log = structlog.get_logger("asyncai.code_mode")

MAX_OBSERVED_CHARS = 1024 * 1024
SAVE_TIMEOUT = 10.0
MAX_NOTICE_CHARS = 400


@dataclass(frozen=True)
class LearnedShape:
    """A shape learned (or refreshed) from one result; ``py_name`` is the sandbox name."""

    server: str
    tool: str
    server_version: str
    shape: dict[str, Any]
    py_name: str = ""
    refreshed: bool = False
    channel: str = ""  # the channel whose run taught it

    @property
    def sketch(self) -> str:
        """The shape as a ``Returns:`` sketch."""
        return return_sketch(self.shape)


def _key(channel: str, d: ToolDefinition) -> tuple[str, str, str]:
    return channel, d.server or "", d.name


def shape_notice(learned: LearnedShape) -> str:
    """The note's line for a shape the thread's snippet just taught (said once)."""
    sketch = learned.sketch
    if len(sketch) > MAX_NOTICE_CHARS:
        sketch = sketch[: MAX_NOTICE_CHARS - 1] + "…"
    how = "changed; its stub now says" if learned.refreshed else "was learned:"
    return (
        f"[run_code: the result shape of {learned.py_name or learned.tool} (it declares none) "
        f"{how} Returns (observed): {sketch}]"
    )


class ShapeBook:
    """Learned shapes by (channel, server, tool), with the server version each was learned at."""

    def __init__(self, store: ShapeStore | None = None):
        self._store = store
        self._shapes: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
        self._loaded = False
        self._unsaved: list[LearnedShape] = []  # learned, not yet handed to the store
        self.version = 0  # bumped by every change
        # bumped by every change in a channel: that channel's catalog is built again
        self._versions: dict[str, int] = {}

    def channel(self, channel: str) -> ChannelShapes:
        """The view of one channel: the shapes its runs taught, and what they teach."""
        return ChannelShapes(self, channel)

    def version_of(self, channel: str) -> int:
        """How many times the shapes of ``channel`` changed (its catalog's freshness)."""
        return self._versions.get(channel, 0)

    def _bump(self, channel: str) -> None:
        self.version += 1
        self._versions[channel] = self._versions.get(channel, 0) + 1

    async def load(self) -> None:
        """Read the stored shapes (once; a failing store is logged and left empty)."""
        if self._loaded or self._store is None:
            return
        self._loaded = True
        try:
            async with asyncio.timeout(SAVE_TIMEOUT):
                rows = await self._store.load_shapes()
        except Exception as exc:
            # the shapes only help: without them the stubs say -> Any, as before
            log.warning("code_mode.shapes_not_loaded", error=repr(exc))
            return
        for row in rows:
            shape = load_shape(row.shape)
            if shape is None:
                log.warning("code_mode.shape_unreadable", server=row.server, tool=row.tool)
                continue
            self._shapes[(row.channel, row.server, row.tool)] = (row.server_version, shape)
        for channel in {channel for channel, _, _ in self._shapes}:
            self._bump(channel)

    def shape_for(self, d: ToolDefinition, *, channel: str) -> dict[str, Any] | None:
        """The shape of ``d`` learned in ``channel`` at its server's version, or None (or a
        declared schema)."""
        if d.output_schema is not None:
            return None
        known = self._shapes.get(_key(channel, d))
        if known is None or known[0] != (d.server_version or ""):
            return None
        return known[1]

    def observe(
        self, d: ToolDefinition, py_name: str, output: ToolCallOutput, value: Any, *, channel: str
    ) -> LearnedShape | None:
        """Learn from one successful result of a run in ``channel``; the new shape when it
        changed, else None.

        ``value`` is what the sandbox got when the host parsed it, or None
        when the result went in as text: then it is parsed here only to learn
        a first shape (not over :data:`MAX_OBSERVED_CHARS`), never to check
        one, which would parse every large result twice.
        """
        if d.output_schema is not None:
            return None
        current = self.shape_for(d, channel=channel)
        if value is None:
            if current is not None or len(output.content) > MAX_OBSERVED_CHARS:
                return None
            try:
                value = json.loads(output.content)
            except (ValueError, RecursionError):
                return None
        if not learnable(value):
            return None
        if current is not None and fits(value, current):
            return None
        seen = infer_shape(value)
        shape = seen if current is None else merge(current, seen)
        version = d.server_version or ""
        self._shapes[_key(channel, d)] = (version, shape)
        self._bump(channel)
        _, server, tool = _key(channel, d)
        learned = LearnedShape(
            server, tool, version, shape, py_name, refreshed=current is not None, channel=channel
        )
        self._unsaved.append(learned)
        return learned

    def snapshot(self) -> dict[tuple[str, str, str], tuple[str, dict[str, Any]]]:
        """The shapes known now, as a value (a copy) for :meth:`restore`."""
        return copy.deepcopy(self._shapes)

    def restore(self, shapes: dict[tuple[str, str, str], tuple[str, dict[str, Any]]]) -> None:
        """Know exactly ``shapes`` (a :meth:`snapshot`, of this book or another's), in memory;
        every channel whose shapes may differ builds its catalog again. The question bench
        starts its two arms' question from the same shapes (``--skip-unchanged``)."""
        changed = {channel for channel, _, _ in (*self._shapes, *shapes)}
        self._shapes = copy.deepcopy(shapes)
        for channel in changed:
            self._bump(channel)

    async def flush(self) -> None:
        """Store every shape learned since the last flush, whichever calls taught them."""
        while self._unsaved:
            await self.save(self._unsaved.pop(0))

    async def save(self, learned: LearnedShape) -> None:
        """Store ``learned``; a failure is logged, never raised."""
        log.info(
            "code_mode.shape_learned",
            channel=learned.channel,
            server=learned.server,
            tool=learned.tool,
            refreshed=learned.refreshed,
            sketch=learned.sketch,
        )
        if self._store is None:
            return
        try:
            async with asyncio.timeout(SAVE_TIMEOUT):
                await self._store.save_shape(
                    learned.server,
                    learned.tool,
                    channel=learned.channel,
                    server_version=learned.server_version,
                    shape=dump_shape(learned.shape),
                )
        except Exception as exc:
            # the shape still serves this process; only the stored copy is missing
            log.warning("code_mode.shape_not_saved", tool=learned.tool, error=repr(exc))


@dataclass(frozen=True)
class ChannelShapes:
    """One channel's view of a :class:`ShapeBook`: what its catalog shows and its calls teach."""

    book: ShapeBook
    name: str  # the channel ("" outside any thread)

    @property
    def version(self) -> int:
        """The book's version for this channel."""
        return self.book.version_of(self.name)

    def shape_for(self, d: ToolDefinition) -> dict[str, Any] | None:
        """:meth:`ShapeBook.shape_for` in this channel."""
        return self.book.shape_for(d, channel=self.name)

    def observe(
        self, d: ToolDefinition, py_name: str, output: ToolCallOutput, value: Any
    ) -> LearnedShape | None:
        """:meth:`ShapeBook.observe` in this channel."""
        return self.book.observe(d, py_name, output, value, channel=self.name)
