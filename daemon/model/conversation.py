"""Where a model loop stands, as a value: what a paused run stores and resumes from.

Both protocols (tool calls, ``daemon.model.rounds``, and the small-model
harness's code blocks, ``daemon.model.harness.blocks``) keep their position in a
:class:`LoopState` instead of local variables, so that a run stopped at a
tool call waiting for approval can be written to SQLite as JSON
(:meth:`LoopState.to_json`) and go on from the same place in another
process (:meth:`LoopState.from_json`): the messages sent so far, the round,
the calls of the assistant message being worked through, the transcript
records and the metrics, and the small loop's counters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from daemon.approvals import Pause
from daemon.model.calls import ToolCall
from daemon.model.records import RunState
from daemon.runtime.runs import RunRequest
from sessions.model import Record, RunMetrics

__all__ = ["CONVERSATION_VERSION", "ConversationError", "LoopState", "Paused"]

CONVERSATION_VERSION = 1


class ConversationError(ValueError):
    """A stored conversation this version cannot continue (another format, or damaged)."""


class Paused(Exception):
    """Raised inside a loop when a tool call ends in a :class:`~daemon.approvals.Pause`."""

    def __init__(self, pause: Pause):
        super().__init__("the run waits for approval")
        self.pause = pause


@dataclass
class LoopState:
    """The position of one run's model loop."""

    mode: str  # the protocol (Turns.mode): "plain" (tool calls) or "small" (code blocks)
    messages: list[dict[str, Any]] = field(default_factory=list)
    round_no: int = 0
    calls: list[ToolCall] = field(default_factory=list)  # the current assistant message's
    next_call: int = 0  # the index of the call being made (the paused one, when paused)
    assistant_uuid: str = ""  # the record that carries the calls' tool_use blocks
    question: str = ""  # the prompts' text
    code_mode: bool = True
    # the small loop's counters
    base: int = 0
    failures: int = 0
    answering: bool = False
    last_result: str | None = None
    # the reply when the last good result is a short value ([model]
    # reply_with_short_result): no answer round is asked
    short_reply: str | None = None
    samples: int = 1  # snippets drawn for a short answer ([model] answer_samples)
    voted: bool = False  # the vote for this run's answer was taken
    refetched: bool = False  # a good result was sent back for a URL never fetched
    looked: bool = False  # the model was shown its variables (a look)
    mutating: list[str] = field(default_factory=list)  # functions a vote never re-runs

    def to_json(self, run: RunState) -> dict[str, Any]:
        """This position and the run's records, metrics and call ids, as JSON."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "calls"}
        data["calls"] = [asdict(c) for c in self.calls]
        return {
            "version": CONVERSATION_VERSION,
            "loop": data,
            "records": [asdict(r) for r in run.records],
            "metrics": asdict(run.metrics),
            "call_ids": sorted(run.call_ids),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], request: RunRequest) -> tuple[LoopState, RunState]:
        """The position and the run state stored by :meth:`to_json`."""
        version = data.get("version") if isinstance(data, dict) else None
        if version != CONVERSATION_VERSION:
            raise ConversationError(
                f"a stored conversation of format {version!r} "
                f"(this asyncai reads {CONVERSATION_VERSION})"
            )
        try:
            # a key a former version stored and this one has no use for is left out
            # (a paused run outlives an upgrade): "checked", "rechecked" and "restarted",
            # the positions of removed rules
            loop = {k: v for k, v in dict(data["loop"]).items() if k in _LOOP_FIELDS}
            calls = [ToolCall(**c) for c in loop.pop("calls")]
            state = cls(calls=calls, **loop)
            run = RunState(
                request,
                records=[Record(**r) for r in data["records"]],
                metrics=RunMetrics(**data["metrics"]),
                call_ids=set(data["call_ids"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConversationError(f"a damaged stored conversation: {exc}") from exc
        return state, run


_LOOP_FIELDS = frozenset(f.name for f in fields(LoopState))
