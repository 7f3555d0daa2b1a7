"""asyncai: the agent daemon (runtime, backend, code mode, MCP client, config, CLI)."""
