"""``--call`` and ``--tools``: one seed's world with all six servers, one tool called
the way code mode calls it, so a template's author sees the real output.

The result is printed as the sandbox receives it: JSON text parsed into a
Python value (shown as indented JSON), other text as a ``str``, an error
result as the ``RuntimeError`` the snippet would get.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from bench.questions.world import Served
from daemon.code_mode.convert import nested_value, result_bytes
from daemon.mcp.executor import McpToolExecutor


def _params(schema: dict[str, Any]) -> str:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return ", ".join(
        f"{name}{'' if name in required else '?'}: {(p or {}).get('type', 'any')}"
        for name, p in props.items()
    )


async def _started(served: Served) -> McpToolExecutor:
    executor = McpToolExecutor(served.servers, call_timeout=60.0)
    await executor.start()
    if executor.failed_servers:
        await executor.aclose()
        raise RuntimeError(f"servers that could not start: {executor.failed_servers}")
    return executor


async def list_tools(served: Served, say: Callable[[str], None]) -> None:
    """One line per tool: ``server.tool(params)``, then its description's first line."""
    executor = await _started(served)
    try:
        for d in executor.definitions():
            first = (d.description or "").strip().splitlines()
            say(f"{d.server}.{d.name}({_params(d.input_schema)})")
            if first:
                say(f"    {first[0][:110]}")
    finally:
        await executor.aclose()


async def call(served: Served, target: str, arguments: str, say: Callable[[str], None]) -> int:
    """Call ``target`` (``server.tool``) with the JSON ``arguments`` once; print its result
    as the sandbox gets it. ``{base_url}`` in ``arguments`` is the world's HTTP server."""
    server, _, tool = target.partition(".")
    args = json.loads(arguments.replace("{base_url}", served.world.base_url) or "{}")
    if not isinstance(args, dict):
        raise ValueError("JSON-ARGS must be an object")
    executor = await _started(served)
    try:
        routed = executor.routes.get(tool)
        if routed != server:
            print(
                f"no tool {tool!r} on server {server!r}"
                + (f" (it is {routed}'s)" if routed else f"; tools: {sorted(executor.routes)}"),
                file=sys.stderr,
            )
            return 2
        output = await executor.call_tool(tool, args)
    finally:
        await executor.aclose()
    if output.is_error:
        say(f"# {target}: an error result: the snippet gets RuntimeError with this text")
        say(output.content)
        return 1
    value = nested_value(output)
    say(f"# {target}: {type(value).__name__}, {result_bytes(output):,} bytes into the sandbox")
    if isinstance(value, str):
        say(value)
    else:
        say(json.dumps(value, indent=2, ensure_ascii=False))
    if output.structured is not None and output.content:
        say("# (the server also sent structuredContent; the sandbox gets the text, parsed)")
    return 0
