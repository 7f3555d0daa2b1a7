"""Search instead of a wall of stubs (issue 19): the index, ``search_tools`` and ``describe``.

Pure functions of the :class:`~daemon.code_mode.catalog.Catalog`, no I/O.
When the rendered stubs are over ``code_mode.catalog_budget`` characters
(``Catalog.searchable``), the ``run_code`` description lists each function
by name and one line (:func:`index_lines`), and the sandbox gets two
functions, answered by the host from the catalog (``engine``):

- ``search_tools(query, limit=10)``: the functions that best match
  ``query``, best first, as ``"name: summary"`` strings (:func:`search`);
- ``describe(name)``: the function's full stub, arguments and return type
  and the ``Returns:`` (or ``Returns (observed):``) shape (:func:`describe`).
  ``name`` may be a ``search_tools`` line: the part before ``:`` is the name.

The ranking is deterministic, no model: the query and each function are cut
into words (lower case, split at anything not a letter or digit and at
``camelCase`` humps, a trailing ``s`` dropped from words over 3 letters). Each
word of the query scores, per function, 6 when it is a word of the
function's name, 4 of an argument's name, 2 of the description; half that
(3, 2, 1) when one word starts with the other (both at least 3 letters),
e.g. ``deploy`` and ``deployment``. A function's score is the sum over the
query's distinct words and the three fields; functions that score 0 are
left out, ties go by name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

from pydantic_monty import ExcType, ExternalResult

from daemon.code_mode.catalog.catalog import CallRejected, Catalog, CatalogEntry
from daemon.code_mode.convert import sandbox_text

__all__ = [
    "DESCRIBE",
    "SEARCH_HELPERS",
    "SEARCH_LIMIT",
    "SEARCH_TOOLS",
    "SUMMARY_CHARS",
    "call_helper",
    "describe",
    "helper_result",
    "index_lines",
    "is_helper",
    "search",
    "summary",
    "words",
]

SEARCH_TOOLS = "search_tools"
DESCRIBE = "describe"
SEARCH_HELPERS = (SEARCH_TOOLS, DESCRIBE)
SEARCH_LIMIT = 10
SUMMARY_CHARS = 100

# (exact, prefix) points of a query word found in each field
_NAME, _ARGS, _TEXT = (6, 3), (4, 2), (2, 1)
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """The search words of ``text`` (see the module docstring)."""
    out = set()
    for word in _WORD.findall(_HUMP.sub(r"\1 \2", text).lower()):
        out.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return out


def summary(entry: CatalogEntry) -> str:
    """The first line of the tool's description, at most :data:`SUMMARY_CHARS` characters."""
    for line in entry.definition.description.splitlines():
        flat = " ".join(line.split())
        if flat:
            return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"
    return "(no description)"


def index_lines(catalog: Catalog) -> list[str]:
    """``- name: summary`` for every function, in catalog order (the description's list)."""
    return [f"- {name}: {summary(entry)}" for name, entry in catalog.entries.items()]


def _points(query: set[str], field: set[str], weights: tuple[int, int]) -> int:
    exact, prefix = weights
    score = 0
    for q in query:
        if q in field:
            score += exact
        elif len(q) >= 3 and any(
            len(w) >= 3 and (w.startswith(q) or q.startswith(w)) for w in field
        ):
            score += prefix
    return score


def _fields(entry: CatalogEntry) -> tuple[set[str], set[str], set[str]]:
    args: set[str] = set()
    for p in entry.params:
        args |= words(p.py_name)
    name = words(entry.py_name) | words(entry.tool_name)
    return name, args, words(entry.definition.description)


def search(catalog: Catalog, query: str, limit: int = SEARCH_LIMIT) -> list[str]:
    """The ``"name: summary"`` lines of the best matches for ``query``, best first."""
    wanted = words(query)
    scored = []
    for name, entry in catalog.entries.items():
        name_words, arg_words, text_words = _fields(entry)
        score = (
            _points(wanted, name_words, _NAME)
            + _points(wanted, arg_words, _ARGS)
            + _points(wanted, text_words, _TEXT)
        )
        if score > 0:
            scored.append((-score, name, entry))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [f"{name}: {summary(entry)}" for _, name, entry in scored[:limit]]


