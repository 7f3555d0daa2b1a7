"""``key_fix`` and ``value_hint``: pure text in, text out (no I/O)."""

from __future__ import annotations

import ast

from daemon.model.harness import fetched_url, key_fix, key_hint, value_hint
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


def test_items_moves_to_the_one_list_below_the_value() -> None:
    """``r['items']`` where ``r`` holds one list one level down reads that list; with
    two lists, or a key of that name elsewhere, it does not guess."""
    look = "r['status'] == 200\nlen(r['json']) == 4\nr['json'][0]['id'] == 'o-1'"
    assert key_fix("sum(o['a'] for o in r['items'])", ERROR.format("items"), as_look(look)) == (
        "sum((o['a'] for o in r['json']))"
    )
    two = look + "\nlen(r['errors']) == 0"
    assert key_fix("r['items']", ERROR.format("items"), as_look(two)) is None
    assert key_fix("r['rows']", ERROR.format("rows"), as_look(look)) is None


CSV = (
    "inv['status'] == 200\ninv['body'] is a str of 5 lines (text, not parsed)\n"
    "inv['body'].splitlines()[:3] == ['item,stock', 'bolts,120', 'nuts,45']"
)


def test_csv_text_is_named_and_its_reader_written() -> None:
    """A parse error on text the look shows as CSV: the hint names the format and writes
    the reader with the text's path and a number column's int()."""
    hint = value_hint(
        "json.loads(inv['body'])", "json.JSONDecodeError: Expecting value", as_look(CSV)
    )
    assert hint == (
        "Hint: inv['body'] is CSV text (its first line is 'item,stock'), not JSON: do not "
        "json.loads it. Parse it with `import csv` and rows = "
        "list(csv.DictReader(inv['body'].splitlines())): one dict per line, keyed by "
        "'item', 'stock'; the values are str, so compare numbers as int(row['stock'])."
    )
    err = "TypeError: string indices must be integers, not 'str'"
    assert value_hint("inv['body']['stock']", err, as_look(CSV)) == hint


def test_no_value_hint_for_json_text_other_errors_or_no_look() -> None:
    """Text that starts like JSON or has no commas is not called CSV; an error that is
    not a parse or str-as-data error, or no look, gives no hint."""
    js = "t is a str of 3 lines (text, not parsed)\nt.splitlines()[:3] == ['[{\"a\": 1,', '}', ']']"
    assert value_hint("json.loads(t)", "json.JSONDecodeError: x", as_look(js)) is None
    logs = "t is a str of 3 lines (text, not parsed)\nt.splitlines()[:3] == ['a b', 'c', 'd']"
    assert value_hint("t['x']", "TypeError: string indices must be integers", as_look(logs)) is None
    assert value_hint("json.loads(inv['body'])", "ZeroDivisionError: x", as_look(CSV)) is None
    assert value_hint("json.loads(inv['body'])", "json.JSONDecodeError: x", as_look(None)) is None


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


PODS_LOOK = (
    "pods['kind'] == 'List'\n"
    "len(pods['items']) == 12\n"
    "pods['items'][0]['metadata']['name'] == 'web-1'\n"
    "pods['items'][0]['metadata']['namespace'] == 'web'\n"
    "pods['items'][0]['status']['phase'] == 'Running'\n"
    "pods: has 'items'"
)


def test_a_loop_variable_read_as_something_else_is_told_what_one_item_is() -> None:
    """``w['items']`` for ``w`` in ``items(pods)``: each item is a pod, shaped like
    ``pods['items'][0]``; the hint lists its keys instead of sending the model to
    ``pods['items']``, which its loop already reads. Without the code, or for a key
    of the item, or a loop over something the look does not show, the usual hint."""
    code = "[w['path'] for w in items(pods) if any(o for o in items(w['items']))]"
    hint = key_hint(ERROR.format("items"), as_look(PODS_LOOK), code)
    assert hint == (
        "Hint: w is one item of items(pods), shaped like pods['items'][0] (the first): its "
        "keys are metadata, status, and items is not one of them. Read what you need from "
        "those keys, as the list of what your variables hold shows under pods['items'][0]."
    )
    loop = "for p in pods['items']:\n    x = p['items']"
    assert key_hint(ERROR.format("items"), as_look(PODS_LOOK), loop) == hint.replace(
        "w is", "p is"
    ).replace("items(pods)", "pods['items']")
    usual = "Hint: items is not where your code looked; it is at pods['items']."
    assert key_hint(ERROR.format("items"), as_look(PODS_LOOK)) == usual
    assert (
        key_hint(ERROR.format("items"), as_look(PODS_LOOK), "[w['items'] for w in other]") == usual
    )
    deeper = "[w['x']['items'] for w in items(pods)]"
    assert key_hint(ERROR.format("items"), as_look(PODS_LOOK), deeper) == usual


