"""The profiles a config chooses from: the default one for capable models, and the
small-model harness (on by default for the embedded local model only).
"""

from __future__ import annotations

import os
from dataclasses import replace

from daemon.config import ModelConfig
from daemon.local_model.fetch import DEFAULT_MODEL
from daemon.model.endpoint import ChatEndpoint
from daemon.model.harness import (
    RULES,
    TRIALS,
    CodeBlockTurns,
    SmallModelProfile,
    Switches,
    from_environ,
    parse_names,
)
from daemon.model.profile import ModelProfile, RunTools, Turns
from daemon.model.prompts import FINAL_ROUND_PROMPT
from daemon.model.rounds import ToolCallTurns

__all__ = ["DefaultProfile", "model_profile"]


def model_profile(params: ModelConfig, model: str | None) -> ModelProfile:
    """The profile for ``model``: the small-model harness when ``[model] harness`` says so,
    else for the embedded local model only; the default profile otherwise.

    The harness's rules switched off (``ASYNCAI_HARNESS_OFF``, and ``[model]
    harness_off``) and trials switched on (``ASYNCAI_HARNESS_ON``, and ``[model]
    harness_trials``), the bench's ablation knobs, are read here, once; an unknown name
    is a :class:`~daemon.errors.ConfigError`."""
    harness = params.harness if params.harness is not None else model == DEFAULT_MODEL.alias
    if not harness:
        return DefaultProfile(params)
    switches = from_environ(os.environ)
    off = parse_names(params.harness_off, RULES, "[model] harness_off")
    trials = parse_names(params.harness_trials, TRIALS, "[model] harness_trials")
    return SmallModelProfile(
        params, Switches(off=switches.off | off, trials=switches.trials | trials)
    )


def _final_round_prompt(question: str) -> str:
    return FINAL_ROUND_PROMPT


class DefaultProfile:
    """Capable models: the tool-call protocol as the OpenAI API has it
    (:class:`~daemon.model.profile.ModelProfile`)."""

    catalog_budget: int | None = None  # code mode's own

    def __init__(self, params: ModelConfig) -> None:
        self.params = params

    def turns(self, endpoint: ChatEndpoint, tools: RunTools, mode: str | None = None) -> Turns:
        """Tool calls; a run paused in the harness's code blocks (the harness was on when it
        paused) goes on in them, without the harness's catalog hints."""
        if mode == CodeBlockTurns.mode:
            return CodeBlockTurns(endpoint, replace(tools, catalog=None), self.params)
        return ToolCallTurns(endpoint, tools, final_instruction=_final_round_prompt)
