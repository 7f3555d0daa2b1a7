"""Where a missing key really is: the hint after a ``KeyError``, from the harness's
look at the snippet's variables (:func:`~daemon.model.harness.peek.peek_code`).
Text in, text out.
"""

from __future__ import annotations

import ast
import json
import re

from daemon.model.harness.feedback import error_signature

# counted_line, first_item_path, key_paths, list_paths, loop_sources and plain_path
# serve harness/keyfix.py too
__all__ = [
    "counted_line",
    "first_item_path",
    "key_hint",
    "key_paths",
    "list_paths",
    "loop_sources",
    "missing_key",
    "plain_path",
    "value_hint",
]

_KEY = re.compile(r"^KeyError: (.+)$")


def key_hint(error: str, shapes: str | None, code: str | None = None) -> str | None:
    """Where a missing key really is, from the look at the variables (:func:`peek_code`).

    Asked for ``status["components"]`` of an ``http_get`` result, the model
    needed ``status["json"]["components"]``: a path in the look that ends
    with the key says where it lives. A path through a list's first item
    means the key is there but missing in some other item (a Pending pod has
    no ``containerStatuses``): then the way around is a default. A look that
    counted the items holding the key (``peek_code(names, missing=key)``) says
    how many lack it and writes the ``dig`` with its path and default: told only
    to skip such items, the model tested ``'containerStatuses' in pod``, a level
    too high, and summed nothing. A key read of a loop variable (``code`` given)
    that its items do not have says what one item is (:func:`_item_hint`).
    """
    key = missing_key(error)
    if key is None or not shapes:
        return None
    counted = [c for c in map(counted_line, shapes.splitlines()) if c is not None]
    if counted:
        return _counted_hint(key, *min(counted, key=lambda c: c[1] == c[2]))
    if code is not None and not _in_text(key, shapes) and (item := _item_hint(code, key, shapes)):
        return item  # (a key inside text is a column to parse: the text hint says how)
    found = key_paths(key, shapes)
    if not found:
        return _nowhere_hint(key, shapes)
    if any("[0]" in path for path in found):
        return (
            f"Hint: {key} is in the first item ({found[0]}) but missing in another: "
            f"skip items without it, or use dig(item, '...{key}', default=...)."
        )
    return f"Hint: {key} is not where your code looked; it is at {' and '.join(found[:2])}."


def key_paths(key: str, shapes: str) -> list[str]:
    """The look's paths that end with ``key`` (``r['json']['components']``), in order:
    from its lines that hold a dict with the key (``r['json']: has 'components'``) and
    from every path line the key is a segment of."""
    found: list[str] = [
        f"{m.group(1)}[{key!r}]"
        for m in _HAS_LINE.finditer(shapes)
        if m.group(2) in (repr(key), json.dumps(key))
    ]
    for line in shapes.splitlines():
        for quoted in (f"[{key!r}]", f'["{key}"]'):
            at = line.find(quoted)
            if at >= 0:
                path = line[: at + len(quoted)].removeprefix("len(")
                if path not in found:
                    found.append(path)
    return found


def list_paths(shapes: str) -> set[str]:
    """The paths of the lists the look shows (``len(r['json']) == 4``)."""
    return set(_LEN_LINE.findall(shapes))


def _nowhere_hint(key: str, shapes: str) -> str:
    """A KeyError's key that no path of the look holds: a value read as a key (``c['up']``
    where ``c['status'] == 'up'``), or used as a key of a dict the snippet fills
    (``counts[pod['spec']['nodeName']] += 1`` on an empty dict), or
    a key the model made up (``ws['workspaces'][0]['nodes']``), read three times over
    while the hint said only that it was missing; or a column of text not parsed yet
    (a CSV body read as ``row['stock']``)."""
    value = re.search(rf"^(.*)(\[[^\[\]]+\]) == {re.escape(repr(key))}$", shapes, re.MULTILINE)
    if value:
        return (
            f"Hint: {key!r} is a value in your data ({value.group(1)}{value.group(2)} == "
            f"{key!r}), not a key. To test for it, compare: item{value.group(2)} == {key!r}. "
            "To count by it, a dict you fill starts empty: counts[k] = counts.get(k, 0) + 1, "
            "or count_by(xs, 'a.b')."
        )
    if _in_text(key, shapes):
        return _csv_hint(shapes) or (
            f"Hint: {key} is only inside text (a str shown above by its first lines), not "
            "a key: parse the text first: json.loads(text) for JSON; for CSV, rows = "
            "[line.split(',') for line in text.splitlines()], whose first row names the columns."
        )
    return (
        f"Hint: no value your variables hold has a key {key} (see what they hold above): "
        "do not read it. Use only the keys shown there, or get the data from another "
        "function."
    )


