"""A minimal stdio JSON-RPC peer that speaks just enough MCP, standard library only.

It starts in milliseconds (no ``mcp`` import), so the tests for timeouts,
start-up and reaping do not pay for a real server. Tools: ``hang`` (never
answered), ``ping`` (answers ``pong``), ``crash`` (exits mid-call) and
``orphan_crash`` (exits mid-call, leaving a child that holds its stdout).

``--no-handshake``: never answer ``initialize`` (a server that hangs at start).
``--refuse-if PATH``: exit at once, with a message on stderr, while PATH exists
(a server that cannot be restarted until someone fixes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def reply(request_id: object, result: dict) -> None:
    """Write one JSON-RPC response line."""
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    """Answer requests line by line until stdin closes."""
    answer_initialize = "--no-handshake" not in sys.argv
    if "--refuse-if" in sys.argv:
        marker = sys.argv[sys.argv.index("--refuse-if") + 1]
        if os.path.exists(marker):
            print(f"refusing to start: {marker} exists", file=sys.stderr, flush=True)
            sys.exit(1)
    print("raw server up", file=sys.stderr, flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize" and answer_initialize:
            reply(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw", "version": "0"},
                },
            )
        elif method == "tools/list":
            tools = [
                {
                    "name": "hang",
                    "description": "Never answers.",
                    "inputSchema": {"type": "object"},
                },
                {"name": "ping", "description": "Answers pong.", "inputSchema": {"type": "object"}},
                {"name": "crash", "description": "Exits.", "inputSchema": {"type": "object"}},
                {
                    "name": "orphan_crash",
                    "description": "Exits, leaving a child that holds stdout.",
                    "inputSchema": {"type": "object"},
                },
            ]
            reply(request_id, {"tools": tools})
        elif method == "tools/call" and message["params"]["name"] == "ping":
            reply(request_id, {"content": [{"type": "text", "text": "pong"}]})
        elif method == "tools/call" and message["params"]["name"] == "crash":
            sys.exit(5)
        elif method == "tools/call" and message["params"]["name"] == "orphan_crash":
            # A child inherits stdout and stderr and outlives this process.
            child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
            print(f"orphan pid {child.pid}", file=sys.stderr, flush=True)
            sys.exit(6)


if __name__ == "__main__":
    main()
