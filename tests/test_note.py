"""The variables note (spec A11): names from snippet text, a probe in a real Monty scope, bounds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic_monty import AsyncMonty, AsyncMontySession, MontyRuntimeError

from daemon.code_mode.helpers import prelude
from daemon.code_mode.repl.note import (
    MAX_CHARS,
    MAX_NAMES,
    NOTE_PREFIX,
    ScopeVariables,
    format_note,
    parse_probe,
    parse_probe_previews,
    probe_code,
    reset_note,
    thread_note,
)


@pytest.fixture
async def scope(monty_pool: AsyncMonty) -> AsyncIterator[AsyncMontySession]:
    """A fresh REPL scope with the helpers fed."""
    async with monty_pool.checkout() as session:
        for code in prelude():
            await session.feed_run(code)
        yield session


async def feed(scope: AsyncMontySession, tracker: ScopeVariables, code: str) -> None:
    """Do what the engine does: record the snippet, run it, probe, update."""
    tracker.record(code)
    await scope.feed_run(code)
    probe = tracker.probe()
    if probe is not None:
        tracker.update(await scope.feed_run(probe))


# In a real scope --------------------------------------------------------------------------------


async def test_probe_describes_values(scope: AsyncMontySession) -> None:
    """The probe describes each bound name: sized containers, scalars, functions, classes."""
    tracker = ScopeVariables()
    await feed(
        scope,
        tracker,
        "ss = list(range(80))\n"
        'd = {"a": 1, "b": 2, "c": 3}\n'
        "n = 5\n"
        's = "x" * 1200\n'
        "import math\n"
        "def f():\n    return 1\n"
        "class C:\n    pass\n"
        "none = None\n"
        "ok = True\n"
        "t = (1, 2)\n"
        "st = {1}\n"
        "fl = 1.5\n"
        "c = C()\n"
        "if False:\n    never = 1\n",
    )
    assert tracker.note == (
        "[run_code variables still in scope: ss: list[80], d: dict[3], n: int, s: str[1200], "
        "f: function, C: class, none: None, ok: bool, t: tuple[2], st: set[1], fl: float, c: C]"
    )
    previews = {name: preview for name, _, preview in tracker.described}
    assert previews["ss"] == "[0, 1, 2, …]"
    assert previews["d"] == "{'a': 1, 'b': 2, 'c': 3}"
    assert previews["n"] == "5"
    assert previews["s"] == repr("x" * 30) + "…"
    assert previews["t"] == "(1, 2)"
    assert (previews["none"], previews["ok"], previews["fl"]) == ("None", "True", "1.5")
    assert previews["st"] == ""
    assert previews["c"] == "C"
    # `never` was never bound, and `math` is an import: neither is listed or kept.
    assert "never" not in tracker.names
    assert "math" not in tracker.names


async def test_note_follows_the_scope(scope: AsyncMontySession) -> None:
    """Later snippets add names, a rebinding moves a name last with its new shape."""
    tracker = ScopeVariables()
    await feed(scope, tracker, "pods = [1, 2, 3]\ncount = 3")
    assert tracker.note == "[run_code variables still in scope: pods: list[3], count: int]"
    await feed(scope, tracker, 'pods = {"items": []}\nlabel = "x"')
    assert tracker.note == (
        "[run_code variables still in scope: count: int, pods: dict[1], label: str[1]]"
    )


async def test_failed_snippet_keeps_what_it_bound(scope: AsyncMontySession) -> None:
    """A snippet that fails midway still leaves its earlier bindings listed."""
    tracker = ScopeVariables()
    code = "first = [1]\nboom = 1 / 0\nlater = 2"
    tracker.record(code)
    with pytest.raises(MontyRuntimeError, match="ZeroDivisionError"):
        await scope.feed_run(code)
    probe = tracker.probe()
    assert probe is not None
    tracker.update(await scope.feed_run(probe))
    assert tracker.note == "[run_code variables still in scope: first: list[1]]"


async def test_probe_binds_nothing_the_note_lists(scope: AsyncMontySession) -> None:
    """Running the probe twice gives the same answer; it does not list itself."""
    probe = probe_code(["x"])
    await scope.feed_run("x = [1, 2]")
    first = await scope.feed_run(probe)
    assert first == await scope.feed_run(probe) == [["x", "list[2]", "[1, 2]"]]


async def test_unparsable_snippet_names_found_line_by_line(scope: AsyncMontySession) -> None:
    """A PEP 701 f-string (Monty parses it, CPython 3.11 does not) still yields its names."""
    tracker = ScopeVariables()
    await feed(scope, tracker, 'd = {"x": 1}\nlabel = f"{d["x"]}"')
    assert tracker.note == "[run_code variables still in scope: d: dict[1], label: str[1]]"


# Reset and eviction -------------------------------------------------------------------------------


def test_reset_texts() -> None:
    """Evicted and reset scopes say the REPL is empty and earlier variables are gone."""
    for reason in ("evicted", "reset"):
        text = reset_note(reason)
        assert text.startswith("[run_code REPL is empty: ")
        assert "variables of earlier run_code calls are gone" in text
        assert text.endswith("]")
        assert len(text) <= MAX_CHARS
    assert "dropped while idle" in reset_note("evicted")
    assert "restart, crash or limit" in reset_note("reset")


async def test_note_after_reset_then_new_snippet(scope: AsyncMontySession) -> None:
    """After a reset the note says so, until a snippet in the new scope binds something."""
    tracker = ScopeVariables()
    await feed(scope, tracker, "old = [1]")
    assert thread_note(tracker, None) == "[run_code variables still in scope: old: list[1]]"
    tracker.clear()  # what the engine does when it discards the checkout
    assert tracker.names == []
    assert thread_note(tracker, "reset") == reset_note("reset")
    await feed(scope, tracker, "print(1)")  # binds nothing: still empty
    assert thread_note(tracker, "reset") == reset_note("reset")
    await feed(scope, tracker, "fresh = {}")
    assert thread_note(tracker, "reset") == "[run_code variables still in scope: fresh: dict[0]]"


def test_thread_note_reasons() -> None:
    """Eviction, restart and reset say the REPL is empty; no reason, or closed, says nothing."""
    empty = ScopeVariables()
    assert thread_note(None, "evicted") == reset_note("evicted")
    assert thread_note(empty, "evicted") == reset_note("evicted")
    assert thread_note(empty, "restart") == reset_note("reset")
    assert thread_note(empty, "reset") == reset_note("reset")
    assert thread_note(empty, "closed") is None
    assert thread_note(empty, None) is None
    assert thread_note(None, None) is None


def test_fresh_scope_has_no_note() -> None:
    """A scope that never bound anything and was never reset says nothing."""
    tracker = ScopeVariables()
    assert tracker.note is None
    assert tracker.probe() is None


# Pure parts -------------------------------------------------------------------------------------


def test_record_skips_imports_helpers_and_private_names() -> None:
    """Imports, helper names and _asyncai_ names are never tracked; order is binding order."""
    tracker = ScopeVariables()
    tracker.record("import json\nfrom x import y as z\na = 1\n_asyncai_q = 2\nb = items(a)")
    tracker.record("c = 1\na = 2")
    assert tracker.names == ["b", "c", "a"]


def test_format_bounds_names() -> None:
    """At most 30 names, the most recent kept, older ones counted."""
    described = [(f"v{i}", "int") for i in range(45)]
    note = format_note(described)
    assert note is not None
    assert note.startswith(NOTE_PREFIX + "(+15 older) v15: int, ")
    assert note.endswith("v44: int]")
    assert note.count(": int") == MAX_NAMES


def test_format_bounds_chars() -> None:
    """At most 600 characters in all, dropping the oldest names first."""
    described = [(f"variable_with_a_long_name_{i:02}", "list[1000]") for i in range(30)]
    note = format_note(described)
    assert note is not None
    assert len(note) <= MAX_CHARS
    assert note.endswith("variable_with_a_long_name_29: list[1000]]")
    kept = note.count(": list[1000]")
    assert note.startswith(f"{NOTE_PREFIX}(+{30 - kept} older) ")
    assert 0 < kept < 30


def test_format_empty_and_absurd() -> None:
    """Nothing bound gives no note; one description over the bound is counted, not cut."""
    assert format_note([]) is None
    note = format_note([("x" * 700, "int")])
    assert note == f"{NOTE_PREFIX}(+1 names)]"


def test_parse_probe_skips_junk() -> None:
    """Only [name, description] pairs of strings with identifier names are kept."""
    value = [
        ["a", "int"],
        ["b"],
        [1, "int"],
        ["not a name", "int"],
        ["t", "type"],
        "x",
        ["n", "NoneType"],
    ]
    assert parse_probe(value) == [("a", "int"), ("t", "class"), ("n", "None")]
    assert parse_probe(None) == []
    # the console's previews ride as a third string; the note's pairs are the same
    with_previews = [["a", "int", "1"], ["b", "list[2]", "[1, 2]"], ["c", "str", 3]]
    assert parse_probe(with_previews) == [("a", "int"), ("b", "list[2]")]
    assert parse_probe_previews(with_previews) == [("a", "int", "1"), ("b", "list[2]", "[1, 2]")]


def test_probe_code_only_embeds_identifiers() -> None:
    """Names that are not identifiers (or are keywords) never reach the probe source."""
    code = probe_code(["ok", "x)\nimport os", "class", "items"])
    assert '("ok", lambda: ok)' in code
    assert "import os" not in code
    assert "lambda: class" not in code
    assert "lambda: items" not in code


def test_update_forgets_unbound_names() -> None:
    """A recorded name the probe did not find is dropped from the tracker."""
    tracker = ScopeVariables()
    tracker.record("a = 1\nif x:\n    b = 2")
    tracker.update([["a", "int"]])
    assert tracker.names == ["a"]
