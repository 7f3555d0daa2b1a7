"""Looks at variables written as the model reads them, as data (a test's fixtures).

The harness's rules read a :class:`~daemon.model.harness.look.Look`; the tests
write one as the text it renders to, which reads best. :func:`as_look` builds
the Look back from that text (a fixture's lines are plain: keys without
brackets or `` == `` in them), and the tests check that it renders to the
same text again.
"""

from __future__ import annotations

import ast
import re

from daemon.model.harness.look import (
    Counted,
    Entry,
    Holds,
    Length,
    Look,
    Path,
    Prefix,
    Step,
    TextSize,
    TextStart,
    Value,
)

__all__ = ["as_look"]

_COUNTED = re.compile(r"^(.+): (\d+) of (\d+) items have ((?:\[.+?\])+) \((a \w+|None)\)$")
_HOLDS = re.compile(r"^(.+): has (.+)$")
_LENGTH = re.compile(r"^len\((.+)\) == (\d+)$")
_TEXT_SIZE = re.compile(r"^(.+) is a str of (\d+) lines \(text, not parsed\)$")
_TEXT_START = re.compile(r"^(.+)\.splitlines\(\)\[:3\] == (\[.*\])$")
_PREFIX = re.compile(r"^(.+)\[:80\] == (.+)$")
_VALUE = re.compile(r"^(.+?) == (.+)$")
_ROOT = re.compile(r"^\w+")
_SEGMENT = re.compile(r"\[(.+?)\]")


def _steps(text: str) -> tuple[Step, ...]:
    steps = []
    for shown in _SEGMENT.findall(text):
        key = ast.literal_eval(shown)
        steps.append(Step(shown, key if isinstance(key, str) else None))
    return tuple(steps)


def _path(text: str) -> Path:
    root = _ROOT.match(text)
    assert root is not None, text
    return Path(root.group(), _steps(text[root.end() :]))


def _entry(line: str) -> Entry:
    if m := _COUNTED.match(line):
        path, have, total, rel, kind = m.groups()
        return Counted(_path(path), int(have), int(total), _steps(rel), kind)
    if m := _HOLDS.match(line):
        return Holds(_path(m.group(1)), ast.literal_eval(m.group(2)), m.group(2))
    if m := _LENGTH.match(line):
        return Length(_path(m.group(1)), int(m.group(2)))
    if m := _TEXT_SIZE.match(line):
        return TextSize(_path(m.group(1)), int(m.group(2)))
    if m := _TEXT_START.match(line):
        return TextStart(_path(m.group(1)), m.group(2))
    if m := _PREFIX.match(line):
        return Prefix(_path(m.group(1)), m.group(2))
    m = _VALUE.match(line)
    assert m is not None, line
    return Value(_path(m.group(1)), m.group(2))


def as_look(text: str | None) -> Look | None:
    """The look that renders as ``text`` (None stays None)."""
    if text is None:
        return None
    built = Look((tuple(map(_entry, text.splitlines())),))
    assert built.render() == text, (built.render(), text)
    return built