def test_a_loop_over_items_of_a_response_finds_its_one_list() -> None:
    """``items(orders)`` of an HTTP response reads its one list (``orders['json']``);
    the hint shows that list's first item; two lists, or one two levels down, say
    nothing."""
    look = (
        "orders['status'] == 200\nlen(orders['json']) == 4\n"
        "orders['json'][0]['id'] == 'o-1'\norders['json'][0]['amount'] == 120.5"
    )
    code = "sum(o['total'] for o in items(orders))"
    assert key_hint(ERROR.format("total"), as_look(look), code) == (
        "Hint: o is one item of items(orders), shaped like orders['json'][0] (the first): "
        "its keys are id, amount, and total is not one of them. Read what you need from "
        "those keys, as the list of what your variables hold shows under orders['json'][0]."
    )
    two = look + "\nlen(orders['errors']) == 0"
    assert "o is one item" not in (key_hint(ERROR.format("total"), as_look(two), code) or "")
    deep = look.replace("orders['json']", "orders['json']['rows']")
    assert "o is one item" not in (key_hint(ERROR.format("total"), as_look(deep), code) or "")


COUNTED = (
    "len(pods['items']) == 12\n"
    "pods['items'][0]['status']['phase'] == 'Pending'\n"
    "pods['items']: 10 of 12 items have ['status']['containerStatuses'] (a list)"
)


def test_a_key_some_items_lack_is_read_with_dig_where_nothing_is_certain() -> None:
    """Iterated, measured or summed, a list some items lack reads as [] (a loop, a
    comprehension, a ``key=lambda``, len()); compared with a name, a field reads as
    None. Indexed further, compared with [] or ordered, it is left to the hint."""
    err = ERROR.format("containerStatuses")
    lam = "max(items(pods), key=lambda p: sum(c['n'] for c in p['status']['containerStatuses']))"
    assert key_fix(lam, err, as_look(COUNTED)) == (
        "max(items(pods), key=lambda p: sum((c['n'] for c in "
        "dig(p, 'status.containerStatuses', default=[]))))"
    )
    loop = "for p in pods['items']:\n    n = len(p['status']['containerStatuses'])"
    assert key_fix(loop, err, as_look(COUNTED)) == (
        "for p in pods['items']:\n    n = len(dig(p, 'status.containerStatuses', default=[]))"
    )
    indexed = "[p['status']['containerStatuses'][0] for p in items(pods)]"
    assert key_fix(indexed, err, as_look(COUNTED)) is None
    empty = "[p for p in items(pods) if p['status']['containerStatuses'] == []]"
    assert key_fix(empty, err, as_look(COUNTED)) is None
    other = "[q['status']['containerStatuses'] for q in other for p in items(pods)]"
    assert key_fix(other, err, as_look(COUNTED)) is None
    lists = "['status']['containerStatuses'] (a list)"
    phase = COUNTED.replace(lists, "['status']['phase'] (a str)")
    perr = ERROR.format("phase")
    assert key_fix(
        "[p for p in items(pods) if p['status']['phase'] == 'Failed']", perr, as_look(phase)
    ) == ("[p for p in items(pods) if dig(p, 'status.phase', default=None) == 'Failed']")
    assert (
        key_fix("[p for p in items(pods) if p['status']['phase'] > 'F']", perr, as_look(phase))
        is None
    )
    assert (
        key_fix("[p for p in items(pods) if p['status']['phase'] == '']", perr, as_look(phase))
        is None
    )


def test_a_key_inside_text_gets_the_text_hint_before_the_item_hint() -> None:
    """``x['stock']`` for ``x`` in ``items(inv)``, where ``inv`` is a response whose body is
    CSV text naming that column: the CSV hint, not "x has no key stock"."""
    look = (
        "len(rows) == 1\nrows[0]['status'] == 200\n"
        "rows[0]['body'] is a str of 5 lines (text, not parsed)\n"
        "rows[0]['body'].splitlines()[:3] == ['item,stock', 'bolts,120', 'nuts,45']"
    )
    hint = key_hint(ERROR.format("stock"), as_look(look), "min(rows, key=lambda x: x['stock'])")
    assert hint is not None
    assert hint.startswith("Hint: rows[0]['body'] is CSV text (its first line is 'item,stock')")
    other = key_hint(ERROR.format("price"), as_look(look), "min(rows, key=lambda x: x['price'])")
    assert other is not None
    assert other.startswith("Hint: x is one item of rows, shaped like rows[0]")
