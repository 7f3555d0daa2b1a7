"""What differs from one kind of model to another: the interface of a model profile.

In the spirit of pydantic-ai's model profiles, the loop
(:mod:`daemon.model.loop`) is given one :class:`ModelProfile` and never asks
which model it talks to. The profile says what code mode's catalog budget
should be for its models (:attr:`ModelProfile.catalog_budget`), and for each
leg of a run, from the executor's side of it (:class:`RunTools`), which
:class:`Turns` to take: the system prompt, whether requests carry the tools,
how the model's replies become calls (tool calls, or code blocks), and what
follows a call that ran.

Two profiles exist: the default one for capable models
(:mod:`daemon.model.profiles`: tool calls, as the OpenAI API has them) and
the small-model harness (:mod:`daemon.model.harness`: code blocks, repairs
and feedback for a 1.5B model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from daemon.approvals import ApprovalGate
from daemon.code_mode.catalog import Catalog
from daemon.model.calls import ToolCall
from daemon.model.conversation import LoopState
from daemon.model.endpoint import ChatEndpoint
from daemon.model.records import RunState
from daemon.tools import ThreadKey, ToolCallOutput, ToolDefinition, ToolExecutor

__all__ = ["ModelProfile", "RunTools", "Turns"]


@dataclass(frozen=True)
class RunTools:
    """The executor's side of a run: who to call, under which names (the same after a restart)."""

    caller: ToolExecutor
    thread: ThreadKey | None  # the REPL scope's thread; None when the executor has no scopes
    tools: list[dict[str, Any]]  # the OpenAI ``tools`` of the request
    names: dict[str, str]  # the model's name for a tool → the tool's
    definitions: dict[str, ToolDefinition]
    code_mode: bool  # the one tool is code mode's run_code
    catalog: Catalog | None  # code mode's catalog, when the executor has one
    gate: ApprovalGate | None  # direct mode: the policy for the model's own mutating calls
    # code mode: the sandbox names of the daemon's tools this channel does not see (issue 29)
    hidden: frozenset[str] = frozenset()


class Turns(Protocol):
    """One leg of a run as a profile shapes it: the prompt, and the loop of its rounds."""

    #: the protocol's name, stored in a paused run (:attr:`LoopState.mode`) so that it goes
    #: on in the same protocol
    mode: str
    #: whether requests carry the OpenAI ``tools`` (the warm-up's too)
    offers_tools: bool

    def system_prompt(self) -> str:
        """The system message of every run (byte-stable: llama.cpp caches its prefix)."""
        ...

    def loop_state(self, messages: list[dict[str, Any]], question: str) -> LoopState:
        """The position of a new run that starts with ``messages`` and asks ``question``."""
        ...

    async def rounds(self, run: RunState, ls: LoopState) -> None:
        """Ask the model, make its calls and go on from ``ls`` until it answers (``run.reply``);
        a call waiting for an approval raises :class:`~daemon.model.conversation.Paused`."""
        ...

    async def after_call(
        self, run: RunState, ls: LoopState, call: ToolCall, output: ToolCallOutput
    ) -> None:
        """Record what a call that was paused gave, and move ``ls`` past it."""
        ...


class ModelProfile(Protocol):
    """What the loop is given: everything that differs for one kind of model."""

    #: code mode's catalog budget for these models when ``[code_mode] catalog_budget`` is
    #: not set (None: code mode's own default)
    catalog_budget: int | None

    def turns(self, endpoint: ChatEndpoint, tools: RunTools, mode: str | None = None) -> Turns:
        """The turns of one leg of a run with ``tools``; ``mode``: the protocol a paused run
        was in (:attr:`Turns.mode`), which it keeps."""
        ...
