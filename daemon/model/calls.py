"""Tool calls as the model sends them: the ``tools`` offered (names sanitised), and the
calls parsed into :class:`ToolCall` with unique ids (or made up, for a call the
model did not send as one). The small-model harness reads calls written as text
and mends a broken ``run_code`` call (``daemon.model.harness.mending``).

Real OpenAI-compatible servers are not OpenAI (notes/local-model.md):
tool-call ids are opaque (and made up when missing); invalid JSON in
arguments is kept, so the model can be told and correct it, and replayed as
``{}``, since some servers re-parse it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.model.records import RunState
from daemon.tools import ToolDefinition

__all__ = [
    "ToolCall",
    "made_up_call",
    "parse_arguments",
    "parse_calls",
    "tool_params",
]

_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names


@dataclass
class ToolCall:
    """One tool call as the model sent it."""

    id: str  # opaque; made up when the server sent none
    name: str  # as the model called it
    raw: str  # the arguments text
    arguments: dict
    error: str | None  # why ``raw`` is not a JSON object, or None

    @property
    def input(self) -> dict:
        """The ``tool_use`` block's input: the arguments, or the raw text that did not parse."""
        return self.arguments if self.error is None else {"invalid_arguments": self.raw}

    @property
    def wire_arguments(self) -> str:
        """What to replay: as sent when valid, else ``{}`` (some servers re-parse it)."""
        return self.raw if self.error is None and self.raw.strip() else "{}"

    def tool_use(self) -> dict[str, Any]:
        """The call as a transcript ``tool_use`` block."""
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


def tool_params(definitions: Sequence[ToolDefinition]) -> tuple[list[dict], dict[str, str]]:
    """OpenAI ``tools`` and the map from the name the model uses to the tool's name.

    Names OpenAI would refuse (dots, slashes, over 64 characters) are
    sanitized, with a numeric suffix on collisions.
    """
    tools: list[dict] = []
    names: dict[str, str] = {}
    for d in definitions:
        wire = (
            d.name
            if _NAME_OK.match(d.name)
            else re.sub(r"[^A-Za-z0-9_-]", "_", d.name)[:60] or "tool"
        )
        base, n = wire, 2
        while wire in names:
            wire, n = f"{base}_{n}", n + 1
        names[wire] = d.name
        parameters = d.input_schema or {"type": "object", "properties": {}}
        tools.append(
            {
                "type": "function",
                "function": {"name": wire, "description": d.description, "parameters": parameters},
            }
        )
    return tools, names


def parse_arguments(raw: str) -> tuple[dict, str | None]:
    """The arguments object, or ``({}, why not)``."""
    if not raw.strip():
        return {}, None  # some servers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {type(value).__name__}"
    return value, None


def parse_calls(tool_calls: Sequence[Any], state: RunState) -> list[ToolCall]:
    """The SDK's tool calls as :class:`ToolCall`, with unique ids."""
    out = []
    for call in tool_calls:
        fn = getattr(call, "function", None)  # None: a "custom" tool call, not a function
        name = fn.name if fn is not None else getattr(getattr(call, "custom", None), "name", "?")
        raw = (fn.arguments if fn is not None else None) or ""
        call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        if call_id in state.call_ids:  # opaque, but each result must answer exactly one call
            call_id = f"{call_id}_{uuid.uuid4().hex[:8]}"
        state.call_ids.add(call_id)
        arguments, error = parse_arguments(raw)
        out.append(ToolCall(call_id, name, raw, arguments, error))
    return out


def made_up_call(name: str, arguments: dict, state: RunState) -> ToolCall:
    """A call the model did not send as one (text, a code block), with a made-up id."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    state.call_ids.add(call_id)
    return ToolCall(call_id, name, json.dumps(arguments), arguments, None)
