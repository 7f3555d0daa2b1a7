"""The one tool the model sees: ``run_code``, its schema and its description.

The description (spec 0004 run_code, Return contract; A1, A8, A10, A11) has:
how to work (plan, then one complete snippet; inspect shapes only after a
failure; variables persist, earlier tool results are not in the history),
the sandbox rules, the return contract, the built-in helpers, and the
catalog of typed ``async def`` stubs, last (or, over ``code_mode.catalog_budget``,
an index of names and one line each, with ``search_tools`` and ``describe``).

It is a pure function of the catalog and the limits, with no dates, counters
or per-thread state in it, so it is byte-identical from run to run and the
model's cached prompt prefix stays stable; what changes per thread (the
variables note) goes into the user message instead.
"""

from __future__ import annotations

import copy

from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.catalog.search import DESCRIBE, SEARCH_LIMIT, SEARCH_TOOLS, index_lines
from daemon.code_mode.contract import NO_OUTPUT
from daemon.code_mode.helpers import RESERVED_NAMES
from daemon.limits import CodeModeLimits
from daemon.tools import ToolDefinition

__all__ = [
    "RUN_CODE",
    "RUN_CODE_SCHEMA",
    "catalog_section",
    "helpers_section",
    "run_code_definition",
    "run_code_description",
    "search_section",
]

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
    """The ``run_code`` description for ``catalog``; the same inputs give the same bytes."""
    limits = limits if limits is not None else CodeModeLimits()
    text = f"""\
Run Python in a sandbox (Monty, a subset of Python 3) and get the result. The functions \
listed at the end are async Python functions that call tools: pass keyword arguments and \
`await` them. Their results stay in the sandbox, so filter and aggregate there and return \
only what answers the question.

How to work:
- Plan first, then write ONE complete snippet that fetches, filters and returns the \
answer. Run independent calls at once: `a, b = await asyncio.gather(f(x=1), g(y=2))`.
- Trust the signatures and the `Returns:` shapes below. Inspect a shape only after a \
failure, with a small sample (`list(r)`, `str(r)[:300]`), never the whole value. A \
function annotated `-> Any` declares no result shape: inspect a small sample of its \
result before relying on one.
- Variables, functions and imports persist across run_code calls for the whole \
conversation. Earlier tool results are NOT in your message history (only what run_code \
returned is), but they are still in any variable you assigned them to: reuse those \
instead of fetching again. A note at the end of the user's message lists the variables \
still in scope. `restart: true` clears them all first.

Sandbox rules:
- `asyncio`, `json` and `re` are already imported. Also importable: math, datetime, \
collections, itertools, functools, dataclasses, typing, time, random, copy, base64, \
hashlib, decimal, csv, bisect. No other modules (no statistics, enum, operator, heapq, \
io, uuid, string, textwrap, contextlib) and no third-party packages.
- No files, environment variables, network or subprocesses (PermissionError): the only \
way out is the functions below.
- Not supported: class inheritance (so no custom exception classes), \
@property/@staticmethod/@classmethod, `yield`, `del`, `async with`, `async for`, \
`except*`, `asyncio.create_task` (use asyncio.gather), `gather(return_exceptions=...)`, \
`json.dumps(default=...)` (use to_json), collections.OrderedDict (dicts keep order), \
globals(), super(). Exceptions take at most one string argument: \
raise ValueError(f"bad {{x}}").
- A function whose tool fails raises RuntimeError with the tool's message (catch it with \
try/except). Wrong arguments raise TypeError before the tool is called.
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
- An exception comes back as its traceback, with a `Hint:` line for known sandbox gaps; \
fix the snippet and run it again. Calling a function without `await` is an error (the \
call does not run).
- Results over {limits.max_result_chars:,} characters are refused with a preview: assign \
to a variable and return a filtered subset.

"""
    return f"{text}{helpers_section()}\n{catalog_section(catalog)}"


