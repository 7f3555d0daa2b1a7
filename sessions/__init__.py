"""SQLite transcripts, runs and the tool-call audit, and the reports that read them.

Holds the schema and its migrations (``schema``), the row types (``model``),
the store (``store``: ``connection`` plumbing, the ``writer``, the
``queries``, ``approvals``, the dumped REPL ``scopes``, the learned
``shapes`` and the reply ``outbox``), ids (``ids``),
the thread history (``history``), the Claude Code JSONL export (``export``)
and what ``asyncai threads/audit/transcript`` print (``report``).

May import: aiosqlite and the standard library; nothing of ``daemon``,
``channels`` or ``servers``.
"""

from .errors import MigrationError, StoreClosedError, StoreError, ThreadLookupError
from .export import envelope, jsonl_lines, text_lines
from .ids import session_id, thread_key
from .model import (
    AuditEntry,
    HistoryText,
    PromptStatus,
    Record,
    RunMetrics,
    StoredPrompt,
    StoredRecord,
    ThreadSummary,
    ToolCallRow,
)
from .outbox import OutboxReply, ScopeWrite
from .schema import SCHEMA_VERSION
from .scopes import StoredScope, UnboundScope, scope_cutoff
from .shapes import StoredShape
from .store import DEFAULT_DB_PATH, Store

__all__ = [
    "DEFAULT_DB_PATH",
    "SCHEMA_VERSION",
    "AuditEntry",
    "HistoryText",
    "MigrationError",
    "OutboxReply",
    "PromptStatus",
    "Record",
    "RunMetrics",
    "ScopeWrite",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoredPrompt",
    "StoredRecord",
    "StoredScope",
    "StoredShape",
    "ThreadLookupError",
    "ThreadSummary",
    "ToolCallRow",
    "UnboundScope",
    "envelope",
    "jsonl_lines",
    "scope_cutoff",
    "session_id",
    "text_lines",
    "thread_key",
]
