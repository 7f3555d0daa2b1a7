"""Approvals in code mode (issue 13), the pure part: what a paused snippet stores, and the texts.

The engine (:mod:`daemon.code_mode.sandbox.engine`) asks the :data:`~daemon.approvals.ApprovalGate`
about each mutating call as the sandbox awaits it; a call the gate sends to
a person is *held*. When every call the snippet waits on is held, the
engine dumps the Monty session and ends the run with a
:class:`~daemon.approvals.Pause`. This module holds the values around that,
without I/O:

- :class:`MadeCall`, a call the sandbox made (catalog entry, sandbox name,
  JSON arguments, and why it is held);
- :func:`pause_state` / :func:`restore_state`: the engine's bookkeeping as
  JSON in ``Pause.state`` (calls made but not yet awaited, held calls,
  counters, the snippet's text and prints so far), and back, looking calls
  up by sandbox name in the catalog rebuilt after a restart;
- :func:`unlike_shown`: whether a held call, looked up again, is still the
  ``server.tool`` with the arguments the approver was shown;
- :func:`denial_message` / :func:`policy_denial`: the ``PermissionError``
  text a denied call raises in the snippet;
- :func:`render_paused`: the ``run_code`` text of a paused run;
- :func:`stamp`, :func:`stamping_observer`, :func:`denied_entry`: the
  decision on the audit entries.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from daemon.approvals import Decision, PendingCall
from daemon.code_mode.catalog import Catalog, CatalogEntry
from daemon.code_mode.convert import dumps_compact
from daemon.tools import AuditEntry, AuditObserver

__all__ = [
    "STATE_VERSION",
    "MadeCall",
    "PauseStateError",
    "RestoredState",
    "denial_message",
    "denied_entry",
    "pause_state",
    "pending_calls",
    "policy_denial",
    "refused_entry",
    "render_paused",
    "restore_state",
    "stamp",
    "stamping_observer",
    "unlike_shown",
]

STATE_VERSION = 1
# Arguments shown per call in the paused text; the full ones are in Pause.calls.
_ARGS_PREVIEW = 200


class PauseStateError(ValueError):
    """``Pause.state`` is not what this engine wrote (another version, or damaged)."""


@dataclass
class MadeCall:
    """A catalog call the sandbox made: not yet awaited, or held for approval (``why``)."""

    entry: CatalogEntry
    py_name: str
    arguments: dict[str, Any]
    why: str = ""

    def pending(self, call_id: int) -> PendingCall:
        """The call as the approval request lists it."""
        return PendingCall(
            call_id=call_id,
            tool=self.entry.tool_name,
            server=self.entry.definition.server,
            arguments=self.arguments,
            why=self.why,
            py_name=self.py_name,
        )


def pending_calls(held: dict[int, MadeCall]) -> tuple[PendingCall, ...]:
    """The held calls of a pause, in call order."""
    return tuple(held[cid].pending(cid) for cid in sorted(held))


def _calls_json(calls: dict[int, MadeCall]) -> list[dict[str, Any]]:
    return [
        {"call_id": cid, "py_name": c.py_name, "arguments": c.arguments, "why": c.why}
        for cid, c in sorted(calls.items())
    ]


def pause_state(
    *,
    code: str,
    prints: str,
    pending: dict[int, MadeCall],
    held: dict[int, MadeCall],
    suspensions: int,
    nested_calls: int,
) -> dict[str, Any]:
    """The engine's bookkeeping beside the snapshot, as JSON (``Pause.state``)."""
    return {
        "version": STATE_VERSION,
        "code": code,
        "prints": prints,
        "pending": _calls_json(pending),
        "held": _calls_json(held),
        "suspensions": suspensions,
        "nested_calls": nested_calls,
    }


@dataclass
class RestoredState:
    """``Pause.state`` read back against the current catalog.

    ``gone`` maps call ids of held calls whose tool is no longer offered to
    their sandbox names; the engine answers them with an error instead of
    calling anything. Calls made but not awaited whose tool is gone are
    dropped (awaiting them later raises the stale-call error).
    """

    code: str
    prints: str
    pending: dict[int, MadeCall]
    held: dict[int, MadeCall]
    suspensions: int
    nested_calls: int
    gone: dict[int, str] = field(default_factory=dict)


def _read_calls(raw: Any, catalog: Catalog, gone: dict[int, str] | None) -> dict[int, MadeCall]:
    if not isinstance(raw, list):
        raise PauseStateError("calls must be a list")
    calls: dict[int, MadeCall] = {}
    for item in raw:
        try:
            cid, py_name = item["call_id"], item["py_name"]
            arguments, why = item["arguments"], item.get("why", "")
        except (KeyError, TypeError) as exc:
            raise PauseStateError(f"a call lacks {exc}") from exc
        if not (isinstance(cid, int) and isinstance(py_name, str) and isinstance(arguments, dict)):
            raise PauseStateError(f"a call is malformed: {item!r:.200}")
        entry = catalog.lookup(py_name)
        if entry is None:
            if gone is not None:
                gone[cid] = py_name
            continue
        calls[cid] = MadeCall(entry, py_name, arguments, str(why))
    return calls


