"""How one snippet ended (:class:`SnippetOutcome`): what the engine's two paths both return.

Its own module so that the report, the hooks and the warm spare read an
outcome without the engine that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.approvals import Pause
from daemon.tools import AuditEntry

__all__ = ["SnippetOutcome"]


@dataclass
class SnippetOutcome:
    """How one snippet ended: its value and prints, or an error; and whether to reset."""

    value: Any = None
    prints: str = ""
    error: str | None = None
    reset: bool = False  # the checkout was discarded after this snippet
    fresh: bool = False  # the snippet ran in a newly checked-out (empty) REPL
    unawaited: list[str] = field(default_factory=list)
    pause: Pause | None = None  # the snippet waits for approval; give the checkout back
    denied: list[AuditEntry] = field(default_factory=list)  # refused calls, never made

    @property
    def ok(self) -> bool:
        """Whether the snippet completed without an error."""
        return self.error is None
