"""An in-memory ``ToolExecutor``: tools are Python async functions.

For tests about code mode itself (and anything else that needs tools without
MCP servers)::

    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_pods(*, namespace: str, limit: int | None = None) -> list:
        "List pods."
        return [{"name": "a"}]

A tool's input schema comes from its keyword parameters (or ``input_schema=``).
What the function returns becomes the ``ToolCallOutput``:

- a ``ToolCallOutput``: as it is;
- a ``str``: the text;
- anything else: its JSON text, and as ``structured`` when it is a dict;
- raising ``ToolTransportError``: passed through (the call could not be made);
- raising any other exception: an ``is_error`` output with its message, as
  an MCP server reports a failing tool.

Every call is recorded in ``calls`` as ``(name, arguments)`` before the
function runs; ``started``/``closed`` count lifecycle calls.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.errors import ToolTransportError
from daemon.tools import BaseToolExecutor, ToolCallOutput, ToolDefinition

__all__ = [
    "MODEL_TEST_LIMITS",
    "FakeTool",
    "FakeToolExecutor",
    "code_mode_over",
    "schema_from_signature",
]

#: Code mode's limits in the model tests: a stuck snippet fails within seconds.
MODEL_TEST_LIMITS = CodeModeLimits(max_feed_duration=5.0, max_wall=30.0, tool_timeout=10.0)


@contextlib.asynccontextmanager
async def code_mode_over(
    inner: Any, pool: Any, **options: Any
) -> AsyncIterator[CodeModeToolExecutor]:
    """Code mode over ``inner`` on the shared Monty ``pool``, closed on exit."""
    ex = CodeModeToolExecutor(inner, MODEL_TEST_LIMITS, pool=pool, **options)
    try:
        yield ex
    finally:
        await ex.aclose()


ToolFunction = Callable[..., Awaitable[Any]]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(args[0]) if len(args) == 1 else {}
    origin = typing.get_origin(annotation) or annotation
    name = _JSON_TYPES.get(origin)
    return {"type": name} if name else {}


def schema_from_signature(fn: Callable[..., Any]) -> dict:
    """A JSON schema for ``fn``'s keyword parameters (required when they have no default)."""
    hints = typing.get_type_hints(fn)
    properties: dict[str, dict] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        properties[name] = _json_type(hints.get(name, Any))
        if param.default is param.empty:
            required.append(name)
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


@dataclass
class FakeTool:
    """One fake tool: its definition and the function that answers it."""

    definition: ToolDefinition
    fn: ToolFunction


class FakeToolExecutor(BaseToolExecutor):
    """Tools defined by async functions, answered in memory."""

    def __init__(self, tools: list[FakeTool] | None = None):
        self.tools: dict[str, FakeTool] = {t.definition.name: t for t in tools or []}
        self.calls: list[tuple[str, dict]] = []
        self.started = 0
        self.closed = 0

    def tool(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        input_schema: dict | None = None,
        output_schema: dict | None = None,
        read_only: bool | None = None,
        destructive: bool | None = None,
        server: str | None = None,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Register the decorated async function as a tool (its name by default)."""

        def register(fn: ToolFunction) -> ToolFunction:
            definition = ToolDefinition(
                name=name or fn.__name__,
                description=description or inspect.getdoc(fn) or "",
                input_schema=input_schema or schema_from_signature(fn),
                output_schema=output_schema,
                read_only=read_only,
                destructive=destructive,
                server=server,
            )
            self.tools[definition.name] = FakeTool(definition, fn)
            return fn

        return register

    def definitions(self) -> list[ToolDefinition]:
        """The registered tools, in registration order."""
        return [t.definition for t in self.tools.values()]

    async def start(self) -> None:
        """Count the start; nothing to connect."""
        self.started += 1

    def calls_to(self, name: str) -> list[dict]:
        """The arguments of every call to ``name``, in order."""
        return [args for tool, args in self.calls if tool == name]

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Run the tool's function; see the module docstring for how results map."""
        self.calls.append((name, dict(arguments)))
        tool = self.tools.get(name)
        if tool is None:
            return ToolCallOutput(f"unknown tool: {name}", True)
        try:
            value = await tool.fn(**arguments)
        except ToolTransportError:
            raise
        except Exception as exc:
            return ToolCallOutput(str(exc) or type(exc).__name__, True)
        if isinstance(value, ToolCallOutput):
            return value
        if isinstance(value, str):
            return ToolCallOutput(value, False)
        return ToolCallOutput(
            json.dumps(value), False, structured=value if isinstance(value, dict) else None
        )

    async def aclose(self) -> None:
        """Count the close."""
        self.closed += 1
