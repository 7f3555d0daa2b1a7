"""Worked examples in the deployment's own terms: solved (question, snippet) pairs from
the file ``[model] examples`` names, the closest one or two shown per question (pure).

A small model copies the shape of the example it is shown; one built-in
example about orders says nothing of a deployment's git logs or SQL rows.
The file holds solved questions in the deployment's own tools, and each
question gets the entries whose words are closest to its own, by a cheap
lexical similarity: the content words of both (stemmed, stop words, names and
URLs left out, as :func:`~daemon.model.harness.topics.question_words` reads
them), each shared word weighted by how rare it is among the examples
(inverse document frequency), over the example's own weight. Two dozen
examples score in well under a millisecond and need no model or new
dependency; an embedding would cost a second model in memory on 2 cores.

The file (TOML, or JSON Lines when its name ends in ``.jsonl``)::

    [[example]]
    question = "How many open orders does store north have over 100?"
    code = '''
    orders = await list_orders(store='north', status='open')
    len([o for o in items(orders) if o['total'] > 100])
    '''
    note = "The store is an argument; the filter is Python."   # optional

    {"question": "...", "code": "...", "note": "..."}         # one per line (.jsonl)

Without the file, ``[model] worked_example`` (else the built-in one) is the
one example, shown as written. Rule ``examples``: off, the file is not used.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from daemon.model.harness.rules import acts
from daemon.model.harness.topics import URL, question_words

__all__ = [
    "CHOSEN_EXAMPLES",
    "Example",
    "closest_examples",
    "foreign_calls",
    "parse_examples",
    "render_examples",
    "source_kinds",
]

CHOSEN_EXAMPLES = 2  # entries shown per question: one (r24) and three (r27) answered fewer


@dataclass(frozen=True)
class Example:
    """One solved question: what was asked, the snippet that answers it, and an
    optional note on why it is written so."""

    question: str
    code: str
    note: str = ""


def parse_examples(text: str, name: str) -> list[Example]:
    """The examples of a file's text (JSON Lines when ``name`` ends in ``.jsonl``, else
    TOML ``[[example]]`` tables); a ValueError that says what is wrong, and where."""
    if name.endswith(".jsonl"):
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((f"line {n}", json.loads(line)))
            except ValueError as exc:
                raise ValueError(f"line {n} is not JSON: {exc}") from exc
    else:
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"not valid TOML: {exc}") from exc
        tables = document.get("example")
        if not isinstance(tables, list):
            raise ValueError("no [[example]] tables")
        entries = [(f"example {n}", table) for n, table in enumerate(tables, 1)]
    examples = [_example(where, entry) for where, entry in entries]
    if not examples:
        raise ValueError("no examples")
    return examples


def _example(where: str, entry: object) -> Example:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a table or an object")
    unknown = set(entry) - {"question", "code", "note"}
    if unknown:
        raise ValueError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    values = {k: entry.get(k, "") for k in ("question", "code", "note")}
    for key, value in values.items():
        if not isinstance(value, str):
            raise ValueError(f"{where}: {key} must be text")
    if not values["question"].strip() or not values["code"].strip():
        raise ValueError(f"{where} needs a question and its code")
    return Example(values["question"].strip(), values["code"].strip("\n"), values["note"].strip())


def foreign_calls(code: str, functions: Iterable[str]) -> list[str]:
    """The bare names ``code`` calls that are none of ``functions`` (a channel's catalog and
    the helpers), no builtin, and not defined or imported by the code itself, sorted.

    An example that calls one shows the model a tool its channel does not have: in a
    daemon whose channels see different tools (issue 29), the name of a tool that
    exists only elsewhere. Code that does not parse calls nothing known: [] (it is
    shown as written, as before).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    bound = set(functions)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    return sorted(n for n in called if n not in bound and not hasattr(builtins, n))


def closest_examples(
    question: str, examples: Sequence[Example], k: int = CHOSEN_EXAMPLES
) -> list[Example]:
    """The ``k`` examples whose questions share the most (and rarest) words with
    ``question``, closest first, in file order on a tie; the first example when none
    shares a word (the model still sees how an answer looks).

    Rule ``example-source``: among those that share a word, the examples whose
    question names the same kinds of source as ``question`` (a URL, a file path, or
    neither: :func:`source_kinds`) come first. A small model copies the example
    it is shown; shown a SQL example for a question about a CSV file at a URL
    (the words of both were about revenue), it answered with the SQL.
    """
    if not examples:
        return []
    bags = [question_words(e.question) for e in examples]
    df = Counter(w for bag in bags for w in bag)
    idf = {w: math.log(1 + len(examples) / n) for w, n in df.items()}
    asked = question_words(question)
    scored = []
    for index, bag in enumerate(bags):
        shared = sum(idf[w] ** 2 for w in asked & bag)
        norm = math.sqrt(sum(idf[w] ** 2 for w in bag)) or 1.0
        if shared > 0:
            scored.append((-shared / norm, index))
    by_words = [examples[i] for _, i in sorted(scored)[:k]]
    kinds = source_kinds(question)
    same_first = sorted(scored, key=lambda s: (source_kinds(examples[s[1]].question) != kinds, s))
    by_source = [examples[i] for _, i in same_first[:k]]
    chosen = by_source if acts("example-source", by_source != by_words) else by_words
    return chosen or [examples[0]]


_PATH = re.compile(r"(?<![\w.~-])/(?:[\w.-]+/)+[\w.-]*")


def source_kinds(text: str) -> frozenset[str]:
    """The kinds of source a question names: ``url`` for a web address, ``path`` for an
    absolute file path outside one (a repository, a database file)."""
    kinds = set()
    if URL.search(text):
        kinds.add("url")
    if _PATH.search(URL.sub(" ", text)):
        kinds.add("path")
    return frozenset(kinds)


def render_examples(examples: Sequence[Example]) -> str:
    """The examples as the system message shows them: each question, its block, its note."""
    parts = [
        "Worked examples (illustrations: their functions may not be yours; your "
        "functions are the ones listed above)."
    ]
    for example in examples:
        note = f"\n{example.note}" if example.note else ""
        parts.append(f"Question: {example.question}\n```python\n{example.code}\n```{note}")
    return "\n\n".join(parts)
