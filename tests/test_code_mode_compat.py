"""Valid Python that Monty runs otherwise, rewritten before it runs
(``daemon.code_mode.sandbox.compat``): pure, without I/O. The same rewrite in a real
Monty pool: ``test_next_of_a_generator_expression_runs_as_in_cpython`` in
``tests/test_code_mode.py``."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.code_mode.sandbox.compat import as_cpython


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("next(x for x in y)", "next(iter((x for x in y)))"),
        ("next((x for x in y), None)", "next(iter((x for x in y)), None)"),
        (
            "a = next(p for p in ps if p['ok'])\na",
            "a = next(iter((p for p in ps if p['ok'])))\na",
        ),
        (
            "n = next(\n    (r for r in rows if r['é'] == 'ü'),\n    None)",
            "n = next(\n    iter((r for r in rows if r['é'] == 'ü')),\n    None)",
        ),
        # nested: each generator expression handed to next gets its own iter
        (
            "next(next(a for a in b) for b in c)",
            "next(iter((next(iter((a for a in b))) for b in c)))",
        ),
    ],
)
def test_a_generator_expression_given_to_next_gets_iter_around_it(code: str, expected: str):
    """Only ``iter(`` and ``)`` are inserted (the shared parentheses of a lone argument
    kept whole), whatever the line's characters; the result parses and means the same."""
    assert as_cpython(code) == expected
    assert ast.parse(expected)


@pytest.mark.parametrize(
    "code",
    [
        "next(it)",  # an iterator already
        "next(iter([1, 2]))",
        "next([x for x in y])",  # a list: wrong in CPython too, left for its own error
        "sum(x for x in y)",  # other consumers take a list as well
        "def next(x): return x\nnext(1)",
        "next(x for x in",  # does not parse: Monty reports the syntax error
        "print('next(x for x in y)')",  # only in a string
    ],
)
def test_everything_else_is_left_as_it_is(code: str):
    assert as_cpython(code) == code


@given(st.text())
def test_any_text_comes_back_unchanged_or_as_parseable_code(text: str):
    """Never raises; text without such a call is returned as it is."""
    out = as_cpython(text)
    if out != text:
        ast.parse(out)
