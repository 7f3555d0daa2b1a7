"""asyncai-mcp-simple: http_get(url) as a stdio MCP server."""

from servers.simple.server import build_server, main

__all__ = ["build_server", "main"]
