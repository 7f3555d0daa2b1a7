"""``key_fix`` and ``value_hint``: pure text in, text out (no I/O)."""

from __future__ import annotations

import ast

from daemon.model.harness import fetched_url, key_fix, value_hint
from tests.fakes.look import as_look

LOOK = (
    "r['status'] == 200\n"
    "r['json']['version'] == '2.7.1'\n"
    "len(r['json']['components']) == 4\n"
    "r['json']['components'][0]['name'] == 'db'\n"
    "r['json']: has 'components'"
)
ERROR = 'Traceback (most recent call last):\n  File "<python-input-1>"\nKeyError: {}'


def test_a_key_found_under_one_path_is_read_there() -> None:
    """Every ``r['components']`` moves to ``r['json']['components']``; reads of other
    keys, loop variables and a real key of ``r`` stay."""
    code = (
        "r = await http_get(url='u')\n"
        "ok = r['status'] == 200\n"
        "[c['name'] for c in r['components'] if c['status'] == 'down'] + [len(r['components'])]"
    )
    fixed = key_fix(code, ERROR.format("components"), as_look(LOOK))
    assert fixed is not None
    assert "r['json']['components']" in fixed
    assert "r['components']" not in fixed
    assert "r['status'] == 200" in fixed
    assert "c['status'] == 'down'" in fixed
    ast.parse(fixed)
    assert key_fix(code, ERROR.format("'components'"), as_look(LOOK)) == fixed  # a quoted key


def test_a_key_read_in_a_value_path_is_found_from_a_value_line() -> None:
    """A key the look shows only as a value line's last segment is found too."""
    fixed = key_fix("r['version']", ERROR.format("version"), as_look(LOOK))
    assert fixed == "r['json']['version']"


def test_no_fix_when_the_key_is_ambiguous_missing_or_behind_a_first_item() -> None:
    """Two paths hold the key, none does, or the only one runs through a list's first
    item (which says nothing of the others), or the read is not a variable's plain
    subscript, or the error is not a KeyError: no rewrite."""
    two = LOOK + "\nr['meta']['components'] == 3"
    assert key_fix("r['components']", ERROR.format("components"), as_look(two)) is None
    assert key_fix("r['nodes']", ERROR.format("nodes"), as_look(LOOK)) is None
    first = "len(p['items']) == 2\np['items'][0]['status']['phase'] == 'Running'"
    assert key_fix("p['phase']", ERROR.format("phase"), as_look(first)) is None
    assert key_fix("f(r)['components']", ERROR.format("components"), as_look(LOOK)) is None
    assert key_fix("r['components']", "TypeError: x", as_look(LOOK)) is None
    assert key_fix("r['components'", ERROR.format("components"), as_look(LOOK)) is None
    assert key_fix("r['components']", ERROR.format("components"), as_look(None)) is None


def test_no_value_hint_for_other_errors_or_no_look() -> None:
    """An error that is not a parse or str-as-data error, or no look, gives no hint;
    neither does text parsed as JSON (the look shows what the text is)."""
    look = "len(pods['items']) == 12\npods['items'][0]['metadata']['name'] == 'web-1'"
    code = "max(pods.items(), key=lambda kv: kv[1]['status'])"
    assert value_hint(code, "ZeroDivisionError: x", as_look(look)) is None
    assert value_hint(code, "TypeError: string indices must be integers", None) is None
    text = "t is a str of 3 lines (text, not parsed)\nt.splitlines()[:3] == ['a,b', '1,2', '3,4']"
    assert value_hint("json.loads(t)", "json.JSONDecodeError: x", as_look(text)) is None


def test_dict_items_of_a_list_result_is_told_where_the_list_is() -> None:
    """``pods.items()`` where the look shows ``pods['items']`` is a list: the hint says
    the method gives the dict's pairs and where the list is."""
    look = "len(pods['items']) == 12\npods['items'][0]['metadata']['name'] == 'web-1'"
    code = "max(pods.items(), key=lambda kv: kv[1]['status'])"
    err = "TypeError: string indices must be integers, not 'str'"
    assert value_hint(code, err, as_look(look)) == (
        "Hint: pods.items() is the dict method: it gives the (key, value) pairs of pods "
        "itself, not its list. The list is pods['items']: for item in pods['items'] "
        "(or items(pods))."
    )
    assert value_hint("counts.items()", err, as_look(look)) is None


def test_fetched_url_needs_a_url_in_the_question_and_a_fetch_of_it() -> None:
    """True only when the question names a URL and the code calls a function that takes
    a url (by its name, as a call)."""
    fns = {"http_get": (frozenset({"url"}), None), "list_pods": (frozenset({"ns"}), None)}
    q = "Which items are low in http://127.0.0.1:8000/inventory.csv?"
    assert fetched_url(q, "r = await http_get(url='x')", fns)
    assert not fetched_url(q, "r = await list_pods(ns='x')", fns)
    assert not fetched_url(q, "http_get_result = 1", fns)
    assert not fetched_url("Which items are low?", "r = await http_get(url='x')", fns)
