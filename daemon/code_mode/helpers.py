"""Built-in helpers fed into every REPL scope, and the rule that keeps them bound.

Spec A8 and A11: live runs showed a small model forgetting ``import
asyncio``, guessing shapes (``kcps[0]`` on a dict), and later shadowing a
helper (``names = []`` broke ``names(v)`` three turns on). So every new scope
(and every ``restart``) first runs :data:`HELPERS_SOURCE`, which imports
``asyncio``, ``json`` and ``re`` and defines:

- ``items(x)``: the list inside ``x``;
- ``names(x)``: ``metadata.name`` (else ``name``, else ``id``) of each item;
- ``dig(obj, *path, default=None)``: nested lookup by dotted or split
  segments; a trailing argument that is not a ``str``/``int`` is the default;
- ``count_by(xs, *path)``: ``{value: count}``, most common first;
- ``to_json(x, indent=None)``: ``json.dumps`` with ``str()`` for unknown
  types (Monty's ``json.dumps`` has no ``default=``);
- ``parse_records(text)``: the records of a tool's text (an HTML or markdown
  table, CSV, or blocks of ``Key: value`` lines) as a list of dicts. Many
  servers return text, not JSON (a git log, a CSV body, a page as markdown),
  and a model that guesses its layout iterates its characters, splits quoted
  CSV cells on every comma or matches a regex against the wrong line; one
  helper reads the common layouts so a snippet reads fields by name. The
  small-model harness does not list it (issue 28's runs r25 and r26: the 1.5B
  model used it where it does not fit). CSV goes through Monty's ``csv``
  module; the rest is ``re`` (Monty has no ``html.parser``).

The source is Monty Python (no ``yield``, no ``del``, exceptions with one
string argument). The helpers call each other and ``json`` through private
``_asyncai_`` aliases, so a snippet that rebinds ``json`` does not break
``to_json``.

:func:`check_reserved` rejects, before it runs, a snippet that rebinds a
helper name at module level, or names a private ``_asyncai_`` name anywhere
in its text (issue 26: the scope's own ``_asyncai_wrappers`` held every tool;
strings and comments count too, as ``eval`` and ``locals()[...]`` take names
as text). The approval gate at each call is what keeps any other route harmless.
"""

from __future__ import annotations

import re

from daemon.code_mode.bindings import Binding, module_bindings

__all__ = [
    "HELPERS_SOURCE",
    "PRELOADED_MODULES",
    "PRIVATE_PREFIX",
    "RESERVED_NAMES",
    "check_reserved",
    "prelude",
    "reserved_bindings",
]

RESERVED_NAMES: tuple[str, ...] = (
    "items",
    "names",
    "dig",
    "count_by",
    "to_json",
    "parse_records",
)
PRELOADED_MODULES: tuple[str, ...] = ("asyncio", "json", "re")
PRIVATE_PREFIX = "_asyncai_"

