"""MCP: the tools of stdio MCP servers behind the ``ToolExecutor`` interface.

Holds the server spec and its one check (:mod:`daemon.mcp.spec`, what the
config reads), the executor (:mod:`daemon.mcp.executor`: name → server
routing, and retrying servers that failed at start), the per-server
``max_concurrent`` slots (:mod:`daemon.mcp.slots`), one server's connection
and restarts (:mod:`daemon.mcp.connection`) and the stdio transport
(:mod:`daemon.mcp.stdio`). This ``__init__`` imports
none of them, so that the config can read a spec without loading the mcp SDK:
import ``McpToolExecutor`` from :mod:`daemon.mcp.executor`.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.backoff``,
``daemon.crashpoints``, pydantic and the mcp SDK; nothing else of daemon/.
"""

__all__: list[str] = []
