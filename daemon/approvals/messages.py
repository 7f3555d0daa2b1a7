"""What a thread reads about approvals: the request, and the answers to decisions.

The request names each pending call as ``server.tool(arguments)`` (arguments
as JSON, long values shortened), why it needs approval, and ends with the two
command lines, literally, with the request's short id.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from daemon.tools import PendingCall

__all__ = ["new_request_id", "request_text", "shorten_call"]

# Lower-case letters and digits without look-alikes (0/o, 1/l): easy to type in a chat.
_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
ID_LENGTH = 6
VALUE_CHARS = 80  # a string argument longer than this is shortened
CALL_CHARS = 300  # one call's line at most


def new_request_id() -> str:
    """A short random id (6 characters, about 30 bits): unique enough among pending requests."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(ID_LENGTH))


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > VALUE_CHARS:
        return value[: VALUE_CHARS - 1] + "…"
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def shorten_call(tool: str, server: str | None, arguments: dict[str, Any]) -> str:
    """``server.tool({"name": "web-1"})`` with long values shortened, at most one line."""
    name = f"{server}.{tool}" if server else tool
    text = json.dumps(_short(arguments), ensure_ascii=False, separators=(", ", ": "))
    line = f"{name}({text})"
    if len(line) > CALL_CHARS:
        line = line[: CALL_CHARS - 2] + "…)"
    return line.replace("\n", " ")


def request_text(request_id: str, calls: Sequence[PendingCall], *, deciders: str) -> str:
    """The message that asks a person to approve ``calls``."""
    if len(calls) == 1:
        head = "This run wants to make a call that needs approval:"
    else:
        head = f"This run wants to make {len(calls)} calls that need approval:"
    lines = [head]
    lines += [f"- {shorten_call(c.tool, c.server, c.arguments)}: {c.why}" for c in calls]
    lines += [
        f"Who may decide: {deciders}.",
        f"!approve {request_id}",
        f"!deny {request_id} [reason]",
    ]
    return "\n".join(lines)
