"""Bundled stdio MCP servers. Each is a stand-alone program importing nothing of the rest."""

__all__: list[str] = []
