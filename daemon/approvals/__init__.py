"""Approvals of mutating tool calls: the values, the policy, the chat commands and the words.

Pure code, no I/O, and low in the house, so that code mode, MCP, the model and
the runtime may all import it: :mod:`~daemon.approvals.values` holds what
crosses the executor boundary (the gate and its :class:`Verdict`, a
:class:`Pause` with its pending calls (:class:`PendingCall`), a :class:`Decision`);
:mod:`~daemon.approvals.policy` decides of a call whether
it runs, is refused or waits for a person (the ``[approvals]`` section) and
who may decide; :mod:`~daemon.approvals.rules` holds the rules ``!approve ID always``
leaves (a tool that no longer asks in a channel);
:mod:`~daemon.approvals.commands` reads ``!approve ID [run|always]``,
``!deny ID [reason]`` and ``!show ID``; :mod:`~daemon.approvals.messages` writes
the request a thread sees, every argument in full, and the one-line answers to a
decision. The waiting itself (store, resume) is the runtime's desk
(:mod:`daemon.runtime.desk`); the sandbox's pause is code mode's, the rows are
``sessions``'.

May import: nothing of daemon/ (``daemon.tools`` imports it: the executor's
values carry a :class:`Pause`).
"""

from daemon.approvals.commands import Approve, Deny, Malformed, Show, echoed, parse_decision
from daemon.approvals.messages import (
    always_granted_text,
    always_refused_text,
    call_text,
    decided_elsewhere_text,
    new_request_id,
    request_text,
)
from daemon.approvals.policy import ApprovalPolicy, ApprovalsSection, why_mutating
from daemon.approvals.rules import AllowRule, RuleBook, new_rule_id
from daemon.approvals.values import ApprovalGate, Decision, GatedTool, Pause, PendingCall, Verdict

__all__ = [
    "AllowRule",
    "ApprovalGate",
    "ApprovalPolicy",
    "ApprovalsSection",
    "Approve",
    "Decision",
    "Deny",
    "GatedTool",
    "Malformed",
    "Pause",
    "PendingCall",
    "RuleBook",
    "Show",
    "Verdict",
    "always_granted_text",
    "always_refused_text",
    "call_text",
    "decided_elsewhere_text",
    "echoed",
    "new_request_id",
    "new_rule_id",
    "parse_decision",
    "request_text",
    "why_mutating",
]
