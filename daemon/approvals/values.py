"""What approvals pass across the executor boundary: verdicts, pending calls, pauses, decisions.

An :data:`ApprovalGate` says of each mutating call whether it may run
(:class:`Verdict`); a call that must wait for a person ends the tool call with
a :class:`Pause` (the pending calls, and the Monty snapshot in code mode), and
the run is resumed later with one :class:`Decision` per pending call.

The gate reads a tool through :class:`GatedTool`, the few facts it needs
(``daemon.tools.ToolDefinition`` is one), so that these values stay below
the executor interface that carries them: ``daemon.tools`` imports them, not
the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["ApprovalGate", "Decision", "GatedTool", "Pause", "PendingCall", "Verdict"]


class GatedTool(Protocol):
    """What the approval gate reads of a tool (``daemon.tools.ToolDefinition`` is one)."""

    @property
    def destructive(self) -> bool | None:
        """MCP ``destructiveHint``."""
        ...

    @property
    def mutating(self) -> bool:
        """Whether a call may change something (unannotated tools count as mutating)."""
        ...

    @property
    def qualified_name(self) -> str:
        """``server.tool``, what approval globs match (just the name without a server)."""
        ...


@dataclass(frozen=True)
class Verdict:
    """What the approval policy says of one call: run it, refuse it, or ask a person."""

    action: Literal["allow", "deny", "ask"]
    reason: str = ""  # why: "destructive", "not read-only", "[approvals] deny matches kcp.*"


ApprovalGate = Callable[[GatedTool, dict[str, Any]], Verdict]
"""Asked before each call of a mutating tool is made (never for a read-only one)."""


@dataclass(frozen=True)
class PendingCall:
    """One call that waits for a person's decision."""

    call_id: int  # the sandbox's call id (code mode), or the call's index (direct mode)
    tool: str  # the MCP name
    server: str | None
    arguments: dict[str, Any]
    why: str  # "destructive" or "not read-only"
    py_name: str = ""  # the sandbox function name (code mode)


@dataclass(frozen=True)
class Pause:
    """A tool call stopped before calls that need approval; everything to resume it.

    ``snapshot`` is the Monty snapshot of the paused snippet (code mode; None in
    direct mode); ``state`` is the engine's JSON bookkeeping besides it (calls
    made but not yet awaited).
    """

    calls: tuple[PendingCall, ...]
    snapshot: bytes | None = None
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """A person's (or the expiry's) answer to one pending call."""

    approved: bool
    by: str  # a nick, or "expiry"
    reason: str = ""
    waited_ms: float = 0.0
    kind: Literal["approved", "denied", "expired"] = "approved"
