"""The one tool the model sees: ``run_code``, its schema and its description.

The description has three parts (spec 0004): the sandbox rules, the return
contract, and the catalog of functions. It depends only on the limits and the
inner tools, never on REPL state, so the model's cached prompt prefix stays
stable (A11).
"""

from __future__ import annotations

import copy

from daemon.code_mode.catalog import Catalog
from daemon.code_mode.contract import NO_OUTPUT
from daemon.code_mode.limits import CodeModeLimits
from daemon.tools import ToolDefinition

__all__ = ["RUN_CODE", "RUN_CODE_SCHEMA", "run_code_definition", "run_code_description"]

RUN_CODE = "run_code"

RUN_CODE_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "Python to run"},
        "restart": {"type": "boolean", "description": "reset REPL state first"},
    },
    "required": ["code"],
}


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n:,} bytes"


def run_code_description(catalog: Catalog, limits: CodeModeLimits | None = None) -> str:
    """The ``run_code`` description: sandbox rules, return contract, catalog."""
    limits = limits if limits is not None else CodeModeLimits()
    rules = f"""\
Run Python in a sandbox and get the result. The functions listed below are async \
Python functions that call tools: pass keyword arguments and `await` them; run several \
at once with `await asyncio.gather(f(...), g(...))`. Their results stay in the sandbox, \
so filter and aggregate there and return only what answers the question.

Plan first, then write one complete snippet that fetches, filters and returns the answer. \
Inspect the shape of a result (its keys, one item) only when a function's return type is \
unknown (-> Any) or after a failure.

Sandbox rules:
- Variables, functions and imports persist across run_code calls in this conversation; \
`restart: true` clears them. Earlier tool results are not in your history: keep what you \
need in variables.
- `asyncio`, `json` and `re` are already imported. Other standard modules such as math, \
datetime, collections, itertools, functools, time, random, base64, hashlib and csv can be \
imported; third-party packages cannot.
- No files, environment variables, network or subprocesses (PermissionError): the only \
way out is the functions below.
- This is Monty, a subset of Python: no class inheritance (so no custom exception \
classes), no `yield`, no `del`, no `async with`/`async for`, no `asyncio.create_task`, \
no `gather(return_exceptions=...)`, no `json.dumps(default=...)`.
- A function whose tool fails raises RuntimeError with the tool's message (catch it with \
try/except).
- Limits per call: {limits.max_feed_duration:g} s of execution (waiting for tools does not \
count), {limits.max_nested_calls} function calls, {_size(limits.max_print_bytes)} of \
print output, {limits.tool_timeout:g} s per function call, {limits.max_wall:g} s in all. \
A blown time or memory limit resets the REPL state.

Return contract:
- The value of the last expression is the result; print() output is collected separately.
- A str result comes back as-is, any other value as compact JSON; an empty value says so.
- With printed output: {{"output": "<printed>", "result": <value>}}, or \
{{"output": "<printed>"}} when the last expression is None.
- Nothing printed and None (or an assignment) last: `{NO_OUTPUT}`.
- An exception comes back as its traceback. Calling a function without `await` is an \
error (the call does not run).
- Results over {limits.max_result_chars:,} characters are refused with a preview: assign \
to a variable and return a filtered subset.

Available functions:
"""
    return rules + catalog.render()


def run_code_definition(catalog: Catalog, limits: CodeModeLimits | None = None) -> ToolDefinition:
    """The ``run_code`` tool definition."""
    return ToolDefinition(
        name=RUN_CODE,
        description=run_code_description(catalog, limits),
        input_schema=copy.deepcopy(RUN_CODE_SCHEMA),
        output_schema=None,
    )
