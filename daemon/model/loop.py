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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import openai
import structlog

from daemon.backoff import Backoff
from daemon.code_mode.catalog import CatalogSource
from daemon.config import Config, ModelConfig
from daemon.errors import AsyncaiError, BackendError
from daemon.local_model.fetch import DEFAULT_MODEL
from daemon.logging import register_secret
from daemon.model.calls import ToolCall, parse_calls, text_calls, tool_params
from daemon.model.conversation import ConversationError, LoopState, Paused
from daemon.model.endpoint import ChatEndpoint
from daemon.model.execute import decided_call, run_call
from daemon.model.harness import (
    HARNESS_SYSTEM_PROMPT,
    WORKED_EXAMPLE,
    Signature,
    Topic,
    answer_instruction,
    catalog_signatures,
    catalog_topics,
    compact_description,
    system_prompt,
)
from daemon.model.prompts import (
    CODE_MODE_SYSTEM_PROMPT,
    DIRECT_SYSTEM_PROMPT,
    EMPTY_REPLY,
    FINAL_ROUND_PROMPT,
)
from daemon.model.records import RunState, assistant_record, count_result, log_summary, user_record
from daemon.model.small import after_block, code_blocks
from daemon.runtime.runs import PausedRun, RunRequest, RunResult, ToolUseContext, current_tool_use
from daemon.tools import (
    ApprovalGate,
    Decision,
    Pause,
    Resumable,
    ThreadKey,
    ToolCallOutput,
    ToolDefinition,
    ToolExecutor,
)
from sessions.model import RunMetrics

__all__ = ["HARNESS_CATALOG_BUDGET", "OpenAiCompatibleBackend", "harness_on"]

log = structlog.get_logger("asyncai.backend")

#: The catalog budget with the harness on, when ``[code_mode] catalog_budget`` is
#: not set: a 1.5B model drives the names-only index (search_tools, describe) so
#: badly that it answered 0 of the bench's first 5 questions through it (10:40 UTC
#: 2026-11-30, against 5 of 5 with stubs), and 16 000 characters of stubs (about
#: 4 500 tokens) still fit its 8 192-token context beside the rules and a run.
HARNESS_CATALOG_BUDGET = 16_000


def harness_on(params: ModelConfig, model: str | None) -> bool:
    """Whether the small-model harness is on: ``[model] harness``, else on for the
    embedded local model only."""
    return params.harness if params.harness is not None else model == DEFAULT_MODEL.alias


