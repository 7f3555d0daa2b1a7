"""SQLite transcripts, runs and the tool-call audit, and the commands that read them."""

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
from .schema import SCHEMA_VERSION
from .store import DEFAULT_DB_PATH, Store

__all__ = [
    "DEFAULT_DB_PATH",
    "SCHEMA_VERSION",
    "AuditEntry",
    "HistoryText",
    "MigrationError",
    "PromptStatus",
    "Record",
    "RunMetrics",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoredPrompt",
    "StoredRecord",
    "ThreadLookupError",
    "ThreadSummary",
    "ToolCallRow",
    "envelope",
    "jsonl_lines",
    "session_id",
    "text_lines",
    "thread_key",
]
