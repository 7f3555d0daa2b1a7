"""MCP: the tools of stdio MCP servers behind the ``ToolExecutor`` interface.

Holds the server spec and its one check (:mod:`daemon.mcp.spec`, what the
config reads), the executor (:mod:`daemon.mcp.executor`: name → server
routing, and retrying servers that failed at start), the per-server
``max_concurrent`` slots (:mod:`daemon.mcp.slots`), one server's connection
and restarts (:mod:`daemon.mcp.connection`) and the stdio transport
(:mod:`daemon.mcp.stdio`). This ``__init__`` hands on the spec's check and
the executor, but loads the executor (and with it the mcp SDK, about 0.7 s)
only when it is first asked for, so that the config can read a spec
without loading the SDK.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.backoff``,
``daemon.crashpoints``, pydantic and the mcp SDK; nothing else of daemon/.
"""

from typing import TYPE_CHECKING, Any

from daemon.mcp.spec import parse_server_entry

if TYPE_CHECKING:
    from daemon.mcp.executor import McpToolExecutor

__all__ = ["McpToolExecutor", "parse_server_entry"]


def __getattr__(name: str) -> Any:
    """``McpToolExecutor`` on first use (PEP 562): importing it loads the mcp SDK."""
    if name == "McpToolExecutor":
        from daemon.mcp.executor import McpToolExecutor

        return McpToolExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
