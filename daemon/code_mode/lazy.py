"""Large JSON tool results cross into the sandbox as text, parsed there (issue 17).

A nested result arrives in the sandbox as a Python value (the nested-result
table in :mod:`daemon.code_mode.sandbox.nested`). Built on the host, a parsed
megabyte of JSON costs Monty about five times what the same text costs it to
send and ``json.loads`` inside (``bench/code_mode.py``; measured on 1.4:
0.9 MB, 128 ms as objects, 25 ms as text; 8 KB, 1.2 ms against 0.7 ms; at a
few hundred bytes the two are even). So a result of at least
:data:`TEXT_MIN` characters goes in as text, and the sandbox parses it.

That needs sandbox code between the call and the snippet: every new scope
defines, after the helpers, one wrapper per catalog tool
(:func:`wrappers_source`)::

    async def get_rows(*args, **kwargs):
        value = await _asyncai_tool_get_rows(*args, **kwargs)
        if type(value) is not tuple:
            return value
        return _asyncai_text(value)

The host function ``_asyncai_tool_get_rows`` is the tool as before (the
engine maps the name back). When the host answered with the marker
``(text, too_deep_message)``, ``_asyncai_text`` returns ``json.loads(text)``.
Anything else passes through unchanged, so a scope without wrappers (stored
before them, or a tool added since) simply gets parsed values.

Such a wrapper makes the call only when it is awaited, and awaits it where
it makes it: Monty's own host-call path (:mod:`~daemon.code_mode.sandbox.direct`)
takes that in one round trip, at about the cost of an unwrapped call (a
call made in one sandbox frame and awaited in another costs ~20 µs more;
``bench/code_mode.py``). The snapshot path needs the call made where the
snippet makes it, so that a call never awaited is named in the error
(spec A11). So the first snippet that leaves the direct path
(:meth:`ScopeState.leave_direct <daemon.code_mode.repl.scope.ScopeState.leave_direct>`)
first turns the scope's wrappers into (:func:`snapshot_wrappers_source`)::

    def get_rows(*args, **kwargs):
        return _asyncai_result(_asyncai_tool_get_rows(*args, **kwargs))

whose call is made when the snippet calls it and runs when it awaits it;
``_asyncai_result`` awaits it and reads the marker as above. Only a name
still bound to its first wrapper (:data:`WRAPPERS`, by identity) is
redefined: a function the snippets defined under a tool's name stays.

The snippet sees the same values either way. The host sends text only when
the sandbox's ``json.loads`` gives what the host's would (:func:`text_marker`):
the text starts like a JSON array or object, holds no lone surrogate (which
the host replaces with U+FFFD) and no ``NaN``/``Infinity``. Text that does
not parse arrives as the ``str`` itself, as before. The sandbox's parser
stops at the same depth as :data:`~daemon.code_mode.convert.MAX_DEPTH`;
the wrapper then raises the host path's ``RuntimeError``, but the audit
records that call as ``ok`` (the host never parsed it).
"""

from __future__ import annotations

import builtins
import functools
import re
from collections.abc import Iterable

from daemon.code_mode.bindings import module_bindings
from daemon.code_mode.convert import looks_python_literal, too_deep_message
from daemon.code_mode.helpers import PRELOADED_MODULES, PRIVATE_PREFIX, RESERVED_NAMES
from daemon.tools import ToolCallOutput

__all__ = [
    "DIRECT_MARKER",
    "RESULT_SOURCE",
    "TEXT_MIN",
    "TOOL_PREFIX",
    "UNMARK_SOURCE",
    "WRAPPERS",
    "public_name",
    "scope_source",
    "snapshot_wrappers_lookup",
    "snapshot_wrappers_source",
    "text_marker",
    "without_wrapper_frames",
    "wrappers_source",
]

# True in every new scope; set False when a snippet was not eligible for the direct path
# (daemon/code_mode/sandbox/direct.py), with the wrappers' change, or else before a dump, so a
# loaded REPL says which it was (Monty has no `del`).
DIRECT_MARKER = "_asyncai_direct"
UNMARK_SOURCE = f"{DIRECT_MARKER} = False"
# Results at least this long go in as text: above about 1 KB parsing inside wins.
TEXT_MIN = 4096
TOOL_PREFIX = "_asyncai_tool_"

# A dict of every wrapper a new scope defined, by name: a name still bound to its own
# is turned into the snapshot path's (snapshot_wrappers_source).
WRAPPERS = "_asyncai_wrappers"

RESULT_SOURCE = """\
def _asyncai_text(value):
    try:
        return _asyncai_json.loads(value[0])
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise RuntimeError(value[1])
        return value[0]


async def _asyncai_result(call):
    value = await call
    if type(value) is not tuple:
        return value
    return _asyncai_text(value)
"""


