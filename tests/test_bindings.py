"""The snippet parse's short cuts (issue 17): expressions skipped without a walrus,
one parse per snippet, short snippets checked without a thread hop."""

from __future__ import annotations

import pytest

from daemon.code_mode.bindings import _FLAGS, _Collector, module_bindings
from daemon.code_mode.helpers import HELPERS_SOURCE
from daemon.code_mode.repl import hooks
from daemon.limits import CodeModeLimits

SNIPPETS = [
    HELPERS_SOURCE,
    "rows = await list_objects(kcp='a')\nbig = [r for r in rows if r['size'] > 5]\nlen(big)",
    "for name, (a, *rest) in pairs:\n    total = a\nelse:\n    done = True",
    "try:\n    x = f()\nexcept ValueError as err:\n    y = 1\nfinally:\n    z = 2",
    "with open_it() as (h, k):\n    import json as j, re\nfrom m import a as b",
    "@deco(lambda q: q)\ndef f(p=[i for i in range(3)]):\n    global G\n    local = 1\nclass C:\n"
    "    inside = 1",
    "match point:\n    case [x, *others]:\n        pass\n    case {'k': v, **more}:\n        pass\n"
    "    case Point(x=px) as whole:\n        pass",
    "d['k'] = 1\nobj.attr = 2\nn += 1\nm: int = 3\nann: str",
]


@pytest.mark.parametrize("code", SNIPPETS)
def test_skipping_expressions_finds_the_same_bindings_without_a_walrus(code: str) -> None:
    """A text without ':=' gives the same bindings whether or not expressions are walked."""
    assert ":=" not in code
    tree = compile(code, "<snippet>", "exec", flags=_FLAGS, dont_inherit=True)
    walked, skipped = _Collector(walrus=True), _Collector(walrus=False)
    walked.visit(tree)
    skipped.visit(tree)
    assert skipped.found == walked.found
    assert walked.found  # every snippet here binds something


@pytest.mark.parametrize(
    ("code", "bound"),
    [
        ("total = sum([(last := x) for x in xs])", ["total", "last"]),
        ("print(y := 5)", ["y"]),
        ("if (m := re.match('a', s)):\n    hit = m", ["m", "hit"]),
        ("f(lambda: (inner := 1))", []),
    ],
)
def test_a_walrus_still_binds_at_module_level(code: str, bound: list[str]) -> None:
    """With ':=' in the text every expression is walked, so a walrus binds as before."""
    assert sorted(b.name for b in module_bindings(code)) == sorted(bound)


def test_each_call_gets_its_own_list() -> None:
    """The parse is cached, the list is not: changing one result leaves the next alone."""
    first = module_bindings("a = 1\nb = 2")
    first.clear()
    assert [b.name for b in module_bindings("a = 1\nb = 2")] == ["a", "b"]


async def test_short_and_long_snippets_are_vetted_alike() -> None:
    """A rebound helper is refused whether the snippet is parsed inline or in a thread."""
    limits = CodeModeLimits()
    short = "items = 1"
    long = "x = 0\n" * (hooks.INLINE_PARSE_CHARS // 6 + 1) + short
    assert len(short) <= hooks.INLINE_PARSE_CHARS < len(long)
    for code in (short, long):
        refused = await hooks.vet_snippet(code, limits)
        assert refused is not None
        assert "'items'" in refused
    assert await hooks.vet_snippet("x = 1", limits) is None