def restore_state(state: dict[str, Any], catalog: Catalog) -> RestoredState:
    """Read ``Pause.state`` back. Raises :class:`PauseStateError` when it cannot."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        version = state.get("version") if isinstance(state, dict) else None
        raise PauseStateError(f"unknown pause state version {version!r}")
    gone: dict[int, str] = {}
    code, prints = state.get("code", ""), state.get("prints", "")
    suspensions, nested_calls = state.get("suspensions", 0), state.get("nested_calls", 0)
    if not (isinstance(code, str) and isinstance(prints, str)):
        raise PauseStateError("code and prints must be text")
    if not (isinstance(suspensions, int) and isinstance(nested_calls, int)):
        raise PauseStateError("the counters must be integers")
    return RestoredState(
        code=code,
        prints=prints,
        pending=_read_calls(state.get("pending", []), catalog, None),
        held=_read_calls(state.get("held", []), catalog, gone),
        suspensions=suspensions,
        nested_calls=nested_calls,
        gone=gone,
    )


def unlike_shown(call: MadeCall, shown: PendingCall | None) -> str | None:
    """Why ``call``, as the current catalog resolves it, is not the call the approver was
    shown (``shown``, from the request), or None when it is the same ``server.tool`` with
    the same arguments. The catalog is rebuilt after a restart: a server that came back
    after a failed start may own the sandbox name now (issue 26)."""
    if shown is None:
        return "it is not in the approval request"
    definition = call.entry.definition
    approved = f"{shown.server}.{shown.tool}" if shown.server else shown.tool
    if (definition.server, definition.name) != (shown.server, shown.tool):
        return (
            f"{approved} was approved, but {call.py_name}() now reaches {definition.qualified_name}"
        )
    if call.arguments != shown.arguments:
        return f"its arguments are not the ones approved for {approved}"
    return None


def denial_message(decision: Decision) -> str:
    """The ``PermissionError`` text of a call a person denied, or that expired.

    The caller chooses the wording through the decision: ``kind="expired"``
    gives ``denied: <reason>`` (say the reason, e.g. ``"the request expired
    after 600 s"``); otherwise ``denied by <by>: <reason>``, or ``denied by
    <by>`` without a reason.
    """
    reason = decision.reason.strip()
    if decision.kind == "expired":
        return f"denied: {reason or 'the request expired'}"
    return f"denied by {decision.by}: {reason}" if reason else f"denied by {decision.by}"


def policy_denial(reason: str) -> str:
    """The ``PermissionError`` text of a call the approval policy refused outright."""
    return reason.strip() or "denied by the approval policy"


def _call_text(call: PendingCall) -> str:
    args = ", ".join(f"{k}={dumps_compact(v)}" for k, v in call.arguments.items())
    if len(args) > _ARGS_PREVIEW:
        args = args[:_ARGS_PREVIEW] + "…"
    return f"{call.py_name or call.tool}({args})"


def render_paused(calls: tuple[PendingCall, ...]) -> str:
    """The ``run_code`` text of a run paused before ``calls``."""
    listed = "; ".join(_call_text(c) for c in calls)
    return (
        f"(paused: waiting for approval of {listed}. The snippet continues where it "
        "stopped once a person decides; a denied call raises PermissionError there.)"
    )


def stamp(entry: AuditEntry, decision: Decision) -> AuditEntry:
    """``entry`` with the person's decision on it."""
    return replace(
        entry, decision=decision.kind, decided_by=decision.by, wait_ms=decision.waited_ms
    )


def stamping_observer(observer: AuditObserver | None, decision: Decision) -> AuditObserver | None:
    """An observer that hands ``observer`` each entry stamped with ``decision``."""
    if observer is None:
        return None

    async def stamped(thread_id: str | None, entry: AuditEntry) -> None:
        maybe = observer(thread_id, stamp(entry, decision))
        if inspect.isawaitable(maybe):
            await maybe

    return stamped


def denied_entry(call: MadeCall, kind: str, by: str, wait_ms: float | None) -> AuditEntry:
    """The audit entry of a call that was refused and so never made."""
    return refused_entry(call.entry, call.arguments, kind, by, wait_ms)


def refused_entry(
    entry: CatalogEntry, arguments: dict[str, Any], kind: str, by: str, wait_ms: float | None
) -> AuditEntry:
    """The audit entry of a call of ``entry`` that was refused and so never made."""
    return AuditEntry(
        tool=entry.tool_name,
        arguments=arguments,
        is_error=True,
        bytes=0,
        mutating=entry.definition.mutating,
        started=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        duration_ms=0.0,
        outcome="error",
        decision="expired" if kind == "expired" else "denied",
        decided_by=by,
        wait_ms=wait_ms,
    )
