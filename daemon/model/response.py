"""A chat completion's body checked before the loop reads it: pure, no I/O.

The openai SDK builds its response objects without validating them, so a
server that sends ``"message": null``, ``"content": 42`` or arguments as an
object would surface deep in the loop as an ``AttributeError``.
:func:`completion_problem` reads the raw body first and says, in words fit
for an operator, what is wrong with it; the endpoint turns that into a
failed run. It checks only what the loop reads: ``choices[0]`` (its
``message``: ``content``, ``tool_calls``, and ``finish_reason``), ``usage``,
``id`` and ``model``. Any string in them must be Unicode: a lone surrogate
(``"\\ud800"``, valid JSON but no character) would fail later in SQLite,
the hub or the terminal.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["completion_problem"]

_SHOWN = 80  # characters of a bad body quoted in the message


def completion_problem(body: bytes) -> str | None:
    """What makes ``body`` unusable as a chat completion, or None when the loop can read it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not JSON, a huge number, deep nesting
        shown = text[:_SHOWN] + ("..." if len(text) > _SHOWN else "")
        return f"the body is not JSON ({exc}): {shown!r}" if text.strip() else "the body is empty"
    if not isinstance(data, dict):
        return f"the body is {_kind(data)}, not a JSON object"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "it has no choices" if not choices else f"choices is {_kind(choices)}, not a list"
    return (
        _optional_text(data, "id", "id")
        or _optional_text(data, "model", "model")
        or _usage(data.get("usage"))
        or _choice(choices[0])
    )


def _choice(choice: Any) -> str | None:
    if not isinstance(choice, dict):
        return f"choices[0] is {_kind(choice)}, not an object"
    message = choice.get("message")
    if not isinstance(message, dict):
        return f"choices[0].message is {_kind(message)}, not an object"
    problem = _optional_text(choice, "finish_reason", "choices[0].finish_reason")
    problem = problem or _optional_text(message, "content", "choices[0].message.content")
    if problem:
        return problem
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"choices[0].message.tool_calls is {_kind(calls)}, not a list"
    for i, call in enumerate(calls):
        problem = _tool_call(call, f"choices[0].message.tool_calls[{i}]")
        if problem:
            return problem
    return None


def _tool_call(call: Any, where: str) -> str | None:
    if not isinstance(call, dict):
        return f"{where} is {_kind(call)}, not an object"
    problem = _optional_text(call, "id", f"{where}.id")
    if problem:
        return problem
    function = call.get("function")
    if function is not None:
        if not isinstance(function, dict):
            return f"{where}.function is {_kind(function)}, not an object"
        return _text(function.get("name"), f"{where}.function.name") or _optional_text(
            function, "arguments", f"{where}.function.arguments"
        )
    custom = call.get("custom")  # a tool call that is not a function's
    if custom is not None:
        if not isinstance(custom, dict):
            return f"{where}.custom is {_kind(custom)}, not an object"
        return _optional_text(custom, "name", f"{where}.custom.name")
    return None


def _usage(usage: Any) -> str | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return f"usage is {_kind(usage)}, not an object"
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if value is not None and (type(value) is not int or value < 0):
            return f"usage.{name} is {_kind(value)}, not a count"
    return None


def _optional_text(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _text(value, where)


def _text(value: Any, where: str) -> str | None:
    if not isinstance(value, str):
        return f"{where} is {_kind(value)}, not text"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        return f"{where} holds a lone surrogate ({bad!a} at {exc.start}), which is not Unicode"
    return None


def _kind(value: Any) -> str:
    """A JSON value's kind and, when short, the value: ``a number (42)``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"[:40]
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array" if value else "an empty array"
    return "an object"