HELPERS_SOURCE = '''\
import asyncio
import json
import re
import json as _asyncai_json
import csv as _asyncai_csv
import re as _asyncai_re


def _asyncai_is_segment(p):
    return type(p) is str or type(p) is int


def items(x):
    """The list inside x: x itself for a list or tuple, x["items"], the only
    list value of a dict, [x] for a dict without lists, [] for None."""
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, dict):
        if "items" in x and (x["items"] is None or isinstance(x["items"], list)):
            return x["items"] or []
        lists = [k for k, v in x.items() if isinstance(v, list)]
        if len(lists) == 1:
            return x[lists[0]]
        if not lists:
            return [x]
        keys = ", ".join(str(k) for k in lists)
        raise TypeError("items(): this dict holds several lists; pick one: " + keys)
    raise TypeError("items() needs a list or a dict, got " + type(x).__name__)


def _asyncai_step(cur, key):
    if isinstance(cur, dict):
        if key in cur:
            return True, cur[key]
        return False, None
    if isinstance(cur, (list, tuple)):
        if type(key) is str:
            digits = key[1:] if key.startswith("-") else key
            if not digits.isdigit():
                return False, None
            key = int(key)
        if -len(cur) <= key < len(cur):
            return True, cur[key]
    return False, None


def dig(obj, *path, default=None):
    """obj["a"]["b"][0]... by dotted or split segments: dig(o, "a.b.0.c"),
    dig(o, "a", "b", 0), dig(pod, "metadata.labels", "app.kubernetes.io/name").
    Returns default when a step is missing or None. A last argument that is
    not a str or int is taken as the default: dig(x, "a.b", {})."""
    if path and not _asyncai_is_segment(path[-1]):
        default = path[-1]
        path = path[:-1]
    cur = obj
    for seg in path:
        if type(seg) is int:
            found, cur = _asyncai_step(cur, seg)
            if not found or cur is None:
                return default
            continue
        rest = seg
        while True:
            if isinstance(cur, dict) and rest in cur:
                found, cur = True, cur[rest]
                rest = None
            else:
                parts = rest.split(".", 1)
                found, cur = _asyncai_step(cur, parts[0])
                rest = parts[1] if len(parts) == 2 else None
            if not found or cur is None:
                return default
            if rest is None:
                break
    if cur is None:
        return default
    return cur


def names(x):
    """metadata.name (else name, else id) of every item of items(x); a str item is itself."""
    out = []
    for i in items(x):
        if isinstance(i, str):
            out.append(i)
        elif isinstance(i, dict):
            n = _asyncai_dig(i, "metadata", "name")
            if n is None:
                n = i.get("name")
            if n is None:
                n = i.get("id")
            out.append(n)
        else:
            out.append(None)
    return out


def _asyncai_plain(x):
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                k = str(k)
            out[k] = _asyncai_plain(v)
        return out
    if isinstance(x, (list, tuple)):
        return [_asyncai_plain(v) for v in x]
    if isinstance(x, (set, frozenset)):
        vals = [_asyncai_plain(v) for v in x]
        try:
            return sorted(vals)
        except TypeError:
            return vals
    return str(x)


def to_json(x, indent=None):
    """json.dumps(x, indent=indent) with str() for values JSON has no type for
    (sets become lists; Monty's json.dumps has no default=)."""
    return _asyncai_json.dumps(_asyncai_plain(x), indent=indent)


def count_by(xs, *path):
    """{value: count} of dig(x, *path) over items(xs), most common first:
    count_by(pods, "status.phase"). Missing values count under None, or under
    a trailing argument that is not a str or int (count_by(xs, "a.b", False));
    list and dict values count under their to_json text."""
    default = None
    if path and not _asyncai_is_segment(path[-1]):
        default = path[-1]
        path = path[:-1]
    counts = {}
    for x in items(xs):
        v = _asyncai_dig(x, *path, default=default) if path else x
        if isinstance(v, (list, dict, set)):
            v = _asyncai_to_json(v)
        counts[v] = counts.get(v, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


_asyncai_dig = dig
_asyncai_to_json = to_json


def _asyncai_number(s):
    t = s.strip()
    if _asyncai_re.fullmatch(r"-?(0|[1-9][0-9]*)", t):
        return int(t)
    if _asyncai_re.fullmatch(r"-?(0|[1-9][0-9]*)\\.[0-9]+", t):
        return float(t)
    if _asyncai_re.fullmatch(r"-?[1-9][0-9]{0,2}(,[0-9]{3})+(\\.[0-9]+)?", t):
        return _asyncai_number(t.replace(",", ""))
    return t


def _asyncai_rows(header, rows):
    keys = [h.strip() for h in header]
    out = []
    for r in rows:
        if len(r) != len(keys):
            continue
        out.append({k: _asyncai_number(v) for k, v in zip(keys, r)})
    return out


def _asyncai_unescape(s):
    for entity, char in [("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"),
                         ("&#x27;", "'"), ("&nbsp;", " "), ("&amp;", "&")]:
        s = s.replace(entity, char)
    return s


def _asyncai_html_rows(text):
    rows = []
    for tr in _asyncai_re.findall(r"(?is)<tr[^>]*>(.*?)</tr>", text):
        cells = _asyncai_re.findall(r"(?is)<t[hd][^>]*>(.*?)</t[hd]>", tr)
        texts = [_asyncai_unescape(_asyncai_re.sub(r"(?s)<[^>]*>", "", c)) for c in cells]
        rows.append([_asyncai_re.sub(r"\\s+", " ", t).strip() for t in texts])
    rows = [r for r in rows if r]
    if len(rows) < 2:
        return None
    return _asyncai_rows(rows[0], rows[1:])


def _asyncai_md_rows(lines):
    table = [l.strip() for l in lines if l.strip().startswith("|")]
    if len(table) < 3 or not _asyncai_re.fullmatch(r"\\|?[\\s:|-]*-{3,}[\\s:|-]*", table[1]):
        return None
    def cells(l):
        return [c.strip() for c in l.strip().strip("|").split("|")]
    return _asyncai_rows(cells(table[0]), [cells(l) for l in table[2:]])


def _asyncai_csv_rows(lines):
    lines = [l for l in lines if l.strip()]
    if len(lines) < 2:
        return None
    for sep in [",", "\\t", ";"]:
        parsed = list(_asyncai_csv.reader(lines, delimiter=sep))
        header = parsed[0]
        if len(header) < 2:
            continue
        rows = parsed[1:]
        fit = [r for r in rows if len(r) == len(header)]
        if len(fit) * 2 >= len(rows):
            return _asyncai_rows(header, fit)
    return None


def _asyncai_kv_rows(lines):
    out = []
    cur = {}
    last = None
    for line in lines:
        m = _asyncai_re.match(r"\\s{0,4}([A-Za-z][\\w .-]{0,40}?):(\\s+(.*))?$", line)
        if not line.strip():
            if cur:
                out.append(cur)
            cur = {}
            last = None
        elif m and m.group(3) is not None and m.group(3).strip() != "":
            key = m.group(1)
            if key in cur:
                out.append(cur)
                cur = {}
            cur[key] = _asyncai_number(m.group(3))
            last = key
        elif last is not None:
            cur[last] = str(cur[last]) + "\\n" + line.strip()
    if cur:
        out.append(cur)
    out = [r for r in out if len(r) >= 2]
    return out if out else None


def parse_records(text):
    """The records a text holds, as a list of dicts: an HTML or markdown table or CSV
    (one dict per row, keyed by the header), or "Key: value" lines (one dict per
    block; a blank line or a repeated key starts the next). Numbers (1,234.5 too)
    become int or float. JSON (text, or an HTTP result's "json") gives items() of it;
    an HTTP result's "body" (or "text") is read as text; another dict gives items()
    of it, a list itself."""
    if isinstance(text, (list, tuple)):
        return list(text)
    if isinstance(text, dict):
        if text.get("json") is not None:
            return items(text["json"])
        bodies = [text[k] for k in ["body", "text", "content"] if isinstance(text.get(k), str)]
        if not bodies:
            return items(text)
        text = bodies[0]
    if not isinstance(text, str):
        raise TypeError("parse_records() needs text, got " + type(text).__name__)
    if not text.strip():
        return []
    if text.strip()[0] in "[{":
        try:
            data = _asyncai_json.loads(text)
        except Exception:
            data = None
        if isinstance(data, (list, dict)):
            return items(data)
    lines = text.splitlines()
    found = None
    if _asyncai_re.search(r"(?i)<tr[\\s>]", text):
        found = _asyncai_html_rows(text)
    if found is None:
        found = _asyncai_md_rows(lines)
    if found is None:
        found = _asyncai_kv_rows(lines)
    if found is None:
        found = _asyncai_csv_rows(lines)
    if found is None:
        raise ValueError("parse_records(): no table, CSV or 'Key: value' lines in this text")
    return found
'''


