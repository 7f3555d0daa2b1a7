"""Rules that ``!approve ID always`` leaves: a ``server.tool`` that no longer asks in a channel.

A rule is a value (:class:`AllowRule`); the rules in force are a
:class:`RuleBook`, looked up by channel and ``server.tool`` on every call the
policy would otherwise ask about. Where they are stored (SQLite, and in a
cluster the broker) and how the book is refreshed is the desk's
(:mod:`daemon.runtime.desk`); what a rule may override is the policy's
(:meth:`~daemon.approvals.policy.ApprovalPolicy.verdict`): it answers the
question ``mode = "ask"`` would put, nothing more, so a ``deny`` glob and
``mode = "deny"`` still refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from daemon.approvals.messages import new_request_id

__all__ = ["AllowRule", "RuleBook", "new_rule_id"]


def new_rule_id() -> str:
    """A rule's id: short and typeable like a request's (``asyncai approvals --revoke ID``)."""
    return new_request_id()


@dataclass(frozen=True)
class AllowRule:
    """``tool`` (``server.tool``) runs without asking in ``channel``; ``granted_by`` said
    ``!approve request_id always`` at ``granted`` (ISO 8601, UTC)."""

    id: str
    channel: str
    tool: str
    granted_by: str
    granted: str
    request_id: str = ""


class RuleBook:
    """The rules in force, by channel and ``server.tool`` (immutable: a refresh makes another)."""

    def __init__(self, rules: Iterable[AllowRule] = ()):
        self._by_key: dict[tuple[str, str], AllowRule] = {}
        for rule in rules:
            # two rules for one key can only meet across a cluster's race: the older one stands
            kept = self._by_key.get((rule.channel, rule.tool))
            if kept is None or (rule.granted, rule.id) < (kept.granted, kept.id):
                self._by_key[(rule.channel, rule.tool)] = rule

    def find(self, channel: str, tool: str) -> AllowRule | None:
        """The rule that lets ``tool`` run without asking in ``channel``, or None."""
        return self._by_key.get((channel, tool))

    def __iter__(self) -> Iterator[AllowRule]:
        return iter(sorted(self._by_key.values(), key=lambda r: (r.channel, r.tool)))

    def __len__(self) -> int:
        return len(self._by_key)
