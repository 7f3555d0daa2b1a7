"""The small-model profile: what the loop is given for a small model (``[model] harness``).

In code mode a run takes the code-block protocol (:class:`CodeBlockTurns`,
over :mod:`daemon.model.harness.blocks`): the harness's system message with
the compact catalog and the worked example, code blocks instead of tool
calls, their repairs, and the feedback after each block. With the tools
offered directly, the tool-call protocol stays, with the harness's answer
request for the last round and calls written as text read as calls.

The profile holds the run's :class:`~daemon.model.harness.rules.Switches`
(which rules are off, which trials on) and makes them current for every
leg of a run it drives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from daemon.code_mode.catalog import RESERVED_NAMES, SEARCH_HELPERS
from daemon.config import ModelConfig
from daemon.errors import ConfigError
from daemon.model.calls import ToolCall
from daemon.model.conversation import LoopState
from daemon.model.endpoint import ChatEndpoint
from daemon.model.harness.blocks import after_block, code_blocks
from daemon.model.harness.examples import (
    Example,
    closest_examples,
    foreign_calls,
    parse_examples,
    render_examples,
)
from daemon.model.harness.feedback import answer_instruction
from daemon.model.harness.mending import text_calls
from daemon.model.harness.prompts import (
    HARNESS_SYSTEM_PROMPT,
    HOW_TO_ANSWER,
    WORKED_EXAMPLE,
    Signature,
    catalog_signatures,
    compact_description,
    system_prompt,
)
from daemon.model.harness.rules import Switches, active
from daemon.model.harness.topics import Topic, catalog_topics
from daemon.model.profile import RunTools, Turns
from daemon.model.prompts import FINAL_ROUND_PROMPT
from daemon.model.records import RunState
from daemon.model.rounds import ToolCallTurns
from daemon.tools import ToolCallOutput

__all__ = ["HARNESS_CATALOG_BUDGET", "CodeBlockTurns", "SmallModelProfile"]

#: The catalog budget with the harness on, when ``[code_mode] catalog_budget`` is
#: not set: a 1.5B model drives the names-only index (search_tools, describe) so
#: badly that it answered 0 of the bench's first 5 questions through it (10:40 UTC
#: 2026-11-30, against 5 of 5 with stubs), and 16 000 characters of stubs (about
#: 4 500 tokens) still fit its 8 192-token context beside the rules and a run.
HARNESS_CATALOG_BUDGET = 16_000


class SmallModelProfile:
    """The harness: code blocks in code mode, the tool-call protocol's answer request
    and text calls otherwise (:class:`~daemon.model.profile.ModelProfile`).
    ``switches``: the rules switched off (and trials on) for its runs; all rules
    on by default."""

    catalog_budget: int | None = HARNESS_CATALOG_BUDGET

    def __init__(self, params: ModelConfig, switches: Switches | None = None) -> None:
        self.params = params
        self.switches = switches or Switches()
        self.examples = read_examples(params)  # [model] examples, parsed once

    def turns(self, endpoint: ChatEndpoint, tools: RunTools, mode: str | None = None) -> Turns:
        """Code blocks in code mode (or for a run paused in them), else tool calls."""
        if mode == CodeBlockTurns.mode or (mode is None and tools.code_mode):
            # the catalog is read only for code blocks in code mode (a run paused in
            # them and resumed with the tools offered directly has none)
            catalog = tools.catalog if tools.code_mode else None
            return CodeBlockTurns(
                endpoint,
                replace(tools, catalog=catalog),
                self.params,
                self.switches,
                examples=self.examples,
            )
        on = self.switches.on
        return ToolCallTurns(
            endpoint,
            tools,
            final_instruction=(
                _answer_from_tool_results if on("direct-answer-instruction") else _final_round
            ),
            # a call written as text (Qwen's <tool_call>, JSON) is a call
            **({"text_calls": text_calls} if on("text-calls") else {}),
        )


def read_examples(params: ModelConfig) -> list[Example]:
    """The examples of ``[model] examples`` (none without the file); a file that cannot
    be read or parsed is a :class:`~daemon.errors.ConfigError` naming it."""
    path = params.examples
    if path is None:
        return []
    text = params.examples_text
    try:
        if text is None:  # a ModelConfig built in code, not loaded
            text = path.read_text(encoding="utf-8")
        return parse_examples(text, path.name)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model.examples {path}: {exc}") from exc


def _final_round(question: str) -> str:
    """The last round's request without the harness (rule ``direct-answer-instruction`` off)."""
    return FINAL_ROUND_PROMPT


def _answer_from_tool_results(question: str) -> str:
    """The last round's request: the harness's answer instruction."""
    return answer_instruction(question, "the tool results above")


