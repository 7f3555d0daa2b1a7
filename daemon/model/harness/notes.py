"""Notes a failed snippet's retry carries about kinds of Python error the traceback misreads (pure).

Each note reads the error's exception line, the snippet's code and the look at its
variables (:class:`~daemon.model.harness.look.Look`), and says what the error means
for the next snippet; none names a tool, a server or a question. They are trials
(:data:`~daemon.model.harness.rules.TRIALS`), each acting through
:func:`~daemon.model.harness.rules.acts` where it applies:

- ``text-result``: a function's whole result was a short text, and the snippet
  read it as data (``string indices must be integers``). A server that reports a
  failure as text rather than as an error (mcp-server-sqlite's ``Database error:
  ...``) leaves the call listed as ``ok``, and the traceback names the line that
  indexed the text, not the call that failed.
- ``module-import``: ``NameError`` for a module the sandbox has but the snippet
  never imported (``datetime``): the fix is an import, not another name.
- ``no-match``: ``'NoneType' object has no attribute 'group'``: a regular
  expression matched nothing in some text, and the code used the match anyway.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable

from daemon.model.harness.feedback import error_signature
from daemon.model.harness.look import Look, Value
from daemon.model.harness.rules import acts

__all__ = ["TEXT_SHOWN", "module_note", "no_match_note", "retry_notes", "text_result_note"]

#: the longest text result a note quotes whole (longer text is data to parse, not a reply)
TEXT_SHOWN = 300

_TEXT_AS_DATA = re.compile(
    r"^TypeError: (?:string indices must be integers|'str' object is not subscriptable)"
    r"|^AttributeError: 'str' object has no attribute"
)
_UNDEFINED = re.compile(r"^NameError: name '(\w+)' is not defined")
_NO_MATCH = re.compile(
    r"^AttributeError: 'NoneType' object has no attribute '(group|groups|"
    r"groupdict|start|end|span)'"
)


def retry_notes(
    code: str,
    error: str,
    look: Look | None,
    functions: Collection[str],
    modules: Iterable[str],
) -> list[str]:
    """The notes (each one ``Hint:`` line) for a failed snippet's retry, in order."""
    notes = (
        text_result_note(code, error, look, functions),
        module_note(code, error, modules),
        no_match_note(error),
    )
    return [n for n in notes if n is not None]


def text_result_note(
    code: str, error: str, look: Look | None, functions: Collection[str]
) -> str | None:
    """Trial ``text-result``: the snippet read a function's short text result as data.

    Applies when the error is text indexed as data, and a variable the snippet set
    from an awaited function of the catalog (``rows = await f(...)``) holds one short
    line of text (the look shows it whole): then that text is the function's whole
    reply, and it is quoted with what it means for the call.
    """
    signature = error_signature(error) or ""
    if look is None or not _TEXT_AS_DATA.match(signature):
        return None
    calls = _awaited_results(code, functions)
    for entry in look.entries():
        if not isinstance(entry, Value) or entry.path.steps or entry.path.root not in calls:
            continue
        text = entry.sample
        if text[:1] in "'\"" and len(text) <= TEXT_SHOWN and acts("text-result", True):
            return (
                f"Hint: {calls[entry.path.root]}() returned only this text, not data: {text}. "
                "That text is its whole reply: if it reports an error, the call failed; "
                "correct the call's arguments and call it again."
            )
    return None


def module_note(code: str, error: str, modules: Iterable[str]) -> str | None:
    """Trial ``module-import``: a ``NameError`` for a module of ``modules`` (those the
    sandbox has) that the snippet uses without importing it."""
    m = _UNDEFINED.match(error_signature(error) or "")
    if m is None or m.group(1) not in set(modules):
        return None
    name = m.group(1)
    if not acts("module-import", True):
        return None
    used = sorted(set(re.findall(rf"\b{name}\.(\w+)", code)))
    hint = f" (then {', '.join(f'{name}.{a}' for a in used[:3])})" if used else ""
    return (
        f"Hint: {name} is a module that was never imported: start the snippet with "
        f"`import {name}`{hint}, or import the names you use: `from {name} import ...`."
    )


def no_match_note(error: str) -> str | None:
    """Trial ``no-match``: a match object used where ``re.search``/``re.match`` found none."""
    m = _NO_MATCH.match(error_signature(error) or "")
    if m is None or not acts("no-match", True):
        return None
    return (
        f"Hint: a re.search or re.match found no match (None has no .{m.group(1)}()): the "
        "pattern does not fit the text as it is written. Write the pattern from the lines "
        "your variables hold (shown above), and skip a text with no match: "
        "`m = re.search(pattern, s)`, then `if m:`."
    )


def _awaited_results(code: str, functions: Collection[str]) -> dict[str, str]:
    """The top-level names a snippet set to an awaited call of ``functions``, and the
    function each was set from (``rows = await read_query(...)`` → rows: read_query)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    found: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Name) and isinstance(value, ast.Await)):
            continue
        call = value.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in functions
        ):
            found[target.id] = call.func.id
    return found