# A tool with one of these names was never reachable by it (the helper, module or
# builtin comes first); a wrapper would hide that instead, so such a tool gets none.
_UNWRAPPED = frozenset({*RESERVED_NAMES, *PRELOADED_MODULES, *dir(builtins)})


def _wrapped(py_names: Iterable[str]) -> list[str]:
    return [n for n in py_names if n not in _UNWRAPPED and not n.startswith(PRIVATE_PREFIX)]


def wrappers_source(py_names: Iterable[str]) -> str:
    """The sandbox source of the result readers and one (direct path) wrapper per tool name."""
    names = _wrapped(py_names)
    parts = [RESULT_SOURCE]
    for name in names:
        parts.append(
            f"async def {name}(*args, **kwargs):\n"
            f"    value = await {TOOL_PREFIX}{name}(*args, **kwargs)\n"
            "    if type(value) is not tuple:\n"
            "        return value\n"
            "    return _asyncai_text(value)\n"
        )
    parts.append(f"{WRAPPERS} = {{{', '.join(f'{n!r}: {n}' for n in names)}}}\n")
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=8)
def snapshot_wrappers_source(py_names: tuple[str, ...]) -> str:
    """The sandbox source that leaves the direct path: the snapshot path's wrapper for every
    name still bound to its direct one, then :data:`DIRECT_MARKER` False.

    Fed with :func:`snapshot_wrappers_lookup`, so a name the REPL does not bind
    (a tool added since, a REPL stored before the wrappers) is left alone.
    """
    parts = []
    for name in _wrapped(py_names):
        parts.append(
            f"if {WRAPPERS}.get({name!r}) is {name}:\n"
            f"    def {name}(*args, **kwargs):\n"
            f"        return _asyncai_result({TOOL_PREFIX}{name}(*args, **kwargs))\n"
        )
    parts.append(UNMARK_SOURCE)
    return "\n".join(parts)


def snapshot_wrappers_lookup(py_names: tuple[str, ...]) -> dict[str, object]:
    """The ``external_lookup`` of :func:`snapshot_wrappers_source`: names the REPL lacks."""
    return {WRAPPERS: {}, **dict.fromkeys(_wrapped(py_names), False)}


@functools.lru_cache(maxsize=8)
def scope_source(preamble: str, tools: tuple[str, ...]) -> str:
    """``preamble`` (the helpers and the operator's code), the wrappers of ``tools``, the marker.

    A tool whose name the preamble binds keeps the preamble's meaning (as
    before wrappers: a bound name never reached the tool), so it gets none.
    Cached: the same for every scope of an executor.
    """
    bound = {b.name for b in module_bindings(preamble)}
    wrapped = [t for t in tools if t not in bound]
    source = f"{preamble}\n{wrappers_source(wrapped)}" if wrapped else preamble
    return f"{source}\n{DIRECT_MARKER} = True\n"


# A traceback frame in a wrapper or a result reader (its line, its source line, and the
# marker line under it when there is one): internals the snippet never wrote.
_WRAPPER_FRAME = re.compile(
    r'  File "[^"\n]*", line \d+, in (?:_asyncai_result|_asyncai_text|'
    r"\w+(?=\n    (?:return _asyncai_(?:result|text)\(|value = await _asyncai_tool_)))\n"
    r"    [^\n]*\n(?:[ ~^]*[~^][ ~^]*\n)?"
)


def without_wrapper_frames(traceback: str) -> str:
    """``traceback`` without the frames of the wrappers, as if the snippet called the tool."""
    if "_asyncai_" not in traceback:
        return traceback
    return _WRAPPER_FRAME.sub("", traceback)


def public_name(name: str) -> tuple[str, bool]:
    """The tool's Python name for a host-function name, and whether a wrapper called it."""
    if name.startswith(TOOL_PREFIX):
        return name[len(TOOL_PREFIX) :], True
    return name, False


def text_marker(output: ToolCallOutput, tool: str) -> tuple[str, str] | None:
    """The ``(text, too_deep_message)`` to send instead of the parsed result, or None.

    None: the result is short, or its text might parse differently in the
    sandbox; the host parses it (:func:`daemon.code_mode.convert.nested_value`).
    """
    text = output.content
    if len(text) < TEXT_MIN or text.lstrip()[:1] not in ("[", "{"):
        return None
    if looks_python_literal(text):
        return None  # Python literal syntax, not JSON: the host reads it (nested_value)
    if "NaN" in text or "Infinity" in text or "\\ud" in text or "\\uD" in text:
        return None  # possibly a JSON constant or an escaped surrogate: let the host decide
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a raw lone surrogate
    deep = f"tool {tool} returned a value the sandbox cannot take: {too_deep_message()}"
    return text, deep
