"""The look at a snippet's variables, as data: paths, what each holds, and its text (pure).

The sandbox (:func:`~daemon.model.harness.peek.peek_code`) walks the
variables and returns one record per line of the look; :func:`read_look`
makes them a :class:`Look`, whose :meth:`Look.render` is the text the model
is shown. The rules that read the look (``keys``, ``loopfix``) read these
values, never that text: a path is its steps, a key is a key, and a sample
(a value's ``repr``, computed in the sandbox) is shown as it was written.

The lines, as the model reads them::

    pods['kind'] == 'List'                               a value (Value)
    len(pods['items']) == 12                             a list (Length)
    r['body'] is a str of 5 lines (text, not parsed)     text (TextSize)
    r['body'].splitlines()[:3] == ['item,stock', ...]    its first lines (TextStart)
    r['note'][:80] == 'a long str...'                    a long str's start (Prefix)
    r['json']: has 'components'                          after a KeyError (Holds)
    pods['items']: 10 of 12 items have ['status']['containerStatuses'] (a list)
                                                         after a KeyError (Counted)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Counted",
    "Entry",
    "Holds",
    "Length",
    "Look",
    "Path",
    "Prefix",
    "Step",
    "TextSize",
    "TextStart",
    "Value",
    "read_look",
]


@dataclass(frozen=True)
class Step:
    """One step of a path: a key of a dict, or a list's first item."""

    shown: str  # as the path writes it: the key's repr (the sandbox's), or 0 for a first item
    key: str | None  # the str key it reads; None for a first item or a key of another type

    def __str__(self) -> str:
        return f"[{self.shown}]"


@dataclass(frozen=True)
class Path:
    """Where a value sits: a variable and the steps down to it."""

    root: str
    steps: tuple[Step, ...] = ()

    def __str__(self) -> str:
        return self.root + "".join(map(str, self.steps))

    def up(self, n: int = 1) -> Path:
        """This path less its last ``n`` steps."""
        return Path(self.root, self.steps[: len(self.steps) - n])


@dataclass(frozen=True)
class Value:
    """A value the look shows whole: ``path == sample`` (``{}`` for an empty dict)."""

    path: Path
    sample: str  # the sandbox's repr of it

    def line(self) -> str:
        return f"{self.path} == {self.sample}"


@dataclass(frozen=True)
class Length:
    """A list (or tuple) and how many items it has; its first item follows."""

    path: Path
    items: int

    def line(self) -> str:
        return f"len({self.path}) == {self.items}"


@dataclass(frozen=True)
class TextSize:
    """A str of several lines: text, not parsed data."""

    path: Path
    lines: int

    def line(self) -> str:
        return f"{self.path} is a str of {self.lines} lines (text, not parsed)"


@dataclass(frozen=True)
class TextStart:
    """The first lines of a text (at most 3, each cut at 80 characters)."""

    path: Path
    sample: str  # the sandbox's repr of the list of them

    def line(self) -> str:
        return f"{self.path}.splitlines()[:3] == {self.sample}"


@dataclass(frozen=True)
class Prefix:
    """The first 80 characters of a long str."""

    path: Path
    sample: str  # the sandbox's repr of them

    def line(self) -> str:
        return f"{self.path}[:80] == {self.sample}"


@dataclass(frozen=True)
class Holds:
    """After a KeyError: a dict outside a list that holds the key."""

    path: Path
    key: str
    shown: str  # the sandbox's repr of the key

    def line(self) -> str:
        return f"{self.path}: has {self.shown}"


@dataclass(frozen=True)
class Counted:
    """After a KeyError: a list whose items hold the key, and how many of them do."""

    path: Path  # the list
    have: int
    total: int
    rel: tuple[Step, ...]  # from an item to the key, the key last
    kind: str  # of the first value found: 'a list', 'a dict', 'a str', 'a number', 'a bool', 'None'

    def line(self) -> str:
        shown = "".join(map(str, self.rel))
        return f"{self.path}: {self.have} of {self.total} items have {shown} ({self.kind})"


Entry = Value | Length | TextSize | TextStart | Prefix | Holds | Counted


@dataclass(frozen=True)
class Look:
    """What a failed (or empty-handed) snippet's variables hold, as the sandbox found it."""

    #: for each variable looked at, in order, its lines (none: nothing shallow enough)
    variables: tuple[tuple[Entry, ...], ...]
    #: after a KeyError, for each variable that has any, its Holds and Counted lines
    counts: tuple[tuple[Entry, ...], ...] = ()

    def entries(self) -> Iterator[Entry]:
        """Every line's entry, in the order the look shows them."""
        for group in (*self.variables, *self.counts):
            yield from group

    def render(self) -> str:
        """The look as the model reads it, one entry a line (a variable with nothing to
        show leaves an empty line, as the sandbox printed it)."""
        groups = [*self.variables, *(g for g in self.counts if g)]
        text = "".join("\n".join(e.line() for e in g) + "\n" for g in groups)
        return text.rstrip("\n")


def read_look(value: Any) -> Look | None:
    """The look from the sandbox's records (``[variables, counts]``), or None when they are
    not records or show nothing."""
    try:
        variables, counts = value
        look = Look(
            tuple(tuple(map(_entry, group)) for group in variables),
            tuple(tuple(map(_entry, group)) for group in counts),
        )
    except (TypeError, ValueError, KeyError):
        return None
    return look if look.render().strip() else None


def _steps(raw: Any) -> tuple[Step, ...]:
    steps = []
    for shown, key in raw:
        if not isinstance(shown, str) or not (key is None or isinstance(key, str)):
            raise ValueError("a step is [shown, key]")
        steps.append(Step(shown, key))
    return tuple(steps)


def _str(x: Any) -> str:
    if not isinstance(x, str):
        raise ValueError("expected a str")
    return x


def _int(x: Any) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise ValueError("expected an int")
    return x


def _entry(record: Any) -> Entry:
    """One record of the sandbox's look (see ``peek.py``) as its entry."""
    kind, root, steps, *rest = record
    path = Path(_str(root), _steps(steps))
    if kind == "value":
        (sample,) = rest
        return Value(path, _str(sample))
    if kind == "len":
        (items,) = rest
        return Length(path, _int(items))
    if kind == "text":
        (lines,) = rest
        return TextSize(path, _int(lines))
    if kind == "lines":
        (sample,) = rest
        return TextStart(path, _str(sample))
    if kind == "start":
        (sample,) = rest
        return Prefix(path, _str(sample))
    if kind == "has":
        shown, key = rest
        return Holds(path, _str(key), _str(shown))
    if kind == "counted":
        have, total, rel, found = rest
        return Counted(path, _int(have), _int(total), _steps(rel), _str(found))
    raise ValueError(f"unknown record {kind!r}")
