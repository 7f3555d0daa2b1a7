"""The tool interface every executor implements, and the values it passes.

The backend is handed a :class:`ToolExecutor` and never knows which one:
``McpToolExecutor`` (MCP servers over stdio) or ``CodeModeToolExecutor``
(one ``run_code`` tool whose Python calls an inner executor).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from daemon.errors import ToolTransportError

__all__ = [
    "AuditEntry",
    "AuditObserver",
    "BaseToolExecutor",
    "ToolCallOutput",
    "ToolDefinition",
    "ToolExecutor",
    "ToolTransportError",
]


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as the model (or the sandbox catalog) sees it."""

    name: str
    description: str
    input_schema: dict
    output_schema: dict | None = None
    read_only: bool | None = None  # MCP readOnlyHint
    destructive: bool | None = None  # MCP destructiveHint

    @property
    def mutating(self) -> bool:
        """Whether a call may change something.

        The MCP defaults: an unannotated tool counts as mutating, so only an
        explicit read-only, non-destructive tool is not.
        """
        return self.destructive is True or self.read_only is not True


@dataclass
class ToolCallOutput:
    """The result of one tool call."""

    content: str  # text: what the model (or the sandbox) receives
    is_error: bool
    structured: Any | None = None  # MCP structuredContent, when the server sent one
    audit: dict | None = None  # run_code: {"nested_calls": [...]}


@dataclass(frozen=True)
class AuditEntry:
    """One nested call as the audit keeps it (spec A7): made by code mode as the
    call ends, handed to the :data:`AuditObserver`, stored as a ``tool_calls`` row."""

    tool: str
    arguments: dict[str, Any]
    is_error: bool
    bytes: int  # what the result brought into the sandbox
    mutating: bool  # ToolDefinition.mutating of the tool
    started: str  # ISO 8601, UTC
    duration_ms: float

    def as_json(self) -> dict[str, Any]:
        """The entry as the transcript's ``toolUseResult.nested_calls`` carries it."""
        return asdict(self)


AuditObserver = Callable[[str | None, AuditEntry], Awaitable[None] | None]
"""``observer(thread_id, entry)``, sync or async, called as each nested call ends."""


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs tools. Built synchronously; servers and pools start lazily."""

    def definitions(self) -> list[ToolDefinition]:
        """The tools offered; valid once started."""
        ...

    async def start(self) -> None:
        """Connect servers or start pools. Idempotent."""
        ...

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call one tool. Raises :class:`ToolTransportError` when it cannot be made."""
        ...

    def thread_scope(self, thread_id: str) -> ToolExecutor | None:
        """An executor bound to one conversation thread, or None (the default)."""
        ...

    def context_note(self, thread_id: str) -> str | None:
        """Text to append to the newest user message of the thread's next run."""
        ...

    async def aclose(self) -> None:
        """Release servers, pools and processes."""
        ...


class BaseToolExecutor:
    """Defaults for the optional parts of :class:`ToolExecutor`."""

    async def start(self) -> None:
        """Nothing to start."""

    def thread_scope(self, thread_id: str) -> ToolExecutor | None:
        """No per-thread scope."""
        return None

    def context_note(self, thread_id: str) -> str | None:
        """No note."""
        return None

    async def aclose(self) -> None:
        """Nothing to close."""
