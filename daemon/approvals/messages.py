"""What a thread reads about approvals: the request, and the answers to decisions.

The request names each pending call as ``server.tool(arguments)`` with every
argument in full (issue 26: what an approver sees is what runs), as JSON on
one line, and ends with the command lines, literally, with the request's
short id: ``!approve ID``, ``!approve ID always`` where the channel has
approvers who may say it, and ``!deny ID [reason]``. A long request is one
long message: the publisher splits it over several, as it does a long reply,
and ``!show ID`` prints it again. Characters that show as something else or
as nothing (controls, bidirectional overrides, zero-width marks) are written
as JSON ``\\uXXXX`` escapes, so the text still reads back as exactly the
arguments.
"""

from __future__ import annotations

import json
import secrets
import unicodedata
from collections.abc import Sequence
from typing import Any

from daemon.approvals.values import PendingCall

__all__ = [
    "always_granted_text",
    "always_refused_text",
    "call_text",
    "decided_elsewhere_text",
    "new_request_id",
    "request_text",
]

# Lower-case letters and digits without look-alikes (0/o, 1/l): easy to type in a chat.
_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
ID_LENGTH = 6
# Unicode categories that do not show as themselves: controls, formats (bidi
# overrides, zero-width joiners), separators of lines and paragraphs, private
# use, surrogates, unassigned; and spaces other than " " (see _hidden).
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def new_request_id() -> str:
    """A short random id (6 characters, about 30 bits): unique enough among pending requests."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(ID_LENGTH))


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON writes it as a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _visible(text: str) -> str:
    """``text`` (JSON) with every character that would not show as itself escaped."""
    if text.isprintable():  # the usual case: nothing hidden (spaces are printable)
        return text
    return "".join(_escape(c) if _hidden(c) else c for c in text)


def _hidden(char: str) -> bool:
    category = unicodedata.category(char)
    # a space other than " " (no-break, ideographic...) reads as " " but is not one
    return category in _HIDDEN or (category == "Zs" and char != " ")


def call_text(tool: str, server: str | None, arguments: dict[str, Any]) -> str:
    """``server.tool({"name": "web-1"})``: every argument in full, as JSON on one line."""
    name = f"{server}.{tool}" if server else tool
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    return f"{_visible(name)}({_visible(text)})"


def request_text(
    request_id: str,
    calls: Sequence[PendingCall],
    *,
    deciders: str,
    decided: str | None = None,
    always: bool = False,
) -> str:
    """The message that asks a person to approve ``calls``; ``always``: offer
    ``!approve ID always`` too (the channel's approvers may say it); ``decided``
    (``!show`` of a decided request): how it was decided, said on a last line."""
    if len(calls) == 1:
        head = "This run wants to make a call that needs approval:"
    else:
        head = f"This run wants to make {len(calls)} calls that need approval:"
    lines = [head]
    lines += [f"- {call_text(c.tool, c.server, c.arguments)}: {c.why}" for c in calls]
    lines += [
        f"Who may decide: {deciders}.",
        f"!approve {request_id}",
        *([f"!approve {request_id} always"] if always else []),
        f"!deny {request_id} [reason]",
    ]
    if decided is not None:
        lines.append(f"Request {request_id} was already {decided}.")
    return "\n".join(lines)


def always_refused_text(request_id: str, channel: str, nick: str, approvers: Sequence[str]) -> str:
    """The one line that refuses ``!approve ID always`` (nothing is decided)."""
    if not approvers:
        return (
            f"{nick} may not say 'always' here: {channel} has no approvers list "
            f"([approvals] approvers), so each prompt's author decides their own requests "
            f"and nobody may allow a tool for the whole channel; !approve {request_id} "
            "approves this request only."
        )
    return (
        f"{nick} may not say 'always' here: only {', '.join(approvers)} may allow a tool "
        f"for the whole of {channel}."
    )


def always_granted_text(channel: str, rules: Sequence[tuple[str, str]]) -> str:
    """The line that confirms ``!approve ID always``: ``rules`` are (rule id, server.tool)."""
    names = ", ".join(f"{tool} (rule {rule})" for rule, tool in rules)
    first = rules[0][0] if rules else "ID"
    return (
        f"From now on {names} run{'s' if len(rules) == 1 else ''} in {channel} without asking; "
        f"asyncai approvals --revoke {first} removes {'it' if len(rules) == 1 else 'one'}."
    )


def decided_elsewhere_text(
    request_id: str, by: str, *, approved: bool, scope: str = "call", reason: str = "", where: str
) -> str:
    """The line a thread reads when ``by`` decided its request from outside the thread
    (``where``: "the console"): what ``!approve ID [run|always]`` / ``!deny ID [reason]``
    typed in the thread would have shown."""
    if not approved:
        why = f": {reason}" if reason else "."
        return f"{by} denied request {request_id} from {where}{why}"
    extent = {"run": " for the rest of the run", "always": " always"}.get(scope, "")
    return f"{by} approved request {request_id}{extent} from {where}."
