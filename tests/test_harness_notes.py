"""The notes a failed snippet's retry carries (trials text-result, module-import, no-match).

Pure: the error texts are Monty's (the scripted runs in ``tests/test_backend_harness.py``
take them from a real worker), the looks are written as the model reads them.
"""

from __future__ import annotations

import pytest

from daemon.code_mode.sandbox import SANDBOX_MODULES
from daemon.model.harness import Switches, active, noticing
from daemon.model.harness.notes import (
    TEXT_SHOWN,
    module_note,
    no_match_note,
    retry_notes,
    text_result_note,
)
from tests.fakes.look import as_look

TRIALS = Switches(trials=frozenset({"text-result", "module-import", "no-match"}))
TB = 'Traceback (most recent call last):\n  File "<python-input-1>", line 2\n'
INDEXED = TB + "TypeError: string indices must be integers, not 'str'"
QUERY = "rows = await read_query(query='select sum(x) as t from a where t > 1')\n"
CODE = QUERY + "[r['id'] for r in rows]"
FUNCTIONS = {"read_query", "list_tables"}


def test_a_functions_short_text_read_as_data_is_quoted_as_its_whole_reply() -> None:
    look = as_look("rows == 'Database error: misuse of aggregate: sum()'")
    with active(TRIALS):
        note = text_result_note(CODE, INDEXED, look, FUNCTIONS)
    assert note == (
        "Hint: read_query() returned only this text, not data: 'Database error: misuse of "
        "aggregate: sum()'. That text is its whole reply: if it reports an error, the call "
        "failed; correct the call's arguments and call it again."
    )


@pytest.mark.parametrize(
    ("code", "error", "look"),
    [
        # another error: a KeyError is the key hint's
        (CODE, TB + "KeyError: id", "rows == 'Database error: x'"),
        # the variable was not set from a function of the catalog
        ("rows = 'a,b'\n[r['id'] for r in rows]", INDEXED, "rows == 'a,b'"),
        # set from a function, but it holds data, or text of many lines (to parse)
        (CODE, INDEXED, "len(rows) == 2"),
        (CODE, INDEXED, "rows is a str of 40 lines (text, not parsed)"),
        # a value one step down is not the function's whole reply
        (CODE, INDEXED, "rows['x'] == 'Database error: x'"),
        # too long to be a reply rather than text to parse
        (CODE, INDEXED, f"rows == '{'x' * TEXT_SHOWN}'"),
    ],
)
def test_no_text_note_elsewhere(code: str, error: str, look: str) -> None:
    with active(TRIALS), noticing() as noticed:
        assert text_result_note(code, error, as_look(look), FUNCTIONS) is None
        assert text_result_note(CODE, INDEXED, None, FUNCTIONS) is None
    assert noticed == set()


def test_text_read_as_data_by_attribute_applies_too_and_an_unparsable_snippet_does_not() -> None:
    error = TB + "AttributeError: 'str' object has no attribute 'get'"
    look = as_look("rows == 'no rows'")
    with active(TRIALS):
        assert text_result_note(QUERY + "rows.get('x')", error, look, FUNCTIONS)
        assert text_result_note("rows = await (", error, look, FUNCTIONS) is None


def test_a_module_the_sandbox_has_but_never_imported_gets_the_import() -> None:
    error = TB + "NameError: name 'datetime' is not defined"
    code = "d = datetime.strptime(s, '%Y')\nx = datetime.now()"
    with active(TRIALS):
        assert module_note(code, error, SANDBOX_MODULES) == (
            "Hint: datetime is a module that was never imported: start the snippet with "
            "`import datetime` (then datetime.now, datetime.strptime), or import the names "
            "you use: `from datetime import ...`."
        )
        # a name that is no module the sandbox has: a variable, or a package it lacks
        for name in ("rows", "pytz"):
            other = TB + f"NameError: name '{name}' is not defined"
            assert module_note(code, other, SANDBOX_MODULES) is None


def test_a_match_used_where_the_pattern_matched_nothing() -> None:
    with active(TRIALS):
        note = no_match_note(TB + "AttributeError: 'NoneType' object has no attribute 'group'")
        assert note is not None
        assert note.startswith("Hint: a re.search or re.match found no match (None has no .group")
        assert no_match_note(TB + "AttributeError: 'NoneType' object has no attribute 'x'") is None
        assert no_match_note(TB + "KeyError: group") is None


def test_off_where_they_apply_they_are_noticed_and_say_nothing() -> None:
    look = as_look("rows == 'Database error: x'")
    named = TB + "NameError: name 'math' is not defined"
    no_match = TB + "AttributeError: 'NoneType' object has no attribute 'span'"
    with noticing() as noticed:
        assert retry_notes(CODE, INDEXED, look, FUNCTIONS, SANDBOX_MODULES) == []
        assert retry_notes("math.pi", named, None, FUNCTIONS, SANDBOX_MODULES) == []
        assert retry_notes("m.span()", no_match, None, FUNCTIONS, SANDBOX_MODULES) == []
    assert noticed == {"text-result", "module-import", "no-match"}
    with active(TRIALS):
        assert len(retry_notes(CODE, INDEXED, look, FUNCTIONS, SANDBOX_MODULES)) == 1