class CodeBlockTurns:
    """The code-block protocol (:mod:`daemon.model.harness.blocks`) as
    :class:`~daemon.model.profile.Turns`: the model replies with a fenced
    ``python`` block (no ``tools`` in the request), which runs as ``run_code``."""

    mode = "small"
    offers_tools = False

    def __init__(
        self,
        endpoint: ChatEndpoint,
        tools: RunTools,
        params: ModelConfig,
        switches: Switches | None = None,
        *,
        examples: list[Example] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.tools = tools
        self.params = params
        self.switches = switches or Switches()
        catalog = tools.catalog
        self.functions: dict[str, Signature] = (
            catalog_signatures(catalog) if catalog is not None else {}
        )
        # solved questions to choose from per question (rule examples); none: the one
        # worked example. The file is the endpoint's, shared by channels that see other
        # tools (issue 29): an example that calls a tool this channel does not see is not
        # shown, so no channel's prompt names a tool it may not use.
        self.examples = (examples or []) if self.switches.on("examples") else []
        if tools.hidden:
            known = (*self.functions, *RESERVED_NAMES, *SEARCH_HELPERS)
            self.examples = [
                e
                for e in self.examples
                if not tools.hidden.intersection(foreign_calls(e.code, known))
            ]
        # what each catalog function is about (the harness's hints)
        self.topics: dict[str, Topic] = catalog_topics(catalog) if catalog is not None else {}
        entries = catalog.entries.items() if catalog is not None else ()
        # catalog functions of mutating tools (the harness's vote skips them)
        self.mutating = sorted(name for name, entry in entries if entry.definition.mutating)

    def system_prompt(self) -> str:
        """The harness's rules, the compact catalog and the worked example; a run_code
        that is not code mode's has no catalog: its description is shown whole. Rule
        ``worked-example`` off: no example. With ``[model] examples``, the first of them
        (a run's own are chosen by :meth:`loop_state`)."""
        return self._system(self.examples[:1])

    def _system(self, examples: list[Example]) -> str:
        """The system message with ``examples``, or the worked example when there are none;
        everything before them is the same from question to question (the server's
        prompt cache holds it)."""
        tools = self.tools
        definitions = list(tools.definitions.values())
        with self._switched():
            description = (
                compact_description(tools.catalog)
                if tools.catalog is not None
                else (definitions[0].description if definitions else "")
            )
        example = self._example(examples)
        return system_prompt(
            self.params.system_prompt or HARNESS_SYSTEM_PROMPT,
            description,
            example if self.switches.on("worked-example") else "",
        )

    def _example(self, examples: list[Example]) -> str:
        """The example text the system message shows: ``examples``, else the worked one."""
        if examples:
            return f"{HOW_TO_ANSWER}\n\n{render_examples(examples)}"
        return self.params.worked_example or WORKED_EXAMPLE

    def _chosen(self, question: str) -> list[Example]:
        """The examples shown for ``question`` (the same again for a resumed run), by
        :func:`~daemon.model.harness.examples.closest_examples` under this run's
        switches."""
        if not self.examples:
            return []
        with self._switched():
            return closest_examples(question, self.examples)

    @contextmanager
    def _switched(self) -> Iterator[None]:
        """This run's switches, current for the harness's rules."""
        with active(self.switches):
            yield

    def loop_state(self, messages: list[dict[str, Any]], question: str) -> LoopState:
        """A new run's position, with the code-block counters; with ``[model] examples``,
        the system message shows the ones closest to ``question``."""
        if self.examples and messages and messages[0].get("role") == "system":
            messages[0] = {"role": "system", "content": self._system(self._chosen(question))}
        return LoopState(
            mode=self.mode,
            messages=messages,
            question=question,
            code_mode=self.tools.code_mode,
            base=len(messages),
            samples=self.params.answer_samples,
            mutating=self.mutating,
        )

    async def rounds(self, run: RunState, ls: LoopState) -> None:
        """Blocks until the model answers (:func:`~daemon.model.harness.blocks.code_blocks`)."""
        tools = self.tools
        with self._switched():
            await code_blocks(
                self.endpoint,
                run,
                tools.caller,
                tools.names,
                ls,
                functions=self.functions,
                topics=self.topics,
                example=self._example(self._chosen(ls.question)),
            )

    async def after_call(
        self, run: RunState, ls: LoopState, call: ToolCall, output: ToolCallOutput
    ) -> None:
        """A decided block's result and the next message
        (:func:`~daemon.model.harness.blocks.after_block`)."""
        with self._switched():
            await after_block(
                self.endpoint,
                run,
                self.tools.caller,
                ls,
                call,
                output,
                functions=self.functions,
                topics=self.topics,
            )