#: Each helper's line in the description, by name (:data:`RESERVED_NAMES`' order).
HELPER_LINES: dict[str, str] = {
    "items": """\
- items(x): the list inside x: x itself for a list, x["items"], the only list value of a \
dict, [x] for a dict without lists, [] for None.""",
    "names": "- names(x): metadata.name (else name, else id) of each item of items(x).",
    "dig": """\
- dig(obj, *path, default=None): nested lookup by dotted or split segments, None-safe: \
dig(pod, "status.phase"), dig(x, "items", 0, "metadata.name"), \
dig(pod, "metadata.labels", "app.kubernetes.io/name"). Returns default when a step is \
missing or None; a last argument that is not a str or int is the default: \
dig(x, "spec.ports", []).""",
    "count_by": """\
- count_by(xs, *path): {value: count} of dig(x, *path) over items(xs), most common \
first: count_by(pods, "status.phase").""",
    "to_json": """\
- to_json(x, indent=None): json.dumps that turns sets into lists and other unknown values \
into str().""",
    "parse_records": """\
- parse_records(x): the records in a tool's result as a list of dicts: text that is an \
HTML or markdown table, CSV lines under a header, or blocks of "Key: value" lines (numbers \
as int or float); JSON gives items() of it, and an HTTP result its json, else its body: \
parse_records(page)[0]["name"].""",
}


def helpers_section(names: tuple[str, ...] = RESERVED_NAMES) -> str:
    """The description's list of the built-in helpers ``names`` (all of them unless
    told), ending in a newline.

    The small-model harness shows it word for word (``daemon.model.harness``), for the
    helpers it names.
    """
    lines = "\n".join(HELPER_LINES[n] for n in names)
    return f"""\
Helpers, defined in every scope (do not rebind these names: {", ".join(names)}):
{lines}
"""


def catalog_section(catalog: Catalog) -> str:
    """The description's last part: the heading, then the catalog's stubs (or "none").

    A :attr:`~daemon.code_mode.catalog.Catalog.searchable` catalog (its stubs
    over ``code_mode.catalog_budget``) lists each function by name and one
    line instead, with the two helpers that find and show the stubs
    (:func:`search_section`). The small-model harness shows it word for word
    (``daemon.model.harness``).
    """
    if catalog.searchable:
        return search_section(catalog)
    stubs = catalog.render()
    heading = """\
Available functions (keyword arguments only, required ones first; an optional one left \
out or passed as None is not sent):
"""
    return f"{heading}\n{stubs if stubs else '(none: no tools are connected)'}"


def search_section(catalog: Catalog) -> str:
    """The catalog as an index: one line per function, and ``search_tools``/``describe``."""
    index = "\n".join(index_lines(catalog))
    return f"""\
Available functions: {len(catalog.entries)}, too many to show their stubs here, so each is \
listed by name and the first line of what it does. Call them like the others: async, \
keyword arguments only (required ones first), `await` them; an optional argument left \
out or passed as None is not sent. Before calling one, read its arguments and result \
shape with describe(); find the ones you need with search_tools(). These two are helpers \
answered at once: call them WITHOUT await, and print() or return what they give.
- {SEARCH_TOOLS}(query, limit={SEARCH_LIMIT}): the functions that best match the words of \
query, best first, as "name: summary" strings (a word in the name counts most, then in an \
argument name, then in the description): {SEARCH_TOOLS}("list pods").
- {DESCRIBE}(name): the full stub of one function (a str): arguments with types and \
descriptions, the return type and the `Returns:` shape: print({DESCRIBE}("get_pod")).
Plan: one snippet that searches and describes, then one that calls and filters.

{index}"""


def run_code_definition(catalog: Catalog, limits: CodeModeLimits | None = None) -> ToolDefinition:
    """The ``run_code`` tool definition."""
    return ToolDefinition(
        name=RUN_CODE,
        description=run_code_description(catalog, limits),
        input_schema=copy.deepcopy(RUN_CODE_SCHEMA),
        output_schema=None,
    )
