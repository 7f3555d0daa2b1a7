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

A lone surrogate in a string becomes U+FFFD both ways (the sandbox takes
UTF-8 only, and so does every transport after it). Two values cannot cross
and raise :class:`ConversionError` (a ``ValueError``) with what to do
instead: one nested deeper than :data:`MAX_DEPTH` levels, and an ``int`` too
long to write as text. Callers turn it into an error the model reads: a
catchable ``RuntimeError`` at a nested call, an error result for a snippet's
value. Nothing here raises anything else.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable
from typing import Any

from daemon.logging import log_content as logging_content
from daemon.tools import ToolCallOutput

__all__ = [
    "MAX_DEPTH",
    "ConversionError",
    "dumps_compact",
    "log_content",
    "looks_python_literal",
    "nested_value",
    "python_literal",
    "result_bytes",
    "sandbox_text",
    "to_json_value",
    "too_deep_message",
]

# Levels of nesting that cross the boundary: as many as the sandbox's own
# json.loads takes (notes/monty.md §1), and few enough that the recursive
# conversions here and in pydantic-monty stay far from Python's recursion limit.
MAX_DEPTH = 200
# Ints longer than this many bits may be past CPython's int-to-text limit (4,300 digits).
_LONG_INT_BITS = 14_000


class ConversionError(ValueError):
    """A value that cannot cross the sandbox boundary; the message says why and what to do."""


def too_deep_message() -> str:
    """Why a value nested past :data:`MAX_DEPTH` cannot cross, and what to do instead."""
    return (
        f"the value is nested more than {MAX_DEPTH} levels deep; return a flatter "
        "value (a few fields, a count, or to_json(x)[:1000])"
    )


def _too_deep() -> ConversionError:
    return ConversionError(too_deep_message())


def _checked_int(value: int) -> int:
    plain = int(value)  # int subclasses (sandbox enums, flags) become plain ints
    if plain.bit_length() > _LONG_INT_BITS:
        try:
            str(plain)
        except ValueError:
            raise ConversionError(
                f"the value holds an int of about {int(plain.bit_length() * 0.30103):,} "
                "digits, too long to write as text; return len(str(n)) or str(n)[:100]"
            ) from None
    return plain


def _safe_repr(value: Any) -> str:
    try:
        return sandbox_text(repr(value))
    except RecursionError:
        raise _too_deep() from None
    except Exception as exc:
        # a repr that fails must not fail the conversion: say what it was
        return f"<{type(value).__name__} object: repr() raised {type(exc).__name__}>"


