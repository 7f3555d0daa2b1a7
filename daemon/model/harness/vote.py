"""Self-consistency for short answers: a second sample, and a third to break a tie.

A 1.5B model's first snippet is often right, but when it is wrong it is
wrong in one reading of the question (a filter dropped, a bound misread);
a second sample, drawn warmer from the same question, reads it again.
When the two results agree the answer stands; when they differ, a third
sample decides by majority, and with no majority the first (the coldest)
stands. Only results that are cheap to compare take part: a number, a
short string, a short list or a small flat dict (:func:`vote_key`).

Off by default (``[model] answer_samples = 1``): on the 20-question bench
(2026-11-30) it changed no outcome and cost 36 more snippets, and on all 50
held-out questions (r34, 2026-12-03, ``answer_samples = 3``) it voted on 33 and
changed no outcome, at 1.41x the median question's seconds. It stays an opt-in
for endpoints whose second reading differs more than the 1.5B model's does.

Pure: the loop (``daemon.model.harness.blocks``) draws and runs the samples; this
module says which results are comparable, whether they agree, and which
snippets may run again at all (:func:`may_rerun`: one that names a
mutating function never does, since a vote must not repeat a side effect).
"""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from daemon.model.harness.rules import on

__all__ = [
    "MAX_VOTE_SAMPLES",
    "REREAD",
    "VOTE_TEMPERATURE",
    "majority",
    "may_rerun",
    "vote_key",
    "vote_samples",
]

VOTE_TEMPERATURE = 0.8  # warmer than a retry: the point is another reading
#: Added to the question for a sample: a second reading, not a second copy.
REREAD = (
    "Before writing the code, read the question again word by word: the code must "
    "compute exactly what it asks for, with every count, bound and filter it names."
)
MAX_VOTE_SAMPLES = 3  # samples in all, the first one included
_MAX_ATOMS = 40  # a longer list is data, not an answer to vote on
_MAX_TEXT = 200


def vote_samples(configured: int) -> int:
    """The samples a short answer is voted on, the first included: ``[model]
    answer_samples`` up to :data:`MAX_VOTE_SAMPLES`; 1 (no vote) with rule ``vote`` off.
    The rule is asked only where the setting draws more than one (where it can act)."""
    return min(configured, MAX_VOTE_SAMPLES) if configured > 1 and on("vote") else 1


def vote_key(result: str) -> str | None:
    """A canonical form of a snippet's result text for comparing samples, or None
    when the result is not a short answer (long data, an error, nothing).

    Numbers compare by value (``3`` and ``3.0`` agree), strings without case
    or surrounding space, lists as multisets of their scalar items, small
    dicts by their scalar values.
    """
    text = result.strip()
    if not text or text.startswith("("):  # "(empty result…)", "(no output…)"
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    atom = _atom(value)
    if atom is not None:
        return atom
    if isinstance(value, list) and 0 < len(value) <= _MAX_ATOMS:
        atoms = [_flat(v) for v in value]
        if all(a is not None for a in atoms):
            return "list:" + json.dumps(sorted(a for a in atoms if a is not None))
    if isinstance(value, dict) and 0 < len(value) <= 12:
        flat = _flat(value)
        return None if flat is None else "dict:" + flat
    return None


def _atom(value: object) -> str | None:
    if isinstance(value, bool):
        return f"bool:{value}"
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            return None
        return f"num:{round(number, 6):g}"
    if isinstance(value, str) and len(value) <= _MAX_TEXT:
        return "str:" + " ".join(value.split()).casefold()
    return None


def _flat(value: object) -> str | None:
    """A scalar, or a dict of scalars (keys dropped: samples name fields
    differently), as a comparable string; None for anything deeper."""
    atom = _atom(value)
    if atom is not None or value is None:
        return atom or "none"
    if isinstance(value, dict) and 0 < len(value) <= 12:
        parts = [_atom(v) if v is not None else "none" for v in value.values()]
        if all(p is not None for p in parts):
            return "{" + ",".join(sorted(p for p in parts if p is not None)) + "}"
    return None


def majority(keys: Sequence[str | None]) -> int:
    """The index of the sample whose key most samples share; ties (and no
    comparable key at all) go to the earliest such sample."""
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 0
    best = max(counts.values())
    for i, key in enumerate(keys):
        if key is not None and counts[key] == best:
            return i
    return 0


def may_rerun(code: str, mutating: Iterable[str]) -> bool:
    """Whether ``code`` may be run as an extra sample: it parses and names none
    of the ``mutating`` functions (called, aliased or passed along)."""
    names = frozenset(mutating)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            return False
        if isinstance(node, ast.Attribute) and node.attr in names:
            return False
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return False  # getattr-style lookups by name
    return True
