"""What the harness tells a small model about a result: the answer request, the
result message, hints for a retry, and results made easier to read. Text in,
text out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from urllib.parse import urlsplit

from daemon.model.harness.look import Look
from daemon.model.harness.rules import acts, kept, on
from daemon.model.harness.vote import vote_key

__all__ = [
    "STOPPED",
    "answer_instruction",
    "error_signature",
    "failure_reply",
    "fetched_url",
    "quote_result",
    "replays_code",
    "result_message",
    "short_reply",
    "unfetched_message",
    "unfetched_url",
    "value_atoms",
]


# What the answer request asks for when the result is an error. It asks for a sentence
# of the model's own and gives none to copy: asked to "say that you could not find out,
# and why", a 1.5B model replied "I could not find out, and why."
STOPPED = "one sentence saying what stopped you"


def answer_instruction(question: str, source: str = "the result above") -> str:
    """The user line that asks for the answer: from the result, in words, no code."""
    return (
        f"Answer my question now, using {source}. My question was:\n"
        f"{question.strip()}\n"
        "Reply in one to three plain sentences that state every name and number from the "
        "result. Do not write code and do not describe the code. If the result is empty, "
        f"say that nothing matched; if it is an error, write {STOPPED}."
    )


_RESULT_SHOWN = 6_000  # characters of a result repeated in the answer request


def _cut(result: str) -> str:
    """``result`` as a message repeats it: its first :data:`_RESULT_SHOWN` characters."""
    return result if len(result) <= _RESULT_SHOWN else result[:_RESULT_SHOWN] + " …"


def result_message(
    result: str,
    question: str,
    *,
    failed: bool,
    retry: bool,
    look: Look | None = None,
    start: str | None = None,
) -> str:
    """The user message that carries a run_code result back in the code-block protocol.

    It follows the question directly: the failed attempt is not replayed as an
    assistant turn, since a small model copies its own last code verbatim (it
    sent the same failing snippet three times, even at temperature 0.7). A
    failure that may be retried asks for a new block; otherwise the result
    comes with the request to answer the (repeated) question, so the last
    thing the model reads is the data and what to do with it. ``look`` (from
    :func:`peek_code`, rendered here) shows what the snippet's variables really
    hold: a small model guesses keys, and the traceback alone does not tell it
    the right ones. ``start``: the call a new block should start with
    (:func:`~daemon.model.harness.topics.topic_hint`).
    """
    shown = _cut(result)
    seen = (
        f"\n\nWhat your variables hold now (paths and values; the first item of each "
        f"list):\n{look.render()}"
        if look is not None
        else ""
    )
    q = question.strip()
    block = f"a new ```python block that starts with {start}" if start else None
    if failed and retry:
        ask = f"Write {block} and answers" if block else "Write a new ```python block that answers"
        using = "" if block else ", using the keys shown above"
        return f"Your last attempt failed:\n{shown}{seen}\n\n{ask} my question{using}: {q}"
    if failed:
        return f"The code failed:\n{shown}\n\n{answer_instruction(question)}"
    return f"The code returned:\n{shown}\n\n{answer_instruction(question)}"


def replays_code(retry: bool) -> bool:
    """Whether the next message follows the snippet that ran, as the model's turn: always
    before the answer (it sees what it computed), never before a retry (rule
    ``retry-alone``): shown its failed code, a small model sends it again verbatim."""
    return not (retry and on("retry-alone"))


def _is_empty_result(text: str) -> bool:
    """Whether run_code returned an empty value (often a filter that matched by mistake)."""
    return text.startswith("(empty result")


_WHY_CHARS = 200  # of the last error's line, in a failure reply


def failure_reply(error: str) -> str:
    """The reply of a run none of whose snippets ran to a result: the question could
    not be answered, and why in one line (the last error's exception line,
    ``KeyError: 'items'``, else its first line).

    No data came back that the model saw, so whatever it says would be a guess:
    after three failed snippets a 1.5B model stated names and counts it never
    computed, or proposed code it never ran (rule ``failed-honest``, in
    ``daemon.model.harness.blocks``).
    """
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    why = error_signature(error) or (lines[0] if lines else "no error text")
    if len(why) > _WHY_CHARS:
        why = why[:_WHY_CHARS] + " …"
    return (
        "I could not answer this: none of the code I ran returned a result. "
        f"The last attempt ended with: {why}"
    )


_ERROR_LINE = re.compile(r"^(\w+(?:Error|Exception|Exit|Interrupt))\b:?\s*(.*)$")


def error_signature(error: str) -> str | None:
    """The exception line of a failed snippet's text (``KeyError: 'phase'``), or None.

    The last such line counts: a traceback ends with the exception, and the
    ``Hint:`` lines appended after it are not exceptions.
    """
    found = None
    for line in error.splitlines():
        m = _ERROR_LINE.match(line.strip())
        if m:
            found = f"{m.group(1)}: {m.group(2)}".rstrip(": ")
    return found


def value_atoms(result: str, limit: int = 40) -> list[str] | None:
    """The scalar values of a short result (the names and numbers an answer must state),
    or None when the result is too long to quote or holds no scalars."""
    try:
        value = json.loads(result)
    except ValueError:
        lines = [line.strip() for line in result.strip().splitlines() if line.strip()]
        return lines if 0 < len(lines) <= 10 else None
    atoms: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None:
            atoms.append(json.dumps(v) if isinstance(v, bool) else str(v))

    walk(value)
    return atoms if 0 < len(atoms) <= limit else None


_QUOTED = 600  # characters: a longer result is data, not an answer to quote


def quote_result(reply: str, result: str) -> str:
    """``reply``, with the snippet's value appended verbatim when the reply leaves out
    any of its values.

    Given five names one per line, a 1.5B model named three; asked for a count and
    the most common reason, it gave one. The value the code computed is the
    answer; the model's words only phrase it, so a value they drop is quoted.
    Rule ``quote-result``.
    """
    return kept("quote-result", _quoted(reply, result), reply)


def _quoted(reply: str, result: str) -> str:
    if len(result) > _QUOTED or _is_empty_result(result):
        return reply
    atoms = value_atoms(result)
    if not atoms:
        return reply
    said = reply.casefold()
    if all(a.casefold() in said for a in atoms):
        return reply
    return f"{reply.rstrip()}\n\nThe result of run_code: {_one_line(result)}"


def short_reply(result: str) -> str | None:
    """A good result's value as the reply, one line, when it is a short answer (a
    number, a name, a list of at most 40 of them or of small flat dicts, a small
    dict: :func:`~daemon.model.harness.vote.vote_key`); None for data, nothing,
    an empty list or a None, which the model's words must still explain.

    Serves every question whose code computes the answer itself: after such a
    result the answer round only rephrases it, a round of its own (about a
    fifth of a question's seconds with a 1.5B model on two cores), and the
    rephrasing is where a small model dropped values or invented others
    (``[model] reply_with_short_result``).
    """
    if len(result) > _QUOTED or vote_key(result) is None:
        return None
    return _one_line(result, parse_float=_decimals)


def _decimals(text: str) -> float:
    """A JSON float as the decimals it stands for: 6699.4, not 6699.400000000001 (the
    answer round's words would have rounded it)."""
    return float(f"{float(text):.12g}")


def _one_line(result: str, parse_float: Callable[[str], float] | None = None) -> str:
    """A result as one line: a JSON list's items comma-separated, a dict as ``k: v``
    (``parse_float``: how its floats are read, as :func:`json.loads` takes it)."""
    try:
        value = json.loads(result, parse_float=parse_float)
    except ValueError:
        return "; ".join(line.strip() for line in result.strip().splitlines() if line.strip())
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items())
    return _scalar(value)


def _scalar(v: object) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return "(" + ", ".join(f"{k}: {_scalar(x)}" for k, x in v.items()) + ")"
    return json.dumps(v, ensure_ascii=False)


_URL = re.compile(r"https?://[^\s'\"<>`]+")


def unfetched_url(
    question: str, code: str, functions: Mapping[str, tuple[Collection[str], object]]
) -> str | None:
    """The hint for the first URL the question names that ``code`` never fetched (neither
    the URL nor its path is written in it), when a function with a ``url`` parameter
    can: trial ``unfetched-url``, noticed where it applies while off.

    A question names two URLs, and the snippet fetched the first and looked for the
    second's data with another function; a question names a CSV file's URL, and the
    snippet ran the SQL of a worked example about a database. Either result is not
    the named URL's data, whatever it says.
    """
    fetchers = _fetchers(functions)
    if not fetchers:
        return None
    for url in (u.rstrip(".,;:!?)") for u in _URL.findall(question)):
        path = urlsplit(url).path
        if url in code or (len(path) > 1 and path in code):
            continue
        if not acts("unfetched-url", True):
            return None
        call = f"r = await {fetchers[0]}(url='{url}')"
        return f"Hint: my question names {url}, and your code never fetched it: {call}."
    return None


def unfetched_message(result: str, hint: str, question: str) -> str:
    """The user message after a good result of a snippet that never fetched a URL the
    question names (trial ``unfetched-url``): the result, the hint, a new block."""
    shown = _cut(result)
    return (
        f"Your code returned:\n{shown}\n\nThat is not from the data my question is about. "
        f"{hint}\nWrite a new ```python block that answers my question from it: "
        f"{question.strip()}"
    )


def fetched_url(
    question: str, code: str, functions: Mapping[str, tuple[Collection[str], object]]
) -> bool:
    """Whether the question names a URL and ``code`` calls a function with a ``url``
    parameter: the data the question is about is that URL's, whatever its words say.

    Asked how many days passed between two releases "by the dates in
    http://.../releases.json", the snippet fetched it and failed on a key; the
    question's "between" and "days" matched convert_time's stub, the retry was
    asked to start with convert_time, and the model made the dates up.
    """
    return _URL.search(question) is not None and _calls_any(code, _fetchers(functions))


def _fetchers(functions: Mapping[str, tuple[Collection[str], object]]) -> list[str]:
    """The functions that take a ``url``, by name."""
    return sorted(name for name, (params, _) in functions.items() if "url" in params)


def _calls_any(code: str, names: Iterable[str]) -> bool:
    """Whether ``code`` calls one of ``names`` (as written: ``name(``)."""
    return any(re.search(rf"\b{re.escape(n)}\s*\(", code) for n in names)
