"""SQLite transcripts, runs and the tool-call audit, and the reports that read them.

Holds the schema and its migrations (``schema``), the row types and each
table's row mapper (``model``), the store (``store``: one ``connection``
shared by its narrow ports, the prompt and run ``writer``, the ``cursors``,
the reply ``outbox``, the ``audit``, the ``approvals`` and their ``rules``, the dumped REPL
``scopes``, the learned ``shapes``, the ``replica``, the ``queries`` and the
console's ``views``), the ``usage`` summed per day, sender or channel, ids (``ids``),
the thread history (``history``), the Claude Code JSONL export (``export``)
and what ``asyncai threads/audit/transcript`` print (``report``).

May import: aiosqlite and the standard library; nothing of ``daemon``,
``channels`` or ``servers``.
"""

from .approvals import Approvals, NewApproval, StoredApproval
from .audit import AuditLog
from .connection import DEFAULT_DB_PATH
from .cursors import Cursors, commands_row
from .errors import (
    MigrationError,
    RuleLookupError,
    StoreClosedError,
    StoreError,
    ThreadLookupError,
)
from .export import AUDIT_CSV_COLUMNS, audit_csv_lines, envelope, jsonl_lines, text_lines
from .ids import iso_utc, now_iso, parse_since, session_id, thread_key
from .model import (
    AuditEntry,
    HistoryText,
    InterruptedRun,
    PromptStatus,
    Record,
    RunMetrics,
    SenderRun,
    StartedCall,
    StoredPrompt,
    StoredRecord,
    ThreadSummary,
    ToolCallRow,
)
from .outbox import Ack, Outbox, OutboxReply, ScopeWrite
from .queries import Queries
from .replica import MalformedRunDocument, Replica
from .report import (
    approvals_report,
    audit_report,
    revoke_report,
    rules_report,
    threads_report,
    transcript_report,
)
from .rules import ApprovalRules, NewRule, StoredRule
from .schema import SCHEMA_VERSION
from .scopes import Scopes, StoredScope, UnboundScope, scope_cutoff
from .shapes import Shapes, StoredShape
from .store import Store
from .usage import UsageBy, UsageRow
from .views import (
    THREAD_STATUSES,
    ApprovalView,
    Round,
    RunView,
    Snippet,
    ThreadPage,
    ThreadRow,
    ThreadViews,
    unfold_run,
)
from .writer import RunWriter

__all__ = [
    "AUDIT_CSV_COLUMNS",
    "DEFAULT_DB_PATH",
    "SCHEMA_VERSION",
    "THREAD_STATUSES",
    "Ack",
    "ApprovalRules",
    "ApprovalView",
    "Approvals",
    "AuditEntry",
    "AuditLog",
    "Cursors",
    "HistoryText",
    "InterruptedRun",
    "MalformedRunDocument",
    "MigrationError",
    "NewApproval",
    "NewRule",
    "Outbox",
    "OutboxReply",
    "PromptStatus",
    "Queries",
    "Record",
    "Replica",
    "Round",
    "RuleLookupError",
    "RunMetrics",
    "RunView",
    "RunWriter",
    "ScopeWrite",
    "Scopes",
    "SenderRun",
    "Shapes",
    "Snippet",
    "StartedCall",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoredApproval",
    "StoredPrompt",
    "StoredRecord",
    "StoredRule",
    "StoredScope",
    "StoredShape",
    "ThreadLookupError",
    "ThreadPage",
    "ThreadRow",
    "ThreadSummary",
    "ThreadViews",
    "ToolCallRow",
    "UnboundScope",
    "UsageBy",
    "UsageRow",
    "approvals_report",
    "audit_csv_lines",
    "audit_report",
    "commands_row",
    "envelope",
    "iso_utc",
    "jsonl_lines",
    "now_iso",
    "parse_since",
    "revoke_report",
    "rules_report",
    "scope_cutoff",
    "session_id",
    "text_lines",
    "thread_key",
    "threads_report",
    "transcript_report",
    "unfold_run",
]
