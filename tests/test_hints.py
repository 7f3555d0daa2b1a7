"""Hint: lines for known Monty gaps, each checked against what a real Monty worker prints."""

from __future__ import annotations

import pytest
from pydantic_monty import AsyncMonty, MontyRuntimeError, MontySyntaxError

from daemon.code_mode.sandbox import hints as hints_module
from daemon.code_mode.sandbox.hints import MAX_HINTS, SANDBOX_MODULES, hints_for, with_hints

# (snippet that trips a gap in Monty 1.4, a phrase its hint must contain)
GAPS: list[tuple[str, str]] = [
    ('json.dumps({"a": 1}, default=str)', "use to_json(x)"),
    ("{[1]: 2}", "cannot be dict keys or set members"),
    ('d = {}\nd[{"a": 1}] = 1', "cannot be dict keys or set members"),
    ("s = set()\ns.add([1])", "cannot be dict keys or set members"),
    ("json.dumps({1, 2})", "json.dumps cannot encode a set"),
    ("class A:\n    pass\nclass B(A):\n    pass", "no class inheritance"),
    ("class MyError(Exception):\n    pass", "no custom exception classes"),
    ("class A:\n    @property\n    def x(self):\n        return 1", "@property"),
    ("def g():\n    yield 1", "generators (yield) are not supported"),
    ("x = 1\ndel x", "del is not supported"),
    ("async def f():\n    async with x:\n        pass", "async with / async for"),
    ("async def f():\n    async for i in x:\n        pass", "async with / async for"),
    ("try:\n    pass\nexcept* ValueError:\n    pass", "except* is not supported"),
    ("type X = int", "'type X = ...' is not supported"),
    ("import statistics", "no module 'statistics'"),
    ("import heapq", "sorted(xs)[:n]"),
    ("from collections import OrderedDict", "dicts keep insertion order"),
    ("from dataclasses import asdict", "dataclasses.asdict is not available"),
    ("from typing import TypedDict", "typing.TypedDict is not available"),
    ("asyncio.create_task(None)", "asyncio.create_task is not available"),
    (
        "async def f():\n    return 1\nawait asyncio.gather(f(), return_exceptions=True)",
        "no return_exceptions=",
    ),
    ('ValueError("bad", 1)', "at most one string argument"),
    ('"{a}".format_map({"a": 1})', "s.format(**d)"),
    ('"abc".maketrans("a", "b")', "str.maketrans is not available"),
    ("def f():\n    pass\nf.__name__", "functions have no __name__"),
    ("bytes([65, 66])", "bytes(list) is not supported"),
    ("globals()", "no globals() builtin"),
    ("super()", "no super() builtin"),
]


async def monty_error(monty_pool: AsyncMonty, code: str) -> str:
    """The full traceback Monty prints for ``code`` (with asyncio and json imported)."""
    async with monty_pool.checkout() as session:
        await session.feed_run("import asyncio\nimport json")
        with pytest.raises((MontyRuntimeError, MontySyntaxError)) as info:
            await session.feed_run(code)
        return info.value.display()


@pytest.mark.parametrize(("code", "phrase"), GAPS)
async def test_hint_for_real_monty_error(monty_pool: AsyncMonty, code: str, phrase: str) -> None:
    """The traceback a real worker prints for each gap yields exactly one matching hint."""
    text = await monty_error(monty_pool, code)
    found = hints_for(text)
    assert len(found) == 1, (text, found)
    assert phrase in found[0]


async def test_every_rule_is_exercised(monty_pool: AsyncMonty) -> None:
    """Every hint rule matches the real Monty error of at least one case above."""
    texts = [await monty_error(monty_pool, code) for code, _ in GAPS]
    for rule in hints_module._RULES:
        assert any(rule.pattern.search(t) for t in texts), rule.pattern.pattern


async def test_no_hint_for_ordinary_errors(monty_pool: AsyncMonty) -> None:
    """Errors CPython would raise too, without a Monty gap, get no hint."""
    for code in ['{"a": 1}["b"]', "1 / 0", "undefined_name", "int('x')", "[1][5]"]:
        assert hints_for(await monty_error(monty_pool, code)) == []


async def test_source_lines_do_not_trigger(monty_pool: AsyncMonty) -> None:
    """A quoted source line that mentions a gap does not trigger its hint; only the error does."""
    text = await monty_error(monty_pool, 'x = "unhashable type default=" + 1')
    assert "unhashable type default=" in text
    assert hints_for(text) == []


def test_missing_module_generic_advice() -> None:
    """A module without specific advice still gets the list of what is importable."""
    (hint,) = hints_for("ModuleNotFoundError: No module named 'requests'")
    assert hint.startswith("the sandbox has no module 'requests' (no third-party packages")
    assert "asyncio, json, re, math" in hint


def test_dotted_module_name() -> None:
    """`import urllib.parse` names the top-level package."""
    (hint,) = hints_for("ModuleNotFoundError: No module named 'urllib.parse'")
    assert "no module 'urllib'" in hint


def test_with_hints_appends_lines() -> None:
    """with_hints appends one `Hint: ...` line per gap and leaves other text alone."""
    text = (
        "Traceback (most recent call last):\n  ...\n"
        "TypeError: cannot use 'list' as a dict key (unhashable type: 'list')\n"
    )
    out = with_hints(text)
    assert out.startswith(text.rstrip("\n") + "\nHint: lists, dicts and sets cannot be dict keys")
    assert out.count("\nHint: ") == 1
    assert (
        with_hints("ZeroDivisionError: division by zero") == "ZeroDivisionError: division by zero"
    )


def test_hints_deduplicated_and_capped() -> None:
    """The same gap twice gives one hint; many gaps give at most MAX_HINTS."""
    twice = "TypeError: x (unhashable type: 'list')\nTypeError: y (unhashable type: 'dict')"
    assert len(hints_for(twice)) == 1
    many = "\n".join(
        [
            "TypeError: JSONEncoder.__init__() got an unexpected keyword argument 'default'",
            "TypeError: cannot use 'list' as a dict key (unhashable type: 'list')",
            "NotImplementedError: The monty syntax parser does not yet support yield expressions",
            "NotImplementedError: The monty syntax parser does not yet support the 'del' statement",
        ]
    )
    assert len(hints_for(many)) == MAX_HINTS


async def test_sandbox_modules_import_in_real_monty(monty_pool: AsyncMonty) -> None:
    """Every module SANDBOX_MODULES names (the hints' list, the harness's dead-imports
    rule) imports in a real worker, and a module it leaves out does not."""
    async with monty_pool.checkout() as session:
        for name in SANDBOX_MODULES:
            await session.feed_run(f"import {name}")
        with pytest.raises(MontyRuntimeError):
            await session.feed_run("import requests")
