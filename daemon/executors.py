"""The executors a config asks for: MCP servers over stdio, in code mode unless ``direct``.

Used by the daemon (:mod:`daemon.app`) and ``asyncai ask``; nothing starts
until first use.
"""

from __future__ import annotations

import dataclasses

from daemon.approvals import ApprovalGate
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog import ShapeStore
from daemon.code_mode.repl import ScopeStore
from daemon.config import Config
from daemon.mcp.executor import McpToolExecutor
from daemon.model import model_profile
from daemon.runtime.audit import AuditedExecutor
from daemon.tools import AuditObserver, ToolExecutor

__all__ = ["build_mcp_executor", "build_tool_executor", "code_mode_limits"]


def code_mode_limits(config: Config) -> CodeModeLimits:
    """``[code_mode]``'s limits; with no ``catalog_budget`` configured, the one the model's
    profile wants (the small-model harness has its own), if it wants one."""
    limits = config.code_mode.limits()
    wanted = model_profile(config.model, config.model.model).catalog_budget
    if config.code_mode.catalog_budget is None and wanted is not None:
        limits = dataclasses.replace(limits, catalog_budget=wanted)
    return limits


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
