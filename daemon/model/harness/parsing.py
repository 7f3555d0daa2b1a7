"""Reading what a small model wrote: its code block, its broken arguments, its text calls.

Text in, values out, no I/O: the fenced ``python`` block of the code-block
protocol (:func:`extract_code`, and :func:`code_message` to replay it),
arguments JSON that does not parse (:func:`recover_arguments`), and tool
calls written as text (:func:`text_tool_calls`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable

__all__ = [
    "code_message",
    "extract_code",
    "recover_arguments",
    "text_tool_calls",
]


def code_message(code: str) -> str:
    """How an assistant turn that ran code is replayed: the fenced block it wrote."""
    return f"```python\n{code}\n```"


_FENCED = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<code>.*?)(?:\n[ \t]*```|$)", re.DOTALL)
_PYTHON = {"", "python", "python3", "py"}


def extract_code(content: str) -> str | None:
    """The code of the first Python (or unlabelled) fenced block, closed or cut off by
    :data:`CODE_STOP`; blocks in other languages (a JSON pseudo call) are skipped."""
    for m in _FENCED.finditer(content):
        code = m.group("code").strip("\n")
        if m.group("lang").lower() in _PYTHON and code.strip():
            return code
    return None


_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "/": "/"}
# {"code": "<anything, quotes included>" [, "restart": true|false]} — greedy: the last quote
_CODE_OBJECT = re.compile(
    r'^\s*\{\s*"code"\s*:\s*"(?P<code>.*)"\s*'
    r'(?:,\s*"restart"\s*:\s*(?P<restart>true|false)\s*)?\}\s*$',
    re.DOTALL,
)
_CODE_PREFIX = re.compile(r'^\s*\{\s*"code"\s*:\s*"(?P<code>.*)$', re.DOTALL)
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\n(?P<code>.*?)\n?```\s*$", re.DOTALL)


def _unescape(text: str) -> str:
    """Decode JSON string escapes, leaving anything else (bare quotes) as it is."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        return chr(int(esc[1:], 16)) if esc[0] == "u" else _ESCAPES[esc]

    return _JSON_ESCAPE.sub(one, text)


def recover_arguments(raw: str, field: str = "code") -> tuple[dict | None, str | None]:
    """Arguments for a ``{field: str}`` tool from text that is not valid JSON.

    Returns ``(arguments, how)``: ``how`` names the repair, or ``(None, None)``
    when nothing sensible can be recovered. Tried in order: control
    characters inside strings (raw newlines), the object with a string that
    holds unescaped quotes (everything up to the last quote before ``}``), a
    Python dict literal, an object cut off before its end, and bare code
    (not JSON at all, possibly in a markdown fence).
    """
    try:
        value = json.loads(raw, strict=False)
    except ValueError:
        pass
    else:
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return value, "raw control characters in a JSON string"
        return None, None
    if field == "code":
        m = _CODE_OBJECT.match(raw)
        if m:
            args: dict = {"code": _unescape(m.group("code"))}
            if m.group("restart"):
                args["restart"] = m.group("restart") == "true"
            return args, "unescaped quotes in the code string"
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    else:
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return value, "a Python dict instead of JSON"
    if field == "code":
        m = _CODE_PREFIX.match(raw)
        if m:
            code = re.sub(r'"\s*\}?\s*$', "", m.group("code"))
            return {"code": _unescape(code)}, "an arguments object cut off before its end"
        stripped = raw.strip()
        if stripped and not stripped.startswith(("{", "[")):
            fenced = _FENCE.match(stripped)
            return {"code": fenced.group("code") if fenced else stripped}, "bare code, not JSON"
    return None, None


_TEXT_CALL = re.compile(
    r"<tool_call>\s*(?P<tag>.*?)\s*(?:</tool_call>|$)|```(?:json)?\s*\n(?P<fence>.*?)\n?```",
    re.DOTALL,
)


def text_tool_calls(content: str, tool_names: Iterable[str]) -> list[tuple[str, dict]]:
    """Tool calls a model wrote as text: ``{"name": ..., "arguments": {...}}`` objects in
    ``<tool_call>`` tags (Qwen's own format, which llama-cpp-python's generic handler does
    not parse), in fenced blocks, or as the whole reply. Only offered tools count.
    """
    names = set(tool_names)
    found: list[tuple[str, dict]] = []
    chunks = [m.group("tag") or m.group("fence") or "" for m in _TEXT_CALL.finditer(content)]
    for chunk in chunks or [content]:
        try:
            value = json.loads(chunk.strip(), strict=False)
        except ValueError:
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict) or item.get("name") not in names:
                continue
            arguments = item.get("arguments", item.get("parameters", {}))
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments, strict=False)
                except ValueError:
                    continue
            if isinstance(arguments, dict):
                found.append((item["name"], arguments))
    return found
