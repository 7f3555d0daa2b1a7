"""Approvals of mutating tool calls: the policy, the chat commands and the words.

Pure code, no I/O: :mod:`~daemon.approvals.policy` decides of a call whether
it runs, is refused or waits for a person (the ``[approvals]`` section) and
who may decide; :mod:`~daemon.approvals.commands` reads ``!approve ID [run]``,
``!deny ID [reason]`` and ``!show ID``; :mod:`~daemon.approvals.messages` writes
the request a thread sees, every argument in full, and the one-line answers to a
decision. The waiting itself (store, resume) is the runtime's.

May import: ``daemon.tools`` and ``daemon.config``; nothing else of daemon/.
"""

from daemon.approvals.commands import Approve, Deny, Malformed, Show, parse_decision
from daemon.approvals.messages import call_text, new_request_id, request_text
from daemon.approvals.policy import ApprovalPolicy

__all__ = [
    "ApprovalPolicy",
    "Approve",
    "Deny",
    "Malformed",
    "Show",
    "call_text",
    "new_request_id",
    "parse_decision",
    "request_text",
]
