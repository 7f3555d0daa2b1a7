"""The ``[approvals]`` policy: of each call, allow, deny or ask; of each nick, may it decide.

Order of the rules: a read-only call always runs; a ``deny`` glob refuses; an
``allow`` glob runs; a tool the run was granted (``!approve ID run``) runs;
otherwise ``mode`` says (``ask`` by default), and where it would ask, a rule
``!approve ID always`` left for the tool in this channel runs the call
instead. A rule never turns a refusal into a call: a ``deny`` glob and
``mode = "deny"`` win over it. Globs are :mod:`fnmatch`
patterns over ``server.tool`` (just ``tool`` for a tool without a server),
matched case-sensitively: tool names are.

One policy is one channel's (issue 29: each channel's ``[approvals]``, its
table's keys over the global ones); the desk picks it by the call's channel.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal, Protocol

from daemon.approvals.rules import AllowRule
from daemon.approvals.values import GatedTool, Verdict

__all__ = ["ApprovalPolicy", "ApprovalsSection", "why_mutating"]


class ApprovalsSection(Protocol):
    """The ``[approvals]`` section as the policy reads it (``daemon.config.ApprovalsConfig``)."""

    @property
    def mode(self) -> Literal["ask", "allow", "deny"]:
        """What a mutating call no glob names gets."""
        ...

    @property
    def allow(self) -> Sequence[str]:
        """Globs of ``server.tool`` that run without asking."""
        ...

    @property
    def deny(self) -> Sequence[str]:
        """Globs of ``server.tool`` that are refused."""
        ...

    @property
    def approvers(self) -> Sequence[str]:
        """The nicks that may decide (empty: the requester)."""
        ...

    @property
    def expire_after(self) -> float:
        """Seconds before an undecided request expires."""
        ...


def why_mutating(definition: GatedTool) -> str:
    """``destructive`` or ``not read-only``: why a call of this tool needs approval."""
    return "destructive" if definition.destructive is True else "not read-only"


def _matches(name: str, globs: Iterable[str]) -> str | None:
    return next((glob for glob in globs if fnmatchcase(name, glob)), None)


@dataclass(frozen=True)
class ApprovalPolicy:
    """The rules of ``[approvals]``, applied to one call at a time."""

    mode: Literal["ask", "allow", "deny"] = "ask"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    approvers: tuple[str, ...] = ()
    expire_after: float = 86_400.0

    @classmethod
    def from_config(cls, config: ApprovalsSection) -> ApprovalPolicy:
        """The policy of a ``[approvals]`` section."""
        return cls(
            mode=config.mode,
            allow=tuple(config.allow),
            deny=tuple(config.deny),
            approvers=tuple(config.approvers),
            expire_after=config.expire_after,
        )

    def verdict(
        self,
        definition: GatedTool,
        arguments: dict[str, Any] | None = None,
        *,
        granted: Collection[str] = (),
        always: AllowRule | None = None,
    ) -> Verdict:
        """Whether this call may run now; ``granted`` are the run's approved ``server.tool``s,
        ``always`` the channel's rule for this tool, if it has one."""
        if not definition.mutating:
            return Verdict("allow", "read-only")
        name = definition.qualified_name
        glob = _matches(name, self.deny)
        if glob is not None:
            return Verdict("deny", f"{name} is refused by [approvals] deny = {glob!r}")
        glob = _matches(name, self.allow)
        if glob is not None:
            return Verdict("allow", f"[approvals] allow = {glob!r}")
        if name in granted:
            return Verdict("allow", "approved for this run")
        why = why_mutating(definition)
        if self.mode == "allow":
            return Verdict("allow", why)
        if self.mode == "deny":
            return Verdict(
                "deny",
                f"{name} is {why} and [approvals] mode = 'deny' refuses such calls",
            )
        if always is not None and always.tool == name:
            return Verdict(
                "allow",
                f"allowed always in {always.channel} by {always.granted_by} (rule {always.id})",
            )
        return Verdict("ask", why)

    def may_decide(self, nick: str, requester: str) -> bool:
        """Whether ``nick`` may approve or deny a request of a run ``requester`` started."""
        if self.approvers:
            return nick in self.approvers
        return nick == requester

    def may_grant_always(self, nick: str) -> bool:
        """Whether ``nick`` may say ``!approve ID always``: only a nick of an explicit
        ``approvers`` list (where the list is empty, each prompt's author decides their
        own requests, and nobody decides for the channel)."""
        return nick in self.approvers

    def who_decides(self, requester: str) -> str:
        """The nicks that may decide, for a refusal's message."""
        names = self.approvers or (requester,)
        return ", ".join(names)