# A lone surrogate, raw or as a JSON escape (a backslash before it only costs a walk).
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def sandbox_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: valid UTF-8 for the sandbox."""
    return _SURROGATE.sub("\ufffd", text)


def to_json_value(value: Any) -> Any:
    """``value`` as plain JSON data (dict, list, str, int, float, bool, None).

    Raises :class:`ConversionError` for a value nested past :data:`MAX_DEPTH`
    or an ``int`` too long to write as text.
    """
    if type(value) is dict and _flat(value):
        return dict(value)  # the common tool arguments: a third of the walk's time
    return _to_json(value, 0)


def _flat(value: dict) -> bool:
    """Whether ``value`` is one level of what :func:`_to_json` keeps as it is: ASCII
    ``str`` keys and values (no surrogate to replace), plain ints short enough to
    write, finite floats, bools and None."""
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return False
        elif kind is int:
            if item.bit_length() > _LONG_INT_BITS:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


def _to_json(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return sandbox_text(value)
    if isinstance(value, int):
        return _checked_int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= MAX_DEPTH:
        if isinstance(value, list | tuple | set | frozenset | dict):
            raise _too_deep()
        return _safe_repr(value)
    if isinstance(value, list | tuple):
        return [_to_json(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [_to_json(v, depth + 1) for v in value]
        try:
            # sets have no order; sorting keeps results stable between runs
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        return {
            (sandbox_text(k) if isinstance(k, str) else _safe_repr(k)): _to_json(v, depth + 1)
            for k, v in value.items()
        }
    return _safe_repr(value)


def dumps_compact(value: Any) -> str:
    """Compact JSON of ``value`` after :func:`to_json_value` (which may raise ConversionError)."""
    return json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest in ``value`` more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, list | dict))
    return False


def _without_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate replaced by U+FFFD (the sandbox takes UTF-8 only)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


# json.loads is three Python frames and two regex matches around the C scanner, a
# tenth of our host Python per small nested call. On text with no JSON whitespace
# at either end, the scanner alone, when it reads all of it, gives what json.loads
# gives; anything else (whitespace, extra data, not JSON, a BOM) goes to json.loads.
# (A decoder sets its scanner in __init__; typeshed's stub does not show it.)
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_JSON_SPACE = frozenset(" \t\n\r")


def _loads(text: str) -> Any:
    if text and text[0] not in _JSON_SPACE and text[-1] not in _JSON_SPACE:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def nested_value(output: ToolCallOutput) -> Any:
    """The Python value a successful nested call returns into the sandbox.

    JSON text arrives parsed; without text, ``structured`` content arrives
    as it is; a list, dict or tuple written in Python literal syntax (what
    ``str()`` of rows gives) arrives as that value (:func:`python_literal`); any
    other text arrives as ``str``. (``is_error`` outputs never
    get here: they raise ``RuntimeError`` in the sandbox.) A lone surrogate,
    which ``json.loads`` lets through, arrives as U+FFFD. A value nested past
    :data:`MAX_DEPTH` raises :class:`ConversionError`.
    """
    text = output.content
    if not text and output.structured is not None:
        return to_json_value(output.structured)
    try:
        value = _loads(text)
    except RecursionError:
        raise _too_deep() from None
    except ValueError:  # not JSON
        value = python_literal(text)
    # counting brackets is fast C; only a value that may be deep is walked
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise _too_deep()
    if (text.isascii() and "\\u" not in text) or _MAYBE_SURROGATE.search(text) is None:
        return value  # the common case: no walk over a large result
    return _without_surrogates(value)


# Python servers that return ``str(rows)`` (the reference mcp-server-sqlite) send a
# list of dicts written as Python, not JSON: ``[{'id': 1, 'name': None}]``. Read
# as text, a small model indexes a str it took for data. ``ast.literal_eval``
# builds only literals (no names, calls or attributes), so reading it is safe;
# it is tried on a container's text only, up to this size (its parse is about
# ten times json's).
PYTHON_LITERAL_MAX = 1 << 20


def looks_python_literal(text: str) -> bool:
    """Whether ``text`` (a container's opening) may be Python literal syntax rather
    than JSON: its first string is quoted with ``'``, or its first 256 characters hold
    ``None``, ``True``, ``False`` or a tuple after a bracket, comma or colon. Cheap
    (it reads the head only) and may be wrong in JSON's favour: it decides only
    where a large result is parsed (``daemon.code_mode.lazy``), not how."""
    if text.lstrip()[:1] not in _OPENERS:
        return False
    head = text[:256]
    single, double = head.find("'"), head.find('"')
    if single != -1 and (double == -1 or single < double):
        return True
    return _PYTHON_ATOM.search(head) is not None


_OPENERS = ("[", "{", "(")
_PYTHON_ATOM = re.compile(r"^\s*\(|[\[(,:]\s*(?:None|True|False|\()")


def python_literal(text: str) -> Any:
    """``text`` as the list, dict or tuple it writes in Python literal syntax (a
    tuple as a list), or ``text`` itself when it is anything else."""
    if len(text) > PYTHON_LITERAL_MAX or text.lstrip()[:1] not in _OPENERS:
        return text
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    if not isinstance(value, list | dict | tuple):
        return text
    try:
        return to_json_value(value)
    except ConversionError:  # too deep, or an int too long to write: the text as it came
        return text


def result_bytes(output: ToolCallOutput) -> int:
    """How many bytes a nested result brought into the sandbox (audit ``bytes``)."""
    # surrogatepass: counting must not fail on a lone surrogate
    if not output.content and output.structured is not None:
        try:
            return len(dumps_compact(output.structured).encode("utf-8", "surrogatepass"))
        except ConversionError:
            return 0  # nothing came in: the call raises in the sandbox instead
    text = output.content
    if text.isascii():  # a flag on the str: no pass over a large result
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def log_content(output: ToolCallOutput) -> Any:
    """A tool result for the log: decoded JSON when possible, else truncated text.

    A result too deep to decode or to encode again is logged as truncated text.
    """
    text = output.content
    try:
        if not text and output.structured is not None:
            text = dumps_compact(output.structured)
        logged = logging_content(text)
    except (RecursionError, ConversionError):
        return _log_text(text)
    if isinstance(logged, list | dict) and _deeper_than(logged, MAX_DEPTH):
        return _log_text(text)
    return logged


# A result that cannot be logged as JSON is logged as its start, as text.
_LOG_TEXT = 2000


def _log_text(text: str) -> str:
    return text if len(text) <= _LOG_TEXT else f"{text[:_LOG_TEXT]}…[{len(text)} chars]"
