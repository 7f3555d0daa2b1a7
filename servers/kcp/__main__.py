"""``python -m servers.kcp``, the same as ``asyncai-mcp-kcp``."""

from servers.kcp import main

main()
