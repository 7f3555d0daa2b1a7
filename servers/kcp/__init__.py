"""asyncai-mcp-kcp: kcp workspaces through kubectl -o json, as a stdio MCP server."""

from servers.kcp.server import build_server, main

__all__ = ["build_server", "main"]
