"""``Hint:`` lines for known Monty gaps found in an error text (spec A11).

Monty is a subset of Python (notes/monty.md §9). When a snippet trips over a
gap, the traceback alone sends a small model guessing; one line naming the
gap and the way around it fixes the next try. Each rule matches the
exception line Monty 1.4 produces (verified against a real worker in
``tests/test_hints.py``); source lines quoted in a traceback are indented and
never matched, so a snippet that merely *mentions* ``default=`` gets no hint.

``hints_for(text)`` returns the hint texts (without the ``Hint:`` prefix),
at most one per rule, in rule order, capped at :data:`MAX_HINTS`;
``with_hints(text)`` appends them as ``Hint: ...`` lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_HINTS", "MISSING_MODULE_ADVICE", "SANDBOX_MODULES", "hints_for", "with_hints"]

MAX_HINTS = 3

# What to use instead of a module Monty does not have.
MISSING_MODULE_ADVICE: dict[str, str] = {
    "statistics": "compute it directly: sum(xs) / len(xs), sorted(xs)[len(xs) // 2]",
    "heapq": "use sorted(xs)[:n] or sorted(xs, reverse=True)[:n]",
    "operator": "use a lambda, e.g. key=lambda d: d['name']",
    "enum": "use plain string or int constants",
    "string": "write the characters out, e.g. 'abcdefghijklmnopqrstuvwxyz'",
    "textwrap": "slice or split the string yourself",
    "uuid": "ids come from the tools; there is no uuid generation",
    "io": "build strings with ''.join(parts)",
    "contextlib": "use try/finally",
    "fractions": "use float or decimal",
    "zoneinfo": "use datetime.timezone(datetime.timedelta(hours=N))",
}

#: The standard modules a snippet can import in Monty 1.4, in the order hints name them.
SANDBOX_MODULES: tuple[str, ...] = (
    *("asyncio", "json", "re", "math", "datetime", "collections", "itertools", "functools"),
    *("dataclasses", "typing", "time", "random", "copy", "base64", "hashlib", "decimal"),
    *("csv", "bisect"),
)

_AVAILABLE = ", ".join(SANDBOX_MODULES)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    hint: Callable[[re.Match[str]], str]


def _fixed(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _m: text


def _missing_module(m: re.Match[str]) -> str:
    name = m.group(1).split(".")[0]
    advice = MISSING_MODULE_ADVICE.get(name)
    tail = f"; {advice}" if advice else ""
    return (
        f"the sandbox has no module '{name}' (no third-party packages, only part of the "
        f"stdlib: {_AVAILABLE}){tail}."
    )


_RULES: tuple[_Rule, ...] = (
    _Rule(
        re.compile(r"unexpected keyword argument 'default'"),
        _fixed(
            "Monty's json.dumps has no default=; use to_json(x) (str() for unknown types), "
            "or convert the values first."
        ),
    ),
    _Rule(
        re.compile(r"unhashable type"),
        _fixed(
            "lists, dicts and sets cannot be dict keys or set members; "
            "use a tuple (tuple(x)) or a string (to_json(x)) as the key."
        ),
    ),
    _Rule(
        re.compile(r"Object of type (\w+) is not JSON serializable"),
        lambda m: (
            f"json.dumps cannot encode a {m.group(1)}; use to_json(x), which turns sets into "
            "lists and other values into str()."
        ),
    ),
    _Rule(
        re.compile(r"does not yet support class inheritance"),
        _fixed(
            "Monty has no class inheritance, so no custom exception classes; raise a built-in "
            "exception with a message (raise ValueError(f'...')) and use plain classes or dicts."
        ),
    ),
    _Rule(
        re.compile(r"does not yet support method decorators"),
        _fixed(
            "@property, @staticmethod and @classmethod are not supported; use plain methods "
            "or module-level functions."
        ),
    ),
    _Rule(
        re.compile(r"does not yet support yield"),
        _fixed("generators (yield) are not supported; build and return a list instead."),
    ),
    _Rule(
        re.compile(r"does not yet support the 'del' statement"),
        _fixed(
            "del is not supported; rebind instead (x = None), or build a new dict without the "
            "key: {k: v for k, v in d.items() if k != key}."
        ),
    ),
    _Rule(
        re.compile(r"does not yet support async (context managers|for loops)"),
        _fixed(
            "async with / async for are not supported; await each call directly, or gather them."
        ),
    ),
    _Rule(
        re.compile(r"does not yet support exception groups"),
        _fixed("except* is not supported; use a plain except."),
    ),
    _Rule(
        re.compile(r"does not yet support type aliases"),
        _fixed("'type X = ...' is not supported; assign the annotation to a name (X = int)."),
    ),
    _Rule(
        re.compile(r"No module named '([\w.]+)'"),
        _missing_module,
    ),
    _Rule(
        re.compile(r"cannot import name 'OrderedDict'"),
        _fixed("dicts keep insertion order; use dict instead of OrderedDict."),
    ),
    _Rule(
        re.compile(r"cannot import name 'asdict'"),
        _fixed("dataclasses.asdict is not available; build the dict yourself ({'x': p.x})."),
    ),
    _Rule(
        re.compile(r"cannot import name 'TypedDict'"),
        _fixed("typing.TypedDict is not available; annotate with dict[str, Any] or drop it."),
    ),
    _Rule(
        re.compile(
            r"module 'asyncio' has no attribute '(create_task|ensure_future|wait_for|wait|"
            r"TaskGroup|Semaphore|Queue|Lock|Event|as_completed|timeout)'"
        ),
        lambda m: (
            f"asyncio.{m.group(1)} is not available; the sandbox has asyncio.gather, "
            "asyncio.sleep and asyncio.run: await calls directly or "
            "await asyncio.gather(f(a=1), f(a=2))."
        ),
    ),
    _Rule(
        re.compile(r"gather\(\) does not yet support keyword arguments"),
        _fixed(
            "asyncio.gather takes no keyword arguments (no return_exceptions=); to keep going "
            "past failures, wrap each call in an async def with try/except and gather those."
        ),
    ),
    _Rule(
        re.compile(r"exceptions can only be called with zero or one string argument"),
        _fixed("exceptions take at most one string argument here: raise ValueError(f'bad {x}')."),
    ),
    _Rule(
        re.compile(r"'str' object has no attribute 'format_map'"),
        _fixed("str.format_map is not available; use s.format(**d)."),
    ),
    _Rule(
        re.compile(r"has no attribute 'maketrans'"),
        _fixed("str.maketrans is not available; chain s.replace(a, b) calls instead."),
    ),
    _Rule(
        re.compile(r"'function' object has no attribute '__name__'"),
        _fixed("functions have no __name__ here; keep the names in a dict of name -> function."),
    ),
    _Rule(
        re.compile(r"cannot convert '\w+' object to bytes"),
        _fixed("bytes(list) is not supported; build a str and call .encode()."),
    ),
    _Rule(
        re.compile(
            r"NameError: name '(globals|locals|vars|dir|super|input|__import__|compile|callable|"
            r"issubclass|breakpoint|bytearray|memoryview)' is not defined"
        ),
        lambda m: f"the sandbox has no {m.group(1)}() builtin.",
    ),
)


def _exception_lines(text: str) -> list[str]:
    """Lines that can carry an exception message: not the indented source or frame lines."""
    return [ln for ln in text.splitlines() if ln and not ln[0].isspace()]


def hints_for(text: str) -> list[str]:
    """The hints for the Monty gaps ``text`` (a traceback or error message) shows."""
    lines = _exception_lines(text)
    found: list[str] = []
    for rule in _RULES:
        for line in lines:
            m = rule.pattern.search(line)
            if m:
                hint = rule.hint(m)
                if hint not in found:
                    found.append(hint)
                break
        if len(found) >= MAX_HINTS:
            break
    return found


def with_hints(text: str) -> str:
    """``text`` with a ``Hint: ...`` line appended for each known gap it shows."""
    hints = hints_for(text)
    if not hints:
        return text
    return "\n".join([text.rstrip("\n"), *(f"Hint: {h}" for h in hints)])
