"""Where a missing key really is: the hint after a ``KeyError``, from the harness's
look at the snippet's variables (a :class:`~daemon.model.harness.look.Look`: its
paths, values and counts, read as data). Pure.
"""

from __future__ import annotations

import ast
import re

from daemon.model.harness.feedback import error_signature
from daemon.model.harness.look import (
    Counted,
    Holds,
    Length,
    Look,
    Path,
    Prefix,
    Step,
    TextStart,
    Value,
)
from daemon.model.harness.rules import on

# list_paths, plain_path and PARSE_ERROR serve harness/loopfix.py too
__all__ = [
    "PARSE_ERROR",
    "key_hint",
    "key_paths",
    "list_paths",
    "missing_key",
    "plain_path",
]

_KEY = re.compile(r"^KeyError: (.+)$")


def key_hint(error: str, look: Look | None) -> str | None:
    """Where a missing key really is, from the look at the variables (:func:`peek_code`).

    Asked for ``status["components"]`` of an ``http_get`` result, the model
    needed ``status["json"]["components"]``: a path in the look that ends
    with the key says where it lives. A path through a list's first item
    means the key is there but missing in some other item (a Pending pod has
    no ``containerStatuses``): then the way around is a default. A look that
    counted the items holding the key (``peek_code(names, missing=key)``) says
    how many lack it and writes the ``dig`` with its path and default: told only
    to skip such items, the model tested ``'containerStatuses' in pod``, a level
    too high, and summed nothing. Rule ``key-hint``.
    """
    key = missing_key(error)
    if key is None or look is None or not on("key-hint"):
        return None
    counted = _counted_lists(look)
    if counted:
        return _counted_hint(key, *min(counted, key=lambda c: c[1] == c[2]))
    found = [str(path) for path in key_paths(key, look)]
    if not found:
        return _nowhere_hint(key, look)
    if any("[0]" in path for path in found):
        return (
            f"Hint: {key} is in the first item ({found[0]}) but missing in another: "
            f"skip items without it, or use dig(item, '...{key}', default=...)."
        )
    return f"Hint: {key} is not where your code looked; it is at {' and '.join(found[:2])}."


def key_paths(key: str, look: Look) -> list[Path]:
    """The look's paths that end with ``key`` (``r['json']['components']``), in order:
    from the dicts it found holding the key (``r['json']: has 'components'``), then from
    every path the key is a step of (the first such step of each)."""
    found: list[Path] = [
        Path(e.path.root, (*e.path.steps, _step(e)))
        for e in look.entries()
        if isinstance(e, Holds) and e.key == key
    ]
    for entry in look.entries():
        steps = entry.path.steps
        at = next((n for n, s in enumerate(steps) if s.key == key), None)
        if at is not None:
            path = Path(entry.path.root, steps[: at + 1])
            if str(path) not in map(str, found):
                found.append(path)
    return found


def _step(holds: Holds) -> Step:
    return Step(holds.shown, holds.key)


def list_paths(look: Look) -> set[str]:
    """The paths of the lists the look shows (``len(r['json']) == 4``)."""
    return {str(e.path) for e in look.entries() if isinstance(e, Length)}


def _nowhere_hint(key: str, look: Look) -> str:
    """A KeyError's key that no path of the look holds: a value read as a key (``c['up']``
    where ``c['status'] == 'up'``), or used as a key of a dict the snippet fills
    (``counts[pod['spec']['nodeName']] += 1`` on an empty dict), or
    a key the model made up (``ws['workspaces'][0]['nodes']``), read three times over
    while the hint said only that it was missing; or a word of text not parsed yet
    (a CSV body's column read as ``row['stock']``)."""
    value = next(
        (
            e.path
            for e in look.entries()
            if isinstance(e, Value) and e.sample == repr(key) and e.path.steps
        ),
        None,
    )
    if value is not None:
        last = value.steps[-1]
        return (
            f"Hint: {key!r} is a value in your data ({value} == "
            f"{key!r}), not a key. To test for it, compare: item{last} == {key!r}. "
            "To count by it, a dict you fill starts empty: counts[k] = counts.get(k, 0) + 1, "
            "or count_by(xs, 'a.b')."
        )
    if _in_text(key, look):
        return (
            f"Hint: {key} is only inside text (a str shown above by its first lines), not "
            "a key: parse the text first: json.loads(text) for JSON; for CSV, rows = "
            "[line.split(',') for line in text.splitlines()], whose first row names the columns."
        )
    return (
        f"Hint: no value your variables hold has a key {key} (see what they hold above): "
        "do not read it. Use only the keys shown there, or get the data from another "
        "function."
    )


def _in_text(key: str, look: Look) -> bool:
    """Whether ``key`` is a word of a text the look shows (a CSV column's name), or of the
    path it sits at."""
    word = re.compile(rf"\b{re.escape(key)}\b")
    return any(
        word.search(str(e.path)) or word.search(e.sample)
        for e in look.entries()
        if isinstance(e, TextStart | Prefix)
    )


def missing_key(error: str) -> str | None:
    """The key of the KeyError a failed snippet ended with (a str key), or None."""
    m = _KEY.match(error_signature(error) or "")
    if m is None:
        return None
    key = m.group(1).strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
        key = key[1:-1]
    return key if key and not key.lstrip("-").isdigit() else None


_DEFAULTS = {"a list": "[]", "a dict": "{}", "a number": "0", "a str": "''", "a bool": "False"}


def _counted_lists(look: Look) -> list[tuple[Path, int, int, list[str], str]]:
    """``(list path, items with the key, items, relative path, kind)`` of each list the look
    counted, in order; one reached through a key that is not a str is left out."""
    found = []
    for e in look.entries():
        if isinstance(e, Counted) and e.rel and all(s.key is not None for s in e.rel):
            found.append((e.path, e.have, e.total, [s.key for s in e.rel if s.key], e.kind))
    return found


def _counted_hint(key: str, path: Path, have: int, total: int, rel: list[str], kind: str) -> str:
    """The hint for a key some (or all) items of a list hold at ``rel``."""
    items_of = len(path.steps) == 1 and path.steps[0].key == "items"
    source = f"items({path.root})" if items_of else str(path)
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


PARSE_ERROR = re.compile(r"JSONDecodeError|string indices must be integers|'str' object")
