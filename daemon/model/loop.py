"""The OpenAI-compatible model loop: one ``RunRequest`` in, one ``RunResult`` out.

A run sends the system prompt, the thread's earlier text, and one user
message (the coalesced prompts, then the executor's context note), and
loops: each tool call the model makes goes to the executor, its result goes
back as a tool message, for at most ``max_rounds`` requests. The last request
withdraws the tools and asks for an answer from the results so far, so a run
always ends with a reply. With the small-model harness on in code mode the
code-block loop (``daemon.model.small``) runs instead.

The backend is handed a :class:`~daemon.tools.ToolExecutor` and never knows
which: with code mode its tool list is exactly ``[run_code]`` (invariant 1);
the ``direct`` tool mode hands it the MCP executor itself. The harness reads
the code-mode catalog through :class:`~daemon.code_mode.catalog.CatalogSource`.

An assistant message carrying tool calls is sent with ``"content": ""``,
never null (some servers reject null). Requests and their retries are
``daemon.model.endpoint``'s, tool calls ``daemon.model.calls``' and
``daemon.model.execute``'s, records and metrics ``daemon.model.records``'.

Log events (logger ``asyncai.backend``): ``model.turn_summary`` (info, at the
end of every run) and ``model.run_failed`` (error).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import structlog

from daemon.backoff import Backoff
from daemon.code_mode.catalog import CatalogSource
from daemon.config import Config, ModelConfig
from daemon.errors import AsyncaiError
from daemon.local_model.fetch import DEFAULT_MODEL
from daemon.logging import register_secret
from daemon.model.calls import parse_calls, text_calls, tool_params
from daemon.model.endpoint import ChatEndpoint
from daemon.model.execute import run_call
from daemon.model.harness import (
    HARNESS_SYSTEM_PROMPT,
    WORKED_EXAMPLE,
    answer_instruction,
    catalog_signatures,
    compact_description,
    system_prompt,
)
from daemon.model.prompts import (
    CODE_MODE_SYSTEM_PROMPT,
    DIRECT_SYSTEM_PROMPT,
    EMPTY_REPLY,
    FINAL_ROUND_PROMPT,
)
from daemon.model.records import (
    RunState,
    assistant_record,
    count_result,
    log_summary,
    user_record,
)
from daemon.model.small import code_blocks
from daemon.runtime.runs import RunRequest, RunResult
from daemon.tools import ToolExecutor

__all__ = ["OpenAiCompatibleBackend"]

log = structlog.get_logger("asyncai.backend")


class OpenAiCompatibleBackend:
    """Runs prompts against any OpenAI-compatible chat completions endpoint.

    ``config`` is the whole :class:`~daemon.config.Config` (its ``[model]``
    section and ``runtime.max_run_seconds``) or just a
    :class:`~daemon.config.ModelConfig`, then with ``max_run_seconds``.
    ``client`` replaces the ``openai.AsyncOpenAI`` the backend would build
    (and then the caller closes it); ``backoff`` replaces the exponential
    sleep between retries (tests pass one that does not sleep).
    """

    def __init__(
        self,
        config: Config | ModelConfig,
        executor: ToolExecutor,
        *,
        client: openai.AsyncOpenAI | None = None,
        max_run_seconds: float | None = None,
        backoff: Backoff | None = None,
    ):
        if isinstance(config, Config):
            self._model_name = config.require_model()
            self.params = config.model
            run_seconds = config.runtime.max_run_seconds
        else:
            self.params = config
            self._model_name = Config(model=config).require_model()
            run_seconds = 900.0
        self.max_run_seconds = max_run_seconds if max_run_seconds is not None else run_seconds
        # the small-model harness: on by default for the embedded local model only
        harness = self.params.harness
        self.harness = harness if harness is not None else self._model_name == DEFAULT_MODEL.alias
        self.executor = executor
        register_secret(self.params.api_key)
        self._owns_client = client is None
        self.client = client or openai.AsyncOpenAI(
            base_url=self.params.base_url,
            # local servers need no key, but the SDK insists on one
            api_key=self.params.api_key or "no-key",
            max_retries=0,  # retries are ours: backoff, logging, a clear final error
            timeout=self.params.request_timeout,
        )
        backoff = backoff or Backoff(
            self.params.backoff_initial, self.params.backoff_max, jitter=0.25
        )
        self._endpoint = ChatEndpoint(self.client, self.params, self._model_name, backoff)

    async def aclose(self) -> None:
        """Close the HTTP client if the backend built it (not the executor: the caller owns it)."""
        if self._owns_client:
            await self.client.close()

    async def run(self, request: RunRequest) -> RunResult:
        """Answer the request's prompts. Failures come back as ``status="failed"``.

        Cancellation (``!stop``, shutdown) propagates as ``CancelledError``
        after the turn summary is logged.
        """
        state = RunState(request)
        started = time.monotonic()
        status, error = "done", None
        deadline = asyncio.timeout(self.max_run_seconds)
        try:
            async with deadline:
                await self._loop(state)
        except TimeoutError:
            if not deadline.expired():
                raise
            status = "failed"
            error = f"the run did not finish within max_run_seconds ({self.max_run_seconds:g} s)"
        except AsyncaiError as exc:  # BackendError, or the executor failed to start
            status, error = "failed", str(exc)
        except asyncio.CancelledError:
            log_summary(state, "interrupted", time.monotonic() - started)
            raise
        log_summary(state, status, time.monotonic() - started)
        if error is not None:
            log.error(
                "model.run_failed", run_id=request.run_id, thread_id=request.thread_id, error=error
            )
            return RunResult(
                reply=f"Sorry, this run failed: {error}",
                records=state.records,
                metrics=state.metrics,
                status="failed",
                error=error,
            )
        return RunResult(reply=state.reply, records=state.records, metrics=state.metrics)

    async def _loop(self, state: RunState) -> None:
        request = state.request
        await self.executor.start()
        scope = self.executor.thread_scope(request.thread_id)
        caller = scope if scope is not None else self.executor
        note = self.executor.context_note(request.thread_id)
        definitions = self.executor.definitions()
        tools, names = tool_params(definitions)
        code_mode = [d.name for d in definitions] == ["run_code"]

        prompt_text = "\n\n".join(p.text for p in request.prompts)
        user_text = f"{prompt_text}\n\n{note}" if note else prompt_text
        small_model = self.harness and code_mode
        catalog = self.executor.catalog if isinstance(self.executor, CatalogSource) else None
        if small_model:
            # small models: the code-block protocol (daemon.model.small); a run_code
            # that is not code mode's has no catalog: its description is shown whole
            description = (
                compact_description(catalog) if catalog is not None else definitions[0].description
            )
            system = system_prompt(
                self.params.system_prompt or HARNESS_SYSTEM_PROMPT,
                description,
                self.params.worked_example or WORKED_EXAMPLE,
            )
        else:
            system = self.params.system_prompt or (
                CODE_MODE_SYSTEM_PROMPT if code_mode else DIRECT_SYSTEM_PROMPT
            )
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        messages += [{"role": t.role, "content": t.text} for t in request.history]
        messages.append({"role": "user", "content": user_text})
        state.records.append(user_record([{"type": "text", "text": prompt_text}]))
        if small_model:
            functions = catalog_signatures(catalog) if catalog is not None else {}
            await code_blocks(
                self._endpoint, state, caller, names, messages, prompt_text, functions
            )
            return

        max_rounds = self.params.max_rounds
        for round_no in range(1, max_rounds + 1):
            final = round_no == max_rounds
            body: dict[str, Any] = {"model": self._model_name, "messages": messages}
            if final and round_no > 1:
                instruction = (
                    answer_instruction(prompt_text, "the tool results above")
                    if self.harness
                    else FINAL_ROUND_PROMPT
                )
                body["messages"] = [*messages, {"role": "user", "content": instruction}]
                state.metrics.final_round_forced = True
            if tools and not final:
                body["tools"] = tools
            self._endpoint.sampling(body)

            response = await self._endpoint.complete(body, state.metrics, request.run_id)
            choice = response.choices[0]
            content = choice.message.content or ""
            calls = [] if final else parse_calls(choice.message.tool_calls or [], state)
            if self.harness and not calls and not final and tools:
                # a call written as text (Qwen's <tool_call> or a JSON block) is a call
                calls = text_calls(content, names, state)
                if calls:
                    content = ""
            assistant = assistant_record(
                response,
                content,
                [c.tool_use() for c in calls],
                choice.finish_reason,
                self._model_name,
            )
            state.records.append(assistant)
            if not calls:
                state.reply = content.strip() or EMPTY_REPLY
                return
            messages.append(
                {
                    "role": "assistant",
                    "content": content,  # "" not null: some servers reject null
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.wire_arguments},
                        }
                        for c in calls
                    ],
                }
            )
            for call in calls:
                output = await run_call(
                    caller, names, call, assistant.uuid, state, self.params.tool_call_timeout
                )
                text = output.content if output.content != "" else "(empty result)"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                count_result(state.metrics, output, text, code_mode)
                result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
                result["content"] = text
                result["is_error"] = output.is_error
                state.records.append(user_record([result], tool_use_result=output.audit))