def _in_text(key: str, shapes: str) -> bool:
    """Whether ``key`` is a word of a text the look shows (a CSV column's name)."""
    word = re.compile(rf"\b{re.escape(key)}\b")
    return any(word.search(line) for line in shapes.splitlines() if _TEXT_LINE.search(line))


# The look's lines for text (daemon/model/harness/peek.py): its first lines, or its start.
_TEXT_LINE = re.compile(r"\.splitlines\(\)\[:3\] == |\[:80\] == ")


def missing_key(error: str) -> str | None:
    """The key of the KeyError a failed snippet ended with (a str key), or None."""
    m = _KEY.match(error_signature(error) or "")
    if m is None:
        return None
    key = m.group(1).strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
        key = key[1:-1]
    return key if key and not key.lstrip("-").isdigit() else None


# A line of the look at a KeyError's key (daemon/model/harness/peek.py):
# `pods['items']: 10 of 12 items have ['status']['containerStatuses'] (a list)`.
_COUNTED_LINE = re.compile(r"^(.+): (\d+) of (\d+) items have ((?:\[.+?\])+) \((a \w+|None)\)$")
_SEGMENT = re.compile(r"\[(.+?)\]")
_HAS_LINE = re.compile(r"^(.+): has (.+)$", re.MULTILINE)
_ITEMS_OF = re.compile(r"^(\w+)\['items'\]$")
_DEFAULTS = {"a list": "[]", "a dict": "{}", "a number": "0", "a str": "''", "a bool": "False"}


def counted_line(line: str) -> tuple[str, int, int, list[str], str] | None:
    """``(list path, items with the key, items, relative path, kind)`` of a counted line."""
    m = _COUNTED_LINE.match(line.strip())
    if m is None:
        return None
    try:
        rel = [ast.literal_eval(seg) for seg in _SEGMENT.findall(m.group(4))]
    except (ValueError, SyntaxError):
        return None
    if not rel or not all(isinstance(k, str) for k in rel):
        return None
    return m.group(1), int(m.group(2)), int(m.group(3)), rel, m.group(5)


def _counted_hint(key: str, path: str, have: int, total: int, rel: list[str], kind: str) -> str:
    """The hint for a key some (or all) items of a list hold at ``rel``."""
    m = _ITEMS_OF.match(path)
    source = f"items({m.group(1)})" if m else path
    args = repr(".".join(rel)) if not any("." in k for k in rel) else ", ".join(map(repr, rel))
    shown = "".join(f"[{k!r}]" for k in rel)
    if have == total:
        return (
            f"Hint: every item of {path} has {key}, at item{shown} "
            f"(for item in {source}); your code looked for it somewhere else."
        )
    default = _DEFAULTS.get(kind, "None")
    example = (
        f"[x for item in {source} for x in dig(item, {args}, default=[])]"
        if kind == "a list"
        else f"[dig(item, {args}, default={default}) for item in {source}]"
    )
    return (
        f"Hint: only {have} of the {total} items of {path} have {shown}; the other "
        f"{total - have} do not, so item{shown} fails on them. Read it with "
        f"dig(item, {args}, default={default}), which gives {default} for those: {example}"
    )


def plain_path(node: ast.expr) -> bool:
    """Whether ``node`` is a variable or its constant subscripts (``r``, ``r['json']``)."""
    while isinstance(node, ast.Subscript):
        if not isinstance(node.slice, ast.Constant):
            return False
        node = node.value
    return isinstance(node, ast.Name)


_TEXT_LINES = re.compile(r"^(\w+(?:\[[^\[\]]+\])*)\.splitlines\(\)\[:3\] == (\[.*\])$", re.M)
_DICT_ITEMS = re.compile(r"\b(\w+)\.items\(\)")
_PARSE_ERROR = re.compile(r"JSONDecodeError|string indices must be integers|'str' object")


def value_hint(code: str, error: str, shapes: str | None) -> str | None:
    """What a value really is, when the snippet treated it as something else, from the
    look at the variables; None when the look does not say.

    - Text parsed as JSON (``JSONDecodeError``) or indexed as data, where the look
      shows it is CSV (a first line of comma-separated names): told "json.loads
      for JSON; for CSV, split the lines", a 1.5B model chose ``json.loads`` of a
      CSV body three times over. The hint names the format, from the first line,
      and the one line that parses it.
    - ``pods.items()`` on a result that holds its list at ``pods['items']``: the
      dict method gives ``(key, value)`` pairs (``('kind', 'List')``), and the
      model indexed those as pods, then was told to parse text.
    """
    if not shapes or not _PARSE_ERROR.search(error):
        return None
    for m in _DICT_ITEMS.finditer(code):
        name = m.group(1)
        if f"len({name}['items']) == " in shapes:
            return (
                f"Hint: {name}.items() is the dict method: it gives the (key, value) pairs "
                f"of {name} itself, not its list. The list is {name}['items']: "
                f"for item in {name}['items'] (or items({name}))."
            )
    return _csv_hint(shapes)


