"""The executors a config asks for: MCP servers over stdio, in code mode unless ``direct``.

Used by the daemon (:mod:`daemon.app`) and ``asyncai ask``; nothing starts
until first use.

A channel's tools (issue 29): the MCP servers start once per daemon, in one
``McpToolExecutor``; each channel's executor stands on a :class:`ChannelTools`
view of it, which offers only the tools the channel's policy ``sees``
(:meth:`daemon.config.ChannelPolicy.sees`). A tool it does not offer is not in
its definitions (so not in code mode's stubs, ``search_tools`` or ``describe``,
nor in direct mode's tool list), and a call of it is refused by the view
(direct mode) or, in code mode, where the call leaves the sandbox
(:class:`daemon.tools.OffersTools`): a ``NameError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from daemon.approvals import ApprovalGate
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog import ShapeStore
from daemon.code_mode.repl import ScopeStore
from daemon.config import Config
from daemon.mcp.executor import McpToolExecutor
from daemon.model import model_profile
from daemon.runtime.audit import AuditedExecutor
from daemon.tools import (
    AuditObserver,
    BaseToolExecutor,
    CallSlots,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
    ToolExecutor,
)

__all__ = [
    "ChannelTools",
    "build_mcp_executor",
    "build_tool_executor",
    "channel_tools",
    "code_mode_limits",
]


def code_mode_limits(config: Config) -> CodeModeLimits:
    """``[code_mode]``'s limits; with no ``catalog_budget`` configured, the one the model's
    profile wants (the small-model harness has its own), if it wants one."""
    limits = config.code_mode.limits()
    wanted = model_profile(config.model, config.model.model).catalog_budget
    if config.code_mode.catalog_budget is None and wanted is not None:
        limits = dataclasses.replace(limits, catalog_budget=wanted)
    return limits


class ChannelTools(BaseToolExecutor):
    """The tools of one channel: a view of the daemon's executor that offers only those
    ``sees(definition)`` lets through (:class:`daemon.tools.OffersTools`).

    Starting it starts the executor behind (idempotent: shared by every
    channel); closing it closes nothing (the daemon closes that executor once).
    A call of a tool it does not offer is refused with the error an unknown
    tool gets, naming only the tools it offers.
    """

    def __init__(self, inner: ToolExecutor, sees: Callable[[ToolDefinition], bool]):
        self._inner = inner
        self._sees = sees
        self._cache: tuple[int, list[ToolDefinition], frozenset[str]] | None = None

    @property
    def tools_version(self) -> int:
        """The executor's (a late server's tools may join; code mode rebuilds its catalog)."""
        return getattr(self._inner, "tools_version", 0)

    @property
    def failed_servers(self) -> dict[str, str]:
        """The executor's servers that could not start (yet)."""
        failed: dict[str, str] = getattr(self._inner, "failed_servers", {}) or {}
        return failed

    def _offered(self) -> tuple[list[ToolDefinition], frozenset[str]]:
        version = self.tools_version
        if self._cache is None or self._cache[0] != version:
            offered = [d for d in self._inner.definitions() if self._sees(d)]
            self._cache = (version, offered, frozenset(d.name for d in offered))
        return self._cache[1], self._cache[2]

    def definitions(self) -> list[ToolDefinition]:
        """The executor's tools this channel sees, in its order."""
        return list(self._offered()[0])

    @property
    def hidden_tools(self) -> list[str]:
        """The executor's tools this channel does not see (valid once started): what no
        prompt of the channel may name, the harness's examples included."""
        offered = self._offered()[1]
        return [d.name for d in self._inner.definitions() if d.name not in offered]

    def offers(self, name: str) -> bool:
        """Whether ``name`` is one of this channel's tools."""
        return name in self._offered()[1]

    async def start(self) -> None:
        """Start the executor behind (idempotent)."""
        await self._inner.start()

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call ``name`` when this channel offers it; else the unknown tool's error."""
        await self._inner.start()
        if not self.offers(name):
            offered = ", ".join(sorted(self._offered()[1])) or "none"
            return ToolCallOutput(f"unknown tool {name!r}: the tools are: {offered}", is_error=True)
        return await self._inner.call_tool(name, arguments)

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """No per-thread scope (the executor behind has none either: MCP)."""
        return None

    async def aclose(self) -> None:
        """Nothing: the executor behind is shared, and closed by its owner."""


class _SlottedChannelTools(ChannelTools):
    """A :class:`ChannelTools` over an executor with per-server slots (:class:`CallSlots`)."""

    def call_slot(self, name: str) -> AbstractAsyncContextManager[float | None]:
        """The executor's slot for ``name``."""
        inner = self._inner
        assert isinstance(inner, CallSlots)
        return inner.call_slot(name)


def channel_tools(inner: ToolExecutor, sees: Callable[[str, str], bool]) -> ChannelTools:
    """The view of ``inner`` that offers the tools ``sees(server, tool)`` lets through (a
    channel policy's :meth:`~daemon.config.ChannelPolicy.sees`); a tool without a server
    is asked as server ``""``."""

    def offered(definition: ToolDefinition) -> bool:
        return sees(definition.server or "", definition.name)

    view = _SlottedChannelTools if isinstance(inner, CallSlots) else ChannelTools
    return view(inner, offered)


def build_tool_executor(
    config: Config,
    *,
    observer: AuditObserver | None = None,
    inner: ToolExecutor | None = None,
    gate: ApprovalGate | None = None,
    scopes: ScopeStore | None = None,
    shapes: ShapeStore | None = None,
) -> ToolExecutor:
    """The executor ``config`` asks for: MCP servers, wrapped in code mode unless ``direct``.

    ``inner`` replaces the ``McpToolExecutor`` built from ``config.mcp_servers``
    (``asyncai ask`` keeps a handle on it to check the servers started).
    ``observer`` is passed to the code-mode executor (called as each nested
    call starts and ends, for the durable audit), or in direct mode wraps
    ``inner`` in an :class:`~daemon.runtime.audit.AuditedExecutor`; ``gate`` is the approval
    policy it asks before a mutating call; ``scopes`` keeps each thread's REPL
    across evictions and restarts; ``shapes`` the return shapes learned from
    tools without an output schema. Nothing starts until first use.
    """
    if inner is None:
        inner = build_mcp_executor(config)
    if config.model.tool_mode == "direct":
        # the model calls the tools itself: each call audited as it starts and ends
        return inner if observer is None else AuditedExecutor(inner, observer)
    return CodeModeToolExecutor(
        inner,
        code_mode_limits(config),
        observer=observer,
        gate=gate,
        scopes=scopes,
        shapes=shapes,
    )


def build_mcp_executor(config: Config) -> ToolExecutor:
    """An ``McpToolExecutor`` over ``config.mcp_servers`` (not started)."""
    return McpToolExecutor({name: server.entry() for name, server in config.mcp_servers.items()})
