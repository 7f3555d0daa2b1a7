"""A hostile stdio MCP peer, standard library only: one misbehaviour per tool.

It answers ``initialize`` and ``tools/list`` like ``mcp_raw_server.py``; each
tool then misbehaves in its own way when called, the way a buggy or hostile
third-party server would:

- ``ok``: answers ``fine`` (to show the server is still usable);
- ``err32000``: a JSON-RPC error with code -32000, the generic "server error"
  code many servers use (the SDK's own "Connection closed" code too);
- ``close_stdin``: closes its stdin and stdout and keeps running, silent;
- ``deaf``: closes its stdin only, answers, and keeps running, stdout open;
- ``bad_utf8``: a result line holding bytes that are not UTF-8;
- ``deep``: a result nested deeper than the JSON parser accepts;
- ``garbage``: a line that is not JSON, then no answer;
- ``asks``: sends the client a sampling, a roots, an elicitation and an unknown
  request, and notifications it does not expect, then answers;
- ``stderr_flood``: writes 50,000 short lines and one 1 MB line to stderr,
  then answers;
- ``weird``, ``empty_error``, ``no_content``, ``structured_list``: results of an
  unknown content type, ``isError`` with no content, no ``content`` at all, and
  structured content that is a list.

``--tools-json PATH`` lists the tools in PATH (a JSON list) instead;
``--cursor-loop`` gives every ``tools/list`` page the same ``nextCursor``.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    "ok",
    "err32000",
    "close_stdin",
    "deaf",
    "bad_utf8",
    "deep",
    "garbage",
    "asks",
    "stderr_flood",
    "weird",
    "empty_error",
    "no_content",
    "structured_list",
]


def write(raw: bytes) -> None:
    """One raw line on stdout."""
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def reply(request_id: object, result: dict) -> None:
    """One JSON-RPC response line."""
    write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())


def text(request_id: object, body: str) -> None:
    """A result of one text block."""
    reply(request_id, {"content": [{"type": "text", "text": body}]})


def call(request_id: object, name: str) -> None:
    """Misbehave as the tool ``name`` says."""
    if name == "ok":
        text(request_id, "fine")
    elif name == "err32000":
        error = {"code": -32000, "message": "database is locked"}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode())
    elif name == "close_stdin":
        os.close(0)
        os.close(1)
        time.sleep(60)
    elif name == "deaf":
        os.close(0)
        text(request_id, "deaf now")
        time.sleep(60)
    elif name == "bad_utf8":
        result = {"content": [{"type": "text", "text": "@"}]}
        head = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
        write(head.encode().replace(b"@", b"caf\xe9 \xff"))
    elif name == "deep":
        nested = "[" * 300 + "]" * 300
        body = '{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":{"x":%s}}}'
        write((body % (json.dumps(request_id), nested)).encode())
    elif name == "weird":
        reply(request_id, {"content": [{"type": "video", "url": "x"}]})
    elif name == "empty_error":
        reply(request_id, {"content": [], "isError": True})
    elif name == "no_content":
        reply(request_id, {})
    elif name == "structured_list":
        reply(request_id, {"content": [], "structuredContent": [1, 2]})
    elif name == "garbage":
        write(b"this is not json")
    elif name == "asks":
        for i, method in enumerate(
            ["sampling/createMessage", "roots/list", "elicitation/create", "x/unknown"]
        ):
            params = {"messages": [], "maxTokens": 5, "message": "?", "requestedSchema": {}}
            request = {"jsonrpc": "2.0", "id": f"s{i}", "method": method, "params": params}
            write(json.dumps(request).encode())
        for method in ["notifications/tools/list_changed", "notifications/x", "x/unknown"]:
            write(json.dumps({"jsonrpc": "2.0", "method": method, "params": {}}).encode())
        write(json.dumps({"jsonrpc": "2.0", "id": 999, "result": {}}).encode())  # no request
        text(request_id, "asked")
    elif name == "stderr_flood":
        sys.stderr.write("noise\n" * 50_000 + "x" * 1_000_000 + "\n")
        sys.stderr.flush()
        text(request_id, "flooded")


def main() -> None:
    """Answer requests line by line until stdin closes."""
    tools = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in TOOLS]
    if "--tools-json" in sys.argv:
        with open(sys.argv[sys.argv.index("--tools-json") + 1]) as f:
            tools = json.load(f)
    print("hostile server up", file=sys.stderr, flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            reply(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "0"},
                },
            )
        elif method == "tools/list":
            page: dict = {"tools": tools}
            if "--cursor-loop" in sys.argv:
                page["nextCursor"] = "again"
            reply(request_id, page)
        elif method == "tools/call":
            call(request_id, message["params"]["name"])
        elif "result" in message or "error" in message:
            print(f"client answered {request_id}: {line.strip()[:200]}", file=sys.stderr)


if __name__ == "__main__":
    main()
