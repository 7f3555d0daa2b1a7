"""asyncai-mcp-kcp: kcp workspaces through kubectl -o json, as a stdio MCP server."""