class OpenAiCompatibleBackend:
    """Runs prompts against any OpenAI-compatible chat completions endpoint.

    ``config`` is the whole :class:`~daemon.config.Config` (its ``[model]``
    section and ``runtime.max_run_seconds``) or just a
    :class:`~daemon.config.ModelConfig`, then with ``max_run_seconds``.
    ``client`` replaces the ``openai.AsyncOpenAI`` the backend would build
    (and then the caller closes it); ``backoff`` replaces the exponential
    sleep between retries (tests pass one that does not sleep); ``gate`` is the
    approval policy for direct mode's calls.
    """

    def __init__(
        self,
        config: Config | ModelConfig,
        executor: ToolExecutor,
        *,
        client: openai.AsyncOpenAI | None = None,
        max_run_seconds: float | None = None,
        backoff: Backoff | None = None,
        gate: ApprovalGate | None = None,
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
        self.harness = harness_on(self.params, self._model_name)
        self.executor = executor
        # direct mode: the policy for the model's own calls of mutating tools (code
        # mode asks it inside the sandbox, through the code-mode executor)
        self.gate = gate
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
        """Answer the request's prompts. Failures come back as ``status="failed"``; a
        call that waits for approval ends the run as ``status="paused"``.

        Cancellation (``!stop``, shutdown) propagates as ``CancelledError``
        after the turn summary is logged.
        """
        run = RunState(request)

        async def body(ctx: _Context) -> None:
            ls = self._begin(ctx, run)
            holder.append(ls)
            await self._continue(ctx, run, ls)

        holder: list[LoopState] = []
        return await self._guarded(run, holder, body)

    async def resume(
        self,
        request: RunRequest,
        conversation: dict[str, Any],
        pause: Pause,
        decisions: Mapping[int, Decision],
    ) -> RunResult:
        """Go on with a paused run: the decided call(s) are made or refused, then the
        loop continues from where it stopped (and may pause again)."""
        try:
            ls, run = LoopState.from_json(conversation, request)
        except ConversationError as exc:
            run = RunState(request)
            return self._failed(run, f"the paused run cannot be resumed: {exc}")

        async def body(ctx: _Context) -> None:
            call = ls.calls[ls.next_call]
            output = await self._decided(ctx, run, ls, call, pause, decisions)
            if output.pause is not None:
                raise Paused(output.pause)
            if ls.mode == "small":
                await after_block(
                    self._endpoint, run, ctx.caller, ls, call, output, ctx.functions, ctx.topics
                )
            else:
                self._record_result(ctx, run, ls, call, output)
                ls.next_call += 1
            await self._continue(ctx, run, ls)

        return await self._guarded(run, [ls], body)

    async def _guarded(
        self,
        run: RunState,
        holder: list[LoopState],
        body: Callable[[_Context], Awaitable[None]],
    ) -> RunResult:
        """Run ``body`` under the run's deadline; map its end to a :class:`RunResult`."""
        request = run.request
        started = time.monotonic()
        status, error = "done", None
        deadline = asyncio.timeout(self.max_run_seconds)
        try:
            async with deadline:
                ctx = await self._context(request)
                await body(ctx)
        except Paused as paused:
            log_summary(run, "paused", time.monotonic() - started)
            conversation = holder[-1].to_json(run)
            return RunResult(
                reply="",
                metrics=run.metrics,
                status="paused",
                paused=PausedRun(paused.pause, conversation),
            )
        except TimeoutError:
            if not deadline.expired():
                raise
            status = "failed"
            error = f"the run did not finish within max_run_seconds ({self.max_run_seconds:g} s)"
        except AsyncaiError as exc:  # BackendError, or the executor failed to start
            status, error = "failed", str(exc)
        except asyncio.CancelledError:
            log_summary(run, "interrupted", time.monotonic() - started)
            raise
        log_summary(run, status, time.monotonic() - started)
        if error is not None:
            return self._failed(run, error)
        return RunResult(reply=run.reply, records=run.records, metrics=run.metrics)

    def _failed(self, run: RunState, error: str) -> RunResult:
        request = run.request
        log.error(
            "model.run_failed", run_id=request.run_id, thread_id=request.thread_id, error=error
        )
        return RunResult(
            reply=f"Sorry, this run failed: {error}",
            records=run.records,
            metrics=run.metrics,
            status="failed",
            error=error,
        )

    async def warm_up(self) -> float:
        """Send the byte-stable start of every run (the system prompt, and the tools)
        with a one-token answer, so that a llama.cpp server's prompt cache holds it
        before the first prompt; the seconds it took. Best effort: a failure is
        logged, never raised (the first run then pays for it)."""
        started = time.monotonic()
        try:
            ctx = await self._context(None)
            body: dict[str, Any] = {
                "model": self._model_name,
                "messages": [
                    {"role": "system", "content": self._system_prompt(ctx)},
                    {"role": "user", "content": "hello"},
                ],
            }
            if ctx.tools and not ctx.small:
                body["tools"] = ctx.tools
            self._endpoint.sampling(body)
            body["max_tokens"] = 1  # after sampling(), which may set the configured one
            await self._endpoint.complete(body, RunMetrics(), "warm-up")
        except AsyncaiError as exc:
            log.warning("model.warm_up_failed", error=str(exc))
        seconds = time.monotonic() - started
        log.info("model.warmed_up", seconds=round(seconds, 2))
        return seconds

    async def _context(self, request: RunRequest | None) -> _Context:
        """What every leg of a run needs of the executor (the same after a restart);
        without a request, the executor itself (no thread scope)."""
        await self.executor.start()
        scope = self.executor.thread_scope(request.thread) if request is not None else None
        definitions = self.executor.definitions()
        tools, names = tool_params(definitions)
        code_mode = [d.name for d in definitions] == ["run_code"]
        catalog = self.executor.catalog if isinstance(self.executor, CatalogSource) else None
        small = self.harness and code_mode
        harnessed = catalog if small else None  # the catalog the harness reads
        functions = catalog_signatures(harnessed) if harnessed is not None else {}
        topics = catalog_topics(harnessed) if harnessed is not None else {}
        entries = harnessed.entries.items() if harnessed is not None else ()
        mutating = sorted(name for name, entry in entries if entry.definition.mutating)
        return _Context(
            caller=scope if scope is not None else self.executor,
            thread=request.thread if request is not None and scope is not None else None,
            tools=tools,
            names=names,
            definitions={d.name: d for d in definitions},
            code_mode=code_mode,
            small=small,
            functions=functions,
            topics=topics,
            mutating=mutating,
            description=(
                compact_description(catalog)
                if catalog is not None
                else (definitions[0].description if definitions else "")
            ),
        )

    def _system_prompt(self, ctx: _Context) -> str:
        """The system message of every run (byte-stable: llama.cpp caches its prefix)."""
        if ctx.small:
            # small models: the code-block protocol (daemon.model.small); a run_code
            # that is not code mode's has no catalog: its description is shown whole
            return system_prompt(
                self.params.system_prompt or HARNESS_SYSTEM_PROMPT,
                ctx.description,
                self.params.worked_example or WORKED_EXAMPLE,
            )
        return self.params.system_prompt or (
            CODE_MODE_SYSTEM_PROMPT if ctx.code_mode else DIRECT_SYSTEM_PROMPT
        )

    def _begin(self, ctx: _Context, run: RunState) -> LoopState:
        """The first messages of a run: system, history, the prompts (and the note)."""
        request = run.request
        note = self.executor.context_note(request.thread)
        prompt_text = "\n\n".join(p.text for p in request.prompts)
        user_text = f"{prompt_text}\n\n{note}" if note else prompt_text
        messages: list[dict[str, Any]] = [{"role": "system", "content": self._system_prompt(ctx)}]
        messages += [{"role": t.role, "content": t.text} for t in request.history]
        messages.append({"role": "user", "content": user_text})
        run.records.append(user_record([{"type": "text", "text": prompt_text}]))
        return LoopState(
            mode="small" if ctx.small else "plain",
            messages=messages,
            question=prompt_text,
            code_mode=ctx.code_mode,
            base=len(messages),
            samples=self.params.answer_samples if ctx.small else 1,
            mutating=ctx.mutating,
        )

    async def _continue(self, ctx: _Context, run: RunState, ls: LoopState) -> None:
        if ls.mode == "small":
            await code_blocks(
                self._endpoint, run, ctx.caller, ctx.names, ls, ctx.functions, ctx.topics
            )
            return
        await self._calls(ctx, run, ls)  # what is left of a resumed message's calls
        max_rounds = self.params.max_rounds
        messages = ls.messages
        while ls.round_no < max_rounds:
            ls.round_no += 1
            round_no = ls.round_no
            final = round_no == max_rounds
            body: dict[str, Any] = {"model": self._model_name, "messages": messages}
            if final and round_no > 1:
                instruction = (
                    answer_instruction(ls.question, "the tool results above")
                    if self.harness
                    else FINAL_ROUND_PROMPT
                )
                body["messages"] = [*messages, {"role": "user", "content": instruction}]
                run.metrics.final_round_forced = True
            if ctx.tools and not final:
                body["tools"] = ctx.tools
            self._endpoint.sampling(body)

            response = await self._endpoint.complete(
                body, run.metrics, run.request.run_id, final=final
            )
            choice = response.choices[0]
            content = choice.message.content or ""
            calls = [] if final else parse_calls(choice.message.tool_calls or [], run)
            if self.harness and not calls and not final and ctx.tools:
                # a call written as text (Qwen's <tool_call> or a JSON block) is a call
                calls = text_calls(content, ctx.names, run)
                if calls:
                    content = ""
            assistant = assistant_record(
                response,
                content,
                [c.tool_use() for c in calls],
                choice.finish_reason,
                self._model_name,
            )
            run.records.append(assistant)
            if not calls:
                run.reply = content.strip() or EMPTY_REPLY
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
            ls.calls, ls.next_call, ls.assistant_uuid = calls, 0, assistant.uuid
            await self._calls(ctx, run, ls)

    async def _calls(self, ctx: _Context, run: RunState, ls: LoopState) -> None:
        """Make the current message's calls from ``ls.next_call`` on, in order."""
        while ls.next_call < len(ls.calls):
            call = ls.calls[ls.next_call]
            output = await run_call(
                ctx.caller,
                ctx.names,
                call,
                ls.assistant_uuid,
                run,
                self.params.tool_call_timeout,
                gate=None if ctx.code_mode else self.gate,
                definitions=ctx.definitions,
            )
            if output.pause is not None:
                raise Paused(output.pause)
            self._record_result(ctx, run, ls, call, output)
            ls.next_call += 1

    def _record_result(
        self, ctx: _Context, run: RunState, ls: LoopState, call: ToolCall, output: ToolCallOutput
    ) -> None:
        text = output.content if output.content != "" else "(empty result)"
        ls.messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        count_result(run.metrics, output, text, ctx.code_mode)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
        result["content"] = text
        result["is_error"] = output.is_error
        run.records.append(user_record([result], tool_use_result=output.audit))

    async def _decided(
        self,
        ctx: _Context,
        run: RunState,
        ls: LoopState,
        call: ToolCall,
        pause: Pause,
        decisions: Mapping[int, Decision],
    ) -> ToolCallOutput:
        """The paused call's output, now that its pending calls are decided."""
        if pause.snapshot is not None:  # code mode: the snippet goes on in its REPL
            if not isinstance(self.executor, Resumable):
                raise BackendError("the executor cannot resume a paused snippet")
            request = run.request
            token = current_tool_use.set(
                ToolUseContext(request.run_id, request.thread_id, call.id, ls.assistant_uuid)
            )
            try:
                async with asyncio.timeout(self.params.tool_call_timeout):
                    return await self.executor.resume(ctx.thread, pause, decisions)
            except TimeoutError:
                return ToolCallOutput(
                    f"Error: run_code did not finish within {self.params.tool_call_timeout:g} s "
                    "after the approval and was cancelled.",
                    is_error=True,
                )
            finally:
                current_tool_use.reset(token)
        (pending,) = pause.calls  # direct mode: one call at a time
        decision = decisions.get(pending.call_id) or Decision(False, "nobody", "no decision")
        return await decided_call(
            ctx.caller,
            pending,
            decision,
            call.id,
            ls.assistant_uuid,
            run,
            self.params.tool_call_timeout,
        )


@dataclass(frozen=True)
class _Context:
    """The executor's side of a run: who to call, under which names."""

    caller: ToolExecutor
    thread: ThreadKey | None  # the REPL scope's thread; None when the executor has no scopes
    tools: list[dict[str, Any]]
    names: dict[str, str]
    definitions: dict[str, ToolDefinition]
    code_mode: bool
    small: bool
    functions: dict[str, Signature]
    topics: dict[str, Topic]  # what each catalog function is about (the harness's hints)
    mutating: list[str]  # catalog functions of mutating tools (the harness's vote skips them)
    description: str
