"""``python -m servers.simple``, the same as ``asyncai-mcp-simple``."""

from servers.simple import main

main()