def prelude(preamble: str = "") -> list[str]:
    """The snippets a new scope runs before the model's first one, in order.

    The helpers, then the operator's preamble (``--code-preamble``), if any.
    """
    return [HELPERS_SOURCE, *([preamble] if preamble.strip() else [])]


def _is_reserved(name: str) -> bool:
    return name in RESERVED_NAMES or name.startswith(PRIVATE_PREFIX)


def reserved_bindings(code: str, extra: tuple[str, ...] = ()) -> list[Binding]:
    """The module-level bindings in ``code`` that would rebind a helper or private name
    (or one of ``extra``: ``search_tools``/``describe`` of a large catalog, issue 19)."""
    return [b for b in module_bindings(code) if _is_reserved(b.name) or b.name in extra]


_HOW = {
    "assign": "assigns to",
    "def": "defines a function named",
    "class": "defines a class named",
    "import": "imports a name as",
    "for": "uses as a loop variable",
    "with": "binds with 'as'",
    "except": "binds with 'except ... as'",
    "match": "captures in a match pattern",
    "global": "declares global",
}
# A private name anywhere in a snippet's text (not inside a longer identifier).
_PRIVATE_USE = re.compile(rf"(?<!\w){PRIVATE_PREFIX}\w*")


def check_reserved(code: str, extra: tuple[str, ...] = ()) -> str | None:
    """Why ``code`` may not run, or None: it rebinds a helper at module level, or it
    names a private ``_asyncai_`` name anywhere (a binding is told first).

    The message names the helper, the line, and another name to use instead.
    ``extra``: more helper names, here only (the search helpers of a large catalog).
    """
    hits = reserved_bindings(code, extra)
    if not hits:
        used = _PRIVATE_USE.search(code) if PRIVATE_PREFIX in code else None
        if used is None:
            return None
        return _private(code.count("\n", 0, used.start()) + 1, "uses the name", used.group())
    b = hits[0]
    if b.name.startswith(PRIVATE_PREFIX):
        return _private(b.line, _HOW[b.kind], b.name)
    helpers = RESERVED_NAMES if b.name in RESERVED_NAMES else extra
    return (
        f"run_code rejected this snippet before running it: line {b.line} {_HOW[b.kind]} "
        f"'{b.name}', which is a built-in helper ({', '.join(helpers)}); rebinding it "
        f"would break later snippets. Use another name, e.g. '{b.name}_'."
    )


def _private(line: int, how: str, name: str) -> str:
    return (
        f"run_code rejected this snippet before running it: line {line} {how} "
        f"'{name}'; names starting with '{PRIVATE_PREFIX}' are reserved for asyncai. "
        "Use another name."
    )
