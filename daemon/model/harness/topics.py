"""Which function a question is about, when a failed snippet called another one.

Asked "in kcp workspace root:shop, which pod has the most restarts?", a 1.5B
model calls ``list_workspaces(workspace='root:shop')`` first, every time at
temperature 0: the question's "workspace" matches the function's name. The
workspaces hold no pods; its snippets fail on keys, or come back empty, and
it calls the same function in every retry, whatever the error says.

The catalog says which function is about what: each function's stub (its
name, description, parameters, example and result fields) has words. After a
failed (or empty) snippet, :func:`topic_hint` compares the question's words
with them. When another function's stub covers at least :data:`MIN_GAIN`
more of the question's words than every function the snippet called (pod,
container, restart; where list_workspaces covers only kcp, workspace and
root), the hint names those words and writes that function's example out,
with the argument values the snippet already passed for the same parameters,
and the retry request asks for a block that starts with that call: shown the
hint in the middle of the feedback and asked to use "the keys shown above",
the model wrote ``list_workspaces`` first again.

Deterministic, no second model, and nothing of any question in it: only the
catalog's own text.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from daemon.code_mode.catalog import Catalog
from daemon.model.harness.fields import entry_hidden_paths
from daemon.model.harness.rules import kept

__all__ = [
    "MIN_GAIN",
    "URL",
    "Topic",
    "catalog_topics",
    "question_words",
    "topic_hint",
    "words",
]

# How many more of the question's words the other function must cover: one is noise
# (a date question matched get_current_time's day_of_week by "day").
MIN_GAIN = 2

_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])")
URL = re.compile(r"https?://\S+")  # a web address in a question (examples.py too)
_NAMED = re.compile(r"\S*[-:_/\d]\S*")
_EXAMPLE = re.compile(r"^\s*Example:\s*(.+)$", re.MULTILINE)
_STRING = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
# words that say nothing about which data a question is about
_STOP_WORDS = (
    "the and for are was were has have had how many much what which who whom whose "
    "when where why with without from into over under than that this these those "
    "there their them they its any all each every some most least more less one two "
    "does did not our your you can could would should will shall may might must also "
    "only just give tell show list find get return returns value values example args "
    "default none true false str int bool dict any"
)
_STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class Topic:
    """What a catalog function is about: its stub's words, an example call (its
    stub's, else its required arguments as ``...``), the number of those."""

    words: frozenset[str]
    example: str
    required: int


def _stem(word: str) -> str:
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> frozenset[str]:
    """The content words of ``text``, stemmed: camelCase and snake_case split, stop
    words and words under three letters left out."""
    found = (_stem(w) for w in _WORD.findall(text))
    return frozenset(w for w in found if len(w) >= 3 and w not in _STOP)


def question_words(question: str) -> frozenset[str]:
    """The words of a question, without its URLs and names (``api-2``, ``root:shop``,
    ``LOG_LEVEL``): they name a place or a thing, not what the question is about."""
    return words(_NAMED.sub(" ", URL.sub(" ", question)))


@functools.lru_cache(maxsize=4)
def catalog_topics(catalog: Catalog) -> dict[str, Topic]:
    """Each catalog function's :class:`Topic`, in the catalog's order: the words of its
    stub and of the result fields its sketch cuts short (a pod's ``restartCount``).

    Cached by the catalog itself (about 0.9 ms for the bundled kcp, ``http_get`` and
    time tools, at every run's start otherwise): a changed catalog is a new object
    (:class:`~daemon.code_mode.offer.ToolOffer` rebuilds it), so a hit is never stale.
    Callers must not change the dict.
    """
    out = {}
    for name, entry in catalog.entries.items():
        stub = "\n".join([entry.stub(), *entry_hidden_paths(entry)])
        match = _EXAMPLE.search(stub)
        if match:  # an example's string values are illustrations ("web-1"), not its topic
            example = match.group(1).strip()
            text = f"{stub[: match.start()]}{stub[match.end() :]}\n{_STRING.sub(' ', example)}"
        else:  # the call with its required arguments to fill in
            needed = [p.py_name for p in entry.params if p.required]
            example, text = f"await {name}({', '.join(f'{p}=...' for p in needed)})", stub
        out[name] = Topic(words(text), example, len(entry.required))
    return out


def _called(code: str, functions: Mapping[str, Topic]) -> tuple[list[str], dict[str, Any]]:
    """The catalog functions ``code`` calls, in order, and the constant keyword
    arguments it passes them."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return [], {}
    called: list[str] = []
    passed: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id in functions:
            if node.func.id not in called:
                called.append(node.func.id)
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Constant):
                    passed.setdefault(kw.arg, kw.value.value)
    return called, passed


def _with_arguments(example: str, passed: Mapping[str, Any]) -> str:
    """``example`` with the values the snippet passed for the same keyword arguments."""
    try:
        tree = ast.parse(example)
    except SyntaxError:
        return example
    changed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is not None and kw.arg in passed and isinstance(kw.value, ast.Constant):
                    kw.value = ast.Constant(passed[kw.arg])
                    changed = True
    return ast.unparse(tree) if changed else example


def topic_hint(question: str, code: str, functions: Mapping[str, Topic]) -> tuple[str, str] | None:
    """For a failed snippet: the function the question is about, when the snippet
    called none like it, as the hint and the call a new snippet should start with;
    None when the snippet's functions cover the question as well. Rule ``topic-hint``."""
    return kept("topic-hint", _topic_hint(question, code, functions), None)


def _topic_hint(question: str, code: str, functions: Mapping[str, Topic]) -> tuple[str, str] | None:
    called, passed = _called(code, functions)
    if not called:
        return None
    asked = question_words(question)
    covered = set().union(*(asked & functions[name].words for name in called))
    # the most of the question's words first, then the fewest required parameters
    # (a listing before a lookup by name), then the catalog's own order
    ranked = sorted(
        (-len((asked & topic.words) - covered), topic.required, index, name)
        for index, (name, topic) in enumerate(functions.items())
        if name not in called
    )
    if not ranked or -ranked[0][0] < MIN_GAIN:
        return None
    best = [r for r in ranked[:2] if r[:2] == ranked[0][:2]]  # a tie shows both
    about = ", ".join(sorted((asked & functions[best[0][3]].words) - covered))
    calls = [_with_arguments(functions[name].example, passed) for *_, name in best]
    found = " or ".join(name for *_, name in best)
    hint = (
        f"Hint: my question is about {about}, and {', '.join(called)} "
        f"{'does' if len(called) == 1 else 'do'} not return those. {found} "
        f"{'does' if len(best) == 1 else 'do'}, for example: {' or '.join(calls)}"
    )
    return hint, calls[0]