def _csv_hint(shapes: str) -> str | None:
    """How to parse the first CSV text the look shows (a first line of comma-separated
    names, not JSON), or None when it shows none."""
    for m in _TEXT_LINES.finditer(shapes):
        path = m.group(1)
        try:
            lines = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
        first = lines[0] if lines and isinstance(lines[0], str) else ""
        if "," not in first or first.lstrip()[:1] in ("{", "["):
            continue
        columns = [c.strip() for c in first.split(",")]
        return (
            f"Hint: {path} is CSV text (its first line is {first!r}), not JSON: do not "
            f"json.loads it. Parse it with `import csv` and rows = "
            f"list(csv.DictReader({path}.splitlines())): one dict per line, keyed by "
            f"{', '.join(map(repr, columns[:4]))}; the values are str, so compare numbers "
            f"as int(row[{columns[-1]!r}])."
        )
    return None


def _item_hint(code: str, key: str, shapes: str) -> str | None:
    """For ``v[key]`` where ``v`` runs over a list the look shows (``for v in items(x)``,
    ``x['items']``, ``x``) and its first item has no such key: what one item is.

    Asked which namespaces hold a Failed pod, the model wrote ``for w in
    items(pods)`` and read ``w['items']``, as if each item were a namespace holding
    pods; told "items is at pods['items']", it wrote the same loop again.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    loops = loop_sources(tree)
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in loops
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == key
        ):
            continue
        var, over = node.value.id, loops[node.value.id]
        first = first_item_path(over, shapes)
        if first is None:
            continue
        keys = _keys_at(first, shapes)
        if not keys or key in keys:
            continue
        shown = ", ".join(keys[:8])
        return (
            f"Hint: {var} is one item of {ast.unparse(over)}, shaped like {first} (the "
            f"first): its keys are {shown}, and {key} is not one of them. Read what you "
            f"need from those keys, as the list of what your variables hold shows under "
            f"{first}."
        )
    return None


_KEYED = frozenset({"max", "min", "sorted"})


def loop_sources(tree: ast.AST) -> dict[str, ast.expr]:
    """Each variable that runs over a list, and that list's expression: loop and
    comprehension targets, and the one parameter of a ``key=lambda`` of max(),
    min() or sorted() (``max(items(pods), key=lambda p: ...)``)."""
    loops: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension | ast.For | ast.AsyncFor):
            if isinstance(node.target, ast.Name):
                loops.setdefault(node.target.id, node.iter)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _KEYED
            and node.args
        ):
            for kw in node.keywords:
                fn = kw.value
                if kw.arg == "key" and isinstance(fn, ast.Lambda) and len(fn.args.args) == 1:
                    loops.setdefault(fn.args.args[0].arg, node.args[0])
    return loops


def first_item_path(over: ast.expr, shapes: str) -> str | None:
    """The look's path of the first item a loop runs over (``items(x)``, ``x['items']``,
    ``x``), or None when the look shows no such list."""
    if (
        isinstance(over, ast.Call)
        and isinstance(over.func, ast.Name)
        and over.func.id == "items"
        and len(over.args) == 1
    ):
        inner = over.args[0]
        if not plain_path(inner):
            return None
        base = ast.unparse(inner)
        for path in (f"{base}['items']", base):
            if f"len({path}) == " in shapes:
                return f"{path}[0]"
        # items() of a dict without "items": its one list value (an HTTP response's json)
        below = {
            m.group(1)
            for m in _LEN_LINE.finditer(shapes)
            if m.group(1).startswith(base + "[") and _ONE_SEGMENT.fullmatch(m.group(1)[len(base) :])
        }
        return f"{below.pop()}[0]" if len(below) == 1 else None
    if not plain_path(over):
        return None
    path = ast.unparse(over)
    return f"{path}[0]" if f"len({path}) == " in shapes else None


_LEN_LINE = re.compile(r"^len\((.+)\) == \d+$", re.MULTILINE)
_ONE_SEGMENT = re.compile(r"\[[^\[\]]+\]")


def _keys_at(path: str, shapes: str) -> list[str]:
    """The keys the look shows right under ``path`` (a dict), in order."""
    found: list[str] = []
    for line in shapes.splitlines():
        rest = line.removeprefix("len(")
        if not rest.startswith(path + "["):
            continue
        m = _SEGMENT.match(rest[len(path) :])
        if m is None:
            continue
        try:
            k = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            continue
        if isinstance(k, str) and k not in found:
            found.append(k)
    return found
