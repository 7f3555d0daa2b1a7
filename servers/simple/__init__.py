"""asyncai-mcp-simple: http_get(url) as a stdio MCP server."""
