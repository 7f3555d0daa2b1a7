"""MCP: the tools of stdio MCP servers behind the ``ToolExecutor`` interface.

Holds the executor (:mod:`daemon.mcp.executor`, name → server routing), one
server's connection and restarts (:mod:`daemon.mcp.connection`), the stdio
transport (:mod:`daemon.mcp.stdio`) and the server spec.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.backoff``, the mcp SDK;
nothing else of daemon/.
"""

from daemon.mcp.executor import McpToolExecutor

__all__ = ["McpToolExecutor"]
