"""What the harness tells a small model about a result: the answer request, the
result message, hints for a retry, and results made easier to read. Text in,
text out.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable

__all__ = [
    "NO_OUTPUT",
    "answer_instruction",
    "is_empty_result",
    "prints_as_result",
    "readable",
    "result_message",
    "retry_hint",
]

# run_code's text for "nothing printed, None last" (daemon/code_mode/contract.py; a test
# keeps the two equal): a result that answers nothing, so the harness asks again.
NO_OUTPUT = "(no output; the last expression was None)"


def answer_instruction(question: str, source: str = "the result above") -> str:
    """The user line that asks for the answer: from the result, in words, no code."""
    return (
        f"Answer my question now, using {source}. My question was:\n"
        f"{question.strip()}\n"
        "Reply in one to three plain sentences that state every name and number from the "
        "result. Do not write code and do not describe the code. If the result is empty, "
        "say that nothing matched; if it is an error, say that you could not find out, and why."
    )


_RESULT_SHOWN = 6_000  # characters of a result repeated in the answer request


def result_message(
    result: str,
    question: str,
    *,
    failed: bool,
    retry: bool,
    shapes: str | None = None,
    empty: bool = False,
) -> str:
    """The user message that carries a run_code result back in the code-block protocol.

    It follows the question directly: the failed attempt is not replayed as an
    assistant turn, since a small model copies its own last code verbatim (it
    sent the same failing snippet three times, even at temperature 0.7). A
    failure that may be retried asks for a new block; an empty result
    that may be retried lets the model choose between answering and a new
    block; otherwise the result comes with the request to answer the
    (repeated) question, so the last thing the model reads is the data and
    what to do with it. ``shapes`` (from :func:`peek_code`) shows what the
    snippet's variables really hold: a small model guesses keys, and the
    traceback alone does not tell it the right ones.
    """
    shown = result if len(result) <= _RESULT_SHOWN else result[:_RESULT_SHOWN] + " …"
    seen = (
        f"\n\nWhat your variables hold now (paths and values; the first item of each "
        f"list):\n{shapes}"
        if shapes
        else ""
    )
    q = question.strip()
    if failed and retry:
        return (
            f"Your last attempt failed:\n{shown}{seen}\n\nWrite a new ```python block that "
            f"answers my question, using the keys shown above: {q}"
        )
    if empty and retry:
        return (
            f"Your last attempt returned {shown}{seen}\n\nIf nothing matches, answer my "
            "question in words. Otherwise write a new ```python block, using the keys shown "
            f"above. My question: {q}"
        )
    if failed:
        return f"The code failed:\n{shown}\n\n{answer_instruction(question)}"
    return f"The code returned:\n{readable(shown)}\n\n{answer_instruction(question)}"


def readable(result: str, limit: int = 40) -> str:
    """A JSON list or dict result as one line per item (``- name: a, phase: Failed``):
    in compact JSON a 1.5B model dropped two of five items from its answer."""
    try:
        value = json.loads(result)
    except ValueError:
        return result

    def one(v: object) -> str:
        if isinstance(v, dict):
            return ", ".join(
                f"{k}: {one(x) if isinstance(x, dict | list) else x}" for k, x in v.items()
            )
        return json.dumps(v, ensure_ascii=False) if isinstance(v, list) else str(v)

    if isinstance(value, list) and 0 < len(value) <= limit:
        return f"{len(value)} items:\n" + "\n".join(f"- {one(v)}" for v in value)
    if isinstance(value, dict) and 0 < len(value) <= limit:
        return "\n".join(
            f"{k}: {one(v) if isinstance(v, dict | list) else v}" for k, v in value.items()
        )
    return result


def is_empty_result(text: str) -> bool:
    """Whether run_code returned an empty value (often a filter that matched by mistake)."""
    return text.startswith("(empty result")


_JAVASCRIPT = re.compile(
    r"(^|[\s;(])(let|const|var) \w+ =|=>|===|!==|\bconsole\.log\(|\bMath\.\w+\("
)


_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")


def retry_hint(code: str, error: str, functions: Iterable[str] = ()) -> str | None:
    """A line to add to an error result that names a mistake the traceback does not.

    Seen with a 1.5B model: the same JavaScript snippet sent again and again,
    since its SyntaxError never says "this is not Python"; and invented
    functions (get_objects, list_nodes) called again after their NameError.
    """
    known = sorted(set(functions))
    m = _UNDEFINED.search(error)
    if m and known and m.group(1) not in known:
        close = difflib.get_close_matches(m.group(1), known, n=2, cutoff=0.5)
        nearest = f" (perhaps {' or '.join(close)})" if close else ""
        return (
            f"Hint: there is no function {m.group(1)}{nearest}. The functions are: "
            + ", ".join(known)
            + "."
        )
    if "SyntaxError" in error and _JAVASCRIPT.search(code):
        return (
            "Hint: this code is JavaScript, but run_code runs Python 3. Rewrite it in "
            "Python: `x = await f(a='b')`, list comprehensions instead of .map/.filter, "
            "max(xs, key=...) instead of Math.max, and end with an expression, not return."
        )
    return None


def prints_as_result(text: str) -> str:
    """``{"output": "<printed>"}`` (the last expression was None) → the printed text.

    A small model ends on ``print(...)`` more often than on an expression;
    the printed text is then its answer, and a JSON wrapper only adds noise.
    Blank printed output is :data:`NO_OUTPUT`: nothing was shown.
    """
    if not text.startswith('{"output"'):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and set(value) == {"output"} and isinstance(value["output"], str):
        return value["output"].rstrip("\n") if value["output"].strip() else NO_OUTPUT
    return text
