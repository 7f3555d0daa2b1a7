"""What a person types about a request: ``!approve ID [run|always]``, ``!deny ID [reason]``,
``!show ID``.

``!approve ID always`` (issue 29) approves the request and asks for a rule:
the same ``server.tool`` in this channel no longer asks (who may say it is
the policy's, :meth:`~daemon.approvals.policy.ApprovalPolicy.may_grant_always`).

``!show ID`` decides nothing: it prints the request again, in full (issue 26).
Parsed from a whole message; anything else is not a decision (None), so a
message that merely mentions ``!approve`` mid-sentence stays a prompt. The
id is matched case-insensitively (ids are lower case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Approve", "Deny", "Malformed", "Show", "echoed", "parse_decision"]

ECHO_LIMIT = 40
"""The most characters of what a person typed that an answer repeats."""

_APPROVE = re.compile(r"!approve(?:\s+(?P<id>\S+)(?:\s+(?P<rest>.*))?)?", re.DOTALL)
_DENY = re.compile(r"!deny(?:\s+(?P<id>\S+)(?:\s+(?P<reason>.*))?)?", re.DOTALL)
_SHOW = re.compile(r"!show(?:\s+(?P<id>\S+)(?:\s+(?P<rest>.*))?)?", re.DOTALL)


@dataclass(frozen=True)
class Approve:
    """``!approve ID`` (this request), ``!approve ID run`` (also the run's later calls) or
    ``!approve ID always`` (also every later call of the same tools in this channel)."""

    request_id: str
    whole_run: bool = False
    always: bool = False


@dataclass(frozen=True)
class Deny:
    """``!deny ID [reason]``."""

    request_id: str
    reason: str = ""


@dataclass(frozen=True)
class Show:
    """``!show ID``: print the request again."""

    request_id: str


@dataclass(frozen=True)
class Malformed:
    """A message that starts like a decision but is not one: what is wrong."""

    problem: str


def echoed(text: str, *, quote: bool = False) -> str:
    """``text`` as an answer repeats it: at most :data:`ECHO_LIMIT` characters (then
    ``…``), quoted (``repr``) when asked or when it holds what does not print."""
    cut = text[:ECHO_LIMIT]
    shown = repr(cut) if quote or not cut.isprintable() else cut
    return shown + ("…" if len(text) > ECHO_LIMIT else "")


def parse_decision(text: str) -> Approve | Deny | Show | Malformed | None:
    """The decision (or ``!show``) ``text`` is, :class:`Malformed` when it is a broken one,
    else None."""
    stripped = text.strip()
    m = _APPROVE.fullmatch(stripped)
    if m is not None:
        if not m.group("id"):
            return Malformed("!approve needs the request's id: !approve ID")
        rest = (m.group("rest") or "").strip().lower()
        if rest not in ("", "run", "always"):
            shown = echoed(rest, quote=True)
            return Malformed(f"!approve takes an id and optionally 'run' or 'always', not {shown}")
        return Approve(m.group("id").lower(), whole_run=rest == "run", always=rest == "always")
    m = _DENY.fullmatch(stripped)
    if m is not None:
        if not m.group("id"):
            return Malformed("!deny needs the request's id: !deny ID [reason]")
        return Deny(m.group("id").lower(), " ".join((m.group("reason") or "").split()))
    m = _SHOW.fullmatch(stripped)
    if m is not None:
        if not m.group("id") or m.group("rest"):
            return Malformed("!show takes the request's id: !show ID")
        return Show(m.group("id").lower())
    return None