def _lookup(catalog: Catalog, name: str) -> CatalogEntry | None:
    entry = catalog.lookup(name)
    if entry is not None:
        return entry
    for candidate in catalog.entries.values():  # the MCP name works too
        if candidate.tool_name == name:
            return candidate
    return None


def describe(catalog: Catalog, name: str) -> str:
    """The full stub of function ``name`` (or of a ``"name: summary"`` line).

    Raises :class:`CallRejected` (a ``NameError`` in the sandbox) for an
    unknown name, with the closest names.
    """
    wanted = name.split(":", 1)[0].split("(", 1)[0].strip()
    entry = _lookup(catalog, wanted)
    if entry is None:
        close = difflib.get_close_matches(wanted, list(catalog.entries), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CallRejected(
            "NameError",
            f"describe(): no function named {wanted!r}{hint} "
            f'(search_tools("words") finds functions)',
        )
    return entry.stub()


def is_helper(catalog: Catalog, name: str) -> bool:
    """Whether the sandbox name ``name`` is one of the two helpers in ``catalog``.

    Only in a searchable catalog, and a tool of the same name wins.
    """
    return name in SEARCH_HELPERS and catalog.searchable and catalog.lookup(name) is None


def _argument(
    helper: str, args: tuple, kwargs: Mapping[str, Any], names: Iterable[str], required: int
) -> list[Any]:
    """The helper's arguments by position, or :class:`CallRejected` like a stub's check."""
    order = list(names)
    if len(args) > len(order):
        raise CallRejected(
            "TypeError", f"{helper}() takes at most {len(order)} arguments ({len(args)} given)"
        )
    values: list[Any] = list(args) + [None] * (len(order) - len(args))
    given = [True] * len(args) + [False] * (len(order) - len(args))
    for key, value in kwargs.items():
        if key not in order:
            raise CallRejected(
                "TypeError",
                f"{helper}() got an unexpected keyword argument '{key}'; "
                f"accepted: {', '.join(order)}",
            )
        i = order.index(key)
        if given[i]:
            raise CallRejected("TypeError", f"{helper}() got multiple values for '{key}'")
        values[i], given[i] = value, True
    for i in range(required):
        if not given[i]:
            raise CallRejected("TypeError", f"{helper}() missing required argument '{order[i]}'")
    return values


def helper_result(
    catalog: Catalog, helper: str, args: Iterable[Any], kwargs: Mapping[str, Any]
) -> ExternalResult:
    """:func:`call_helper` as the engine answers the sandbox: the value, or the exception."""
    try:
        return {"return_value": call_helper(catalog, helper, tuple(args), kwargs)}
    except CallRejected as exc:
        # a lone surrogate (in a name the snippet passed) would fail the resume
        return {"exc_type": cast(ExcType, exc.exc_type), "message": sandbox_text(exc.message)}


def call_helper(catalog: Catalog, helper: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """The value of ``search_tools(...)`` or ``describe(...)`` in the sandbox.

    Raises :class:`CallRejected` for wrong arguments (``TypeError``) or an
    unknown function (``NameError``).
    """
    if helper == SEARCH_TOOLS:
        query, limit = _argument(helper, args, kwargs, ("query", "limit"), 1)
        if not isinstance(query, str):
            raise CallRejected("TypeError", 'search_tools() needs a str query, e.g. "pods"')
        if limit is None:
            limit = SEARCH_LIMIT
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise CallRejected("TypeError", "search_tools() limit must be a positive int")
        if not words(query):
            raise CallRejected(
                "ValueError", 'search_tools() needs words to look for, e.g. "list pods"'
            )
        return search(catalog, query, limit)
    (name,) = _argument(helper, args, kwargs, ("name",), 1)
    if not isinstance(name, str):
        raise CallRejected("TypeError", "describe() needs a function name as a str")
    return describe(catalog, name)
