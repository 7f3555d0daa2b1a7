"""The question set's pure core: templates, their instances, the world they read, the split.

A *template* is a question with its data left open. Instantiated over a
*world* (the data one seed generated: names, values, sizes and order change
with the seed), it gives a *case*: the prompt, the expected answer as text,
and a checker that holds the reply against values computed from that world,
never against a literal. The split is fixed by the sha256 of the template id,
so nobody chooses which questions the harness may be tuned on.

Nothing here does I/O; the world's files and servers are ``world.py``'s.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The servers every question is asked with, all connected at once.
SERVERS = ("kcp", "simple", "time", "fetch", "git", "sqlite")

#: The shapes of question the set covers (a template names one).
SHAPES = (
    "count",  # count with a filter
    "argmax",  # argmax / argmin
    "group",  # group by
    "join",  # a join across two tools
    "pages",  # following pagination links
    "text",  # parsing text: git log, CSV, HTML turned into markdown
    "time",  # dates and time zones
    "arithmetic",  # no tool
    "none",  # an empty or "none" answer
    "two-hop",  # a list, then each item's URL
    "unanswerable",  # no tool can answer it: the right reply says so
)

SPLITS = ("dev", "held-out")


def split_of(template_id: str) -> str:
    """``dev`` or ``held-out``: the low bit of the first byte of the id's sha256."""
    return SPLITS[hashlib.sha256(template_id.encode()).digest()[0] & 1]


@dataclass
class World:
    """One seed's data, as the servers serve it.

    ``build`` functions of the data modules fill it: each writes its files
    (kubectl fixtures, the git repository, the SQLite database) under its
    path, or adds pages to ``http_files``, and keeps the generated data (the
    source of every expected answer) under its name in ``data``.
    """

    seed: int
    root: Path  # this seed's temporary directory
    base_url: str  # the loopback HTTP server, e.g. "http://127.0.0.1:8000" (no trailing /)
    kcp_fixtures: Path  # the directory the fake kubectl reads (root / "fixtures")
    repo: Path  # the git repository (root / "repo")
    db: Path  # the SQLite database (root / "shop.db")
    http_files: dict[str, tuple[str, str]] = field(default_factory=dict)  # path: (type, body)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """One template instantiated over one world."""

    text: str  # the prompt, as a user would write it
    answer: str  # the expected answer, for the report
    check: Callable[[str], bool]  # the reply holds the answer
    no_data: bool = False  # the right reply states no data (unanswerable, or none)


@dataclass(frozen=True)
class Template:
    """A question whose data the world fills in."""

    id: str  # stable and unique, e.g. "kcp.count-failed-pods"; its sha256 picks the split
    shape: str  # one of SHAPES
    servers: tuple[str, ...]  # the servers its answer needs (all are connected anyway)
    make: Callable[[World], Case]

    @property
    def split(self) -> str:
        return split_of(self.id)


# ---- checkers: facts a reply must state, computed by the template from its world -----------


def _number_pattern(value: float | int, decimals: int | None = None) -> list[str]:
    """Ways a reply may write ``value``: 1234, 1,234, 1234.0, 1234.50 (rounded to ``decimals``)."""
    if isinstance(value, int) or float(value).is_integer():
        n = int(value)
        plain = str(n)
        grouped = f"{n:,}"
        forms = {plain, grouped, f"{plain}.0", f"{plain}.00"}
    else:
        places = 2 if decimals is None else decimals
        rounded = round(float(value), places)
        forms = {f"{rounded:.{places}f}", f"{rounded:,.{places}f}"}
        forms |= {f.rstrip("0").rstrip(".") for f in list(forms)}
    return sorted(forms, key=len, reverse=True)


def has_number(reply: str, value: float | int, decimals: int | None = None) -> bool:
    """Whether ``reply`` states ``value`` as a number of its own (not a digit run inside
    another number)."""
    for form in _number_pattern(value, decimals):
        if re.search(rf"(?<![\d.,]){re.escape(form)}(?![\d]|[.,]\d)", reply):
            return True
    return False


def has_words(reply: str, *words: str) -> bool:
    """Whether every one of ``words`` appears in ``reply`` (case-insensitive, whole words)."""
    return all(
        re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", reply, re.IGNORECASE) for w in words
    )


def lacks_words(reply: str, *words: str) -> bool:
    """Whether none of ``words`` appears in ``reply``."""
    return not any(
        re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", reply, re.IGNORECASE) for w in words
    )


def exactly(reply: str, wanted: Iterable[str], others: Iterable[str]) -> bool:
    """Every name of ``wanted`` is stated and no name of ``others`` (the candidates that
    are not the answer)."""
    return has_words(reply, *wanted) and lacks_words(reply, *others)


_NONE = re.compile(
    r"\b(none|no one|nobody|nothing|no \w+ (?:is|are|was|were|has|have|had|match|matches)|"
    r"there (?:is|are|were|was) no|zero|0 \w+|not any|empty)\b",
    re.IGNORECASE,
)
_CANNOT = re.compile(
    r"\b(can ?not|can't|could ?not|couldn't|unable|not able|"
    r"no (?:tool|function|way|access|data|information)|"
    r"do(?:es)? not (?:have|provide|offer|expose|know)|don't (?:have|know)|not available|"
    r"isn't available|no available|impossible|not possible)\b",
    re.IGNORECASE,
)


def says_none(reply: str) -> bool:
    """Whether ``reply`` says that nothing matches (an empty or "none" answer)."""
    return _NONE.search(reply) is not None


def says_cannot(reply: str) -> bool:
    """Whether ``reply`` says that the question cannot be answered with what it has."""
    return _CANNOT.search(reply) is not None


def number_case(text: str, n: int | float) -> Case:
    """A question whose answer is the number ``n`` (a count, a sum): the reply must state it."""
    return Case(text, str(n), lambda reply: has_number(reply, n))
