"""Values across the sandbox boundary (spec 0004, Value conversion), without I/O.

Into the sandbox, a nested tool result becomes a Python value (the
nested-result table); out of it, arguments and snippet results become JSON
values:

| Python (from the sandbox)            | JSON                         |
|--------------------------------------|------------------------------|
| ``None``, ``bool``, ``int``, ``str`` | the same                     |
| finite ``float``                     | number                       |
| ``nan``, ``inf``, ``-inf``           | string (``repr``)            |
| ``list``, ``tuple``, ``set``, ``frozenset`` | array                 |
| ``dict``                             | object; non-``str`` keys via ``repr`` |
| anything else                        | its ``repr()`` string        |
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from daemon.logging import log_content as logging_content
from daemon.tools import ToolCallOutput

__all__ = [
    "dumps_compact",
    "log_content",
    "nested_value",
    "result_bytes",
    "to_json_value",
]


def to_json_value(value: Any) -> Any:
    """``value`` as plain JSON data (dict, list, str, int, float, bool, None)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)  # int subclasses (sandbox enums, flags) become plain ints
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_json_value(v) for v in value]
        try:
            # sets have no order; sorting keeps results stable between runs
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else repr(k)): to_json_value(v) for k, v in value.items()}
    return repr(value)


def dumps_compact(value: Any) -> str:
    """Compact JSON of ``value`` after :func:`to_json_value`."""
    return json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"))


# A lone surrogate, raw or as a JSON escape (a backslash before it only costs a walk).
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate replaced by U+FFFD (the sandbox takes UTF-8 only)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def nested_value(output: ToolCallOutput) -> Any:
    """The Python value a successful nested call returns into the sandbox.

    JSON text arrives parsed; without text, ``structured`` content arrives
    as it is; any other text arrives as ``str``. (``is_error`` outputs never
    get here: they raise ``RuntimeError`` in the sandbox.) A lone surrogate,
    which ``json.loads`` lets through, arrives as U+FFFD.
    """
    text = output.content
    if not text and output.structured is not None:
        value = to_json_value(output.structured)
        return _without_surrogates(value)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or nested past the recursion limit)
        value = text
    if _MAYBE_SURROGATE.search(text) is None:
        return value  # the common case: no walk over a large result
    return _without_surrogates(value)


def result_bytes(output: ToolCallOutput) -> int:
    """How many bytes a nested result brought into the sandbox (audit ``bytes``)."""
    # surrogatepass: counting must not fail on a lone surrogate
    if not output.content and output.structured is not None:
        return len(dumps_compact(output.structured).encode("utf-8", "surrogatepass"))
    return len(output.content.encode("utf-8", "surrogatepass"))


def log_content(output: ToolCallOutput) -> Any:
    """A tool result for the log: decoded JSON when possible, else truncated text."""
    text = output.content
    if not text and output.structured is not None:
        text = dumps_compact(output.structured)
    return logging_content(text)
