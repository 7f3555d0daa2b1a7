"""The harness's prompt text: the system message, the rules and the worked example.

The system message carries the rules, the helpers and the catalog (built from
the :class:`~daemon.code_mode.catalog.Catalog` itself, never parsed back out of
the rendered ``run_code`` description), then the worked example; it depends
only on its inputs, so a server's prompt-prefix cache stays valid.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from daemon.code_mode.catalog import RESERVED_NAMES, Catalog, catalog_section, helpers_section
from daemon.model.harness.fields import hidden_fields
from daemon.model.harness.rules import acts, on

__all__ = [
    "CODE_STOP",
    "HARNESS_RULES",
    "HARNESS_SYSTEM_PROMPT",
    "HOW_TO_ANSWER",
    "MAX_FAILED_SNIPPETS",
    "RETRY_TEMPERATURE",
    "WORKED_EXAMPLE",
    "Signature",
    "catalog_signatures",
    "compact_description",
    "echoes_example",
    "retry_seed",
    "system_prompt",
    "warm_retry",
]

HARNESS_SYSTEM_PROMPT = """\
You are asyncai, an assistant that answers questions in a chat channel. You find \
answers by writing Python that runs in a sandbox (the run_code tool), where the \
functions listed below call the real tools. Reply to a question with one ```python \
block; its result comes back to you, and then you answer in words. The functions are \
already defined: never define them yourself, never import them, and never use other \
libraries (such as kubernetes or requests) to get data."""

HARNESS_RULES = """\
Rules for the code:
- Python 3, run at the top level of a REPL: use `await` directly.
- The functions listed below are async: call them with `await` and keyword arguments. \
They return dicts; lists of objects are under "items" (items(x) returns that list).
- End the code with an expression: its value is the result you get back.
- `asyncio`, `json` and `re` are imported; other standard modules can be imported. No \
third-party packages, files, network or subprocesses: only the functions below reach out.
- A function whose tool fails raises RuntimeError; a failed snippet comes back as its \
traceback: then fix it."""

#: What every worked example is shown after: how an answer looks.
HOW_TO_ANSWER = """\
How to answer: reply with one ```python block that calls the functions above with \
`await` and keyword arguments, filters the data in Python, and ends with an expression \
that holds the answer. Put each statement on its own line."""

# the worked example's question and its fetch, the same in both plans
_EXAMPLE_FETCH = """

Worked example (only an illustration: list_orders is not one of your functions).
Question: in store north, which open orders are over 100, with their totals?
```python
orders = await list_orders(store='north', status='open')
"""

WORKED_EXAMPLE = (
    HOW_TO_ANSWER
    + _EXAMPLE_FETCH
    + """big = [o for o in items(orders) if o['total'] > 100]
[{'id': o['id'], 'total': o['total']} for o in big]
```
The question names the store, and asks about orders: so the code lists the orders, \
passing the store as an argument."""
)

_WORD = re.compile(r"\w+")
_ECHO_WORDS = 6


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.casefold())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


_EXAMPLE_NGRAMS = _ngrams(WORKED_EXAMPLE, _ECHO_WORDS)


def echoes_example(reply: str, example: str = WORKED_EXAMPLE) -> bool:
    """Whether a reply repeats six words in a row of the example the system message
    showed (:data:`WORKED_EXAMPLE`, ``[model] worked_example`` or the chosen examples).

    Asked for its answer after an empty result, a 1.5B model retold the worked
    example's closing sentence ("The question names the store, and asks about
    pods: ..."): that is no answer, and the result is quoted instead. Rule
    ``echo-check``.
    """
    shown = _EXAMPLE_NGRAMS if example == WORKED_EXAMPLE else _ngrams(example, _ECHO_WORDS)
    return acts("echo-check", not _ngrams(reply, _ECHO_WORDS).isdisjoint(shown))


# Generation stops after the code block's closing fence: what a small model writes
# after it (explanations, invented results) only costs time.
CODE_STOP = "\n```\n"

# A failed snippet is tried again with a little randomness: at temperature 0 a small
# model resends the very same snippet. After this many failures it answers instead.
RETRY_TEMPERATURE = 0.7
MAX_FAILED_SNIPPETS = 3


def retry_seed(messages: list[dict[str, Any]]) -> int:
    """The sampling seed of a retry: a hash of the messages it sends (a vote's sample
    adds its draw to it, since every sample of one vote sends the same messages).

    llama.cpp's server draws every request from one random stream, so a change
    anywhere earlier (another question's retry) turned a later retry right or
    wrong over the very same prompt. Seeded by its prompt, the same retry draws
    the same snippet: a run can be repeated, and a lever judged on one run.
    """
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")


def warm_retry(body: dict[str, Any], configured: float | None) -> None:
    """Sample a retry's request ``body`` warmer than greedy, seeded by its messages
    (:func:`retry_seed`): at temperature 0 a small model resends the failed snippet.
    Rule ``warm-retry``; off, the retry is sampled like the first snippet."""
    if not on("warm-retry"):
        return
    body["temperature"] = max(configured or 0.0, RETRY_TEMPERATURE)
    body.setdefault("seed", retry_seed(body["messages"]))


#: The helpers a small model's description lists: all but parse_records. Listed, the
#: 1.5B model called it on results it does not fit, and answered 4 of the first 13
#: held-out questions where main answers 8 (r25, 2026-12-03); shown only in the look
#: at a failed snippet's text, it gained none of 10 and lost 2 (r26).
SMALL_MODEL_HELPERS = tuple(n for n in RESERVED_NAMES if n != "parse_records")


def compact_description(catalog: Catalog) -> str:
    """The run_code description cut down for a small model: :data:`HARNESS_RULES`, then
    the helpers and the catalog of functions (what is specific to this deployment),
    word for word as the full description has them.

    The full description (sandbox rules, return contract, limits) is about 2 500
    tokens before the catalog: a minute of prompt processing on 2 cores, and
    more than a 1.5B model keeps track of. Result fields the ``Returns:``
    sketches cut short follow as access paths (:func:`hidden_fields`). A
    catalog over ``code_mode.catalog_budget`` is the same index of names, with
    ``search_tools`` and ``describe``, as the full description has.
    """
    sections = f"{helpers_section(SMALL_MODEL_HELPERS)}\n{catalog_section(catalog)}"
    # a searchable catalog (issue 19) shows no Returns: lines for fields to complete
    fields = "" if catalog.searchable or not on("hidden-fields") else hidden_fields(catalog)
    fields = f"\n\n{fields}" if fields else ""
    return f"{HARNESS_RULES}\n\n{sections.strip()}{fields}"


Signature = tuple[frozenset[str], frozenset[str]]  # (keyword parameters, required ones)


def catalog_signatures(catalog: Catalog) -> dict[str, Signature]:
    """The keyword parameters of each catalog function, and the required ones."""
    return {
        name: (
            frozenset(p.py_name for p in entry.params),
            frozenset(p.py_name for p in entry.params if p.required),
        )
        for name, entry in catalog.entries.items()
    }


def system_prompt(base: str, run_code_description: str, example: str = WORKED_EXAMPLE) -> str:
    """The system message: ``base``, the run_code rules and catalog, then the worked example.

    llama-cpp-python shows tool descriptions to the model only as JSON inside
    its template (or not at all with ``chatml-function-calling``); the system
    message always arrives as plain text. It depends only on its inputs, so
    the server's prompt-prefix cache stays valid from run to run.
    """
    return f"{base.rstrip()}\n\n# run_code\n\n{run_code_description.strip()}\n\n{example.strip()}"
