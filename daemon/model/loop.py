"""The OpenAI-compatible model loop: one ``RunRequest`` in, one ``RunResult`` out.

A run sends the system prompt, the thread's earlier text, and one user
message (the coalesced prompts, then the executor's context note), and
goes round by round until the model answers. What differs for one kind of
model is the :class:`~daemon.model.profile.ModelProfile` the backend is
given (by default the one the config chooses, :func:`~daemon.model.profiles.model_profile`):
the system prompt, the protocol of the rounds (tool calls,
``daemon.model.rounds``; or the small-model harness's code blocks,
``daemon.model.harness``) and what follows a call. The loop asks it for the
:class:`~daemon.model.profile.Turns` of each leg of a run and calls them at
three points: the start of a run, its rounds, and a paused call's result.

The backend is handed a :class:`~daemon.tools.ToolExecutor` and never knows
which: with code mode its tool list is exactly ``[run_code]`` (invariant 1);
the ``direct`` tool mode hands it the MCP executor itself. The harness reads
the code-mode catalog through :class:`~daemon.code_mode.catalog.CatalogSource`.

Requests and their retries are ``daemon.model.endpoint``'s, tool calls
``daemon.model.calls``' and ``daemon.model.execute``'s, records and metrics
``daemon.model.records``'. Whatever the profile, a run whose tool calls all
failed or were refused replies with what could not be done and why, never
with the model's words (``daemon.model.nodata``): with no call returning
data, any value it states was invented.

Log events (logger ``asyncai.backend``): ``model.turn_summary`` (info, at the
end of every run), ``model.no_data_reply`` (warning: the reply was replaced)
and ``model.run_failed`` (error).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import openai
import structlog

from daemon.approvals import ApprovalGate, Decision, Pause
from daemon.backoff import Backoff
from daemon.code_mode.catalog import Catalog, CatalogSource
from daemon.config import Config, ModelConfig
from daemon.errors import AsyncaiError, BackendError
from daemon.logging import register_secret
from daemon.model.calls import ToolCall, tool_params
from daemon.model.conversation import ConversationError, LoopState, Paused
from daemon.model.endpoint import ChatEndpoint, ModelSlots
from daemon.model.execute import decided_call
from daemon.model.nodata import no_data_reply, unanswered_calls
from daemon.model.profile import ModelProfile, RunTools, Turns
from daemon.model.profiles import model_profile
from daemon.model.records import RunState, log_summary, unanswered_results, user_record
from daemon.runtime.runs import PausedRun, RunRequest, RunResult, ToolUseContext, current_tool_use
from daemon.runtime.timing import timed
from daemon.tools import Resumable, ToolCallOutput, ToolExecutor
from sessions.model import RunMetrics

__all__ = ["OpenAiCompatibleBackend"]

log = structlog.get_logger("asyncai.backend")


class OpenAiCompatibleBackend:
    """Runs prompts against any OpenAI-compatible chat completions endpoint.

    ``config`` is the whole :class:`~daemon.config.Config` (its ``[model]``
    section and ``runtime.max_run_seconds``) or just a
    :class:`~daemon.config.ModelConfig`, then with ``max_run_seconds``.
    ``client`` replaces the ``openai.AsyncOpenAI`` the backend would build
    (and then the caller closes it); ``backoff`` replaces the exponential
    sleep between retries (tests pass one that does not sleep); ``gate`` is the
    approval policy for direct mode's calls; ``profile`` replaces the one the
    config chooses (:func:`~daemon.model.profiles.model_profile`).
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
        profile: ModelProfile | None = None,
        slots: ModelSlots | None = None,
    ):
        """``slots``: the daemon's model slots, shared by its lanes (None: this backend's own)."""
        if isinstance(config, Config):
            self._model_name = config.require_model()
            self.params = config.model
            run_seconds = config.runtime.max_run_seconds
        else:
            self.params = config
            self._model_name = Config(model=config).require_model()
            run_seconds = 900.0
        self.max_run_seconds = max_run_seconds if max_run_seconds is not None else run_seconds
        # what differs for this model: the small-model harness is on by default for the
        # embedded local model only
        self.profile = profile or model_profile(self.params, self._model_name)
        self.executor = executor
        # once: an isinstance of a runtime-checkable Protocol walks its members each time
        self._catalogs = executor if isinstance(executor, CatalogSource) else None
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
        slots = slots or ModelSlots()
        self._endpoint = ChatEndpoint(
            self.client,
            self.params,
            self._model_name,
            backoff,
            slots.of(self.params, self._model_name),
        )

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

        async def body(ctx: RunTools) -> None:
            turns = self.profile.turns(self._endpoint, ctx)
            ls = self._begin(turns, run)
            holder.append(ls)
            await turns.rounds(run, ls)

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

        async def body(ctx: RunTools) -> None:
            # the run goes on in the protocol it paused in
            turns = self.profile.turns(self._endpoint, ctx, ls.mode)
            call = ls.calls[ls.next_call]
            output = await self._decided(ctx, run, ls, call, pause, decisions)
            if output.pause is not None:
                raise Paused(output.pause)
            await turns.after_call(run, ls, call, output)
            await turns.rounds(run, ls)

        return await self._guarded(run, [ls], body)

    async def _guarded(
        self,
        run: RunState,
        holder: list[LoopState],
        body: Callable[[RunTools], Awaitable[None]],
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
        failures = unanswered_calls(run.records)
        if failures is not None:
            # no call returned data: what the model says is not from data (it invented
            # "John Doe spent 1234 euros" after every call was refused)
            log.warning(
                "model.no_data_reply",
                run_id=request.run_id,
                thread_id=request.thread_id,
                tools=[f.tool for f in failures],
            )
            run.reply = no_data_reply(failures)
        return RunResult(reply=run.reply, records=run.records, metrics=run.metrics)

    def _failed(self, run: RunState, error: str) -> RunResult:
        request = run.request
        log.error(
            "model.run_failed", run_id=request.run_id, thread_id=request.thread_id, error=error
        )
        return RunResult(
            reply=f"Sorry, this run failed: {error}",
            records=[*run.records, *unanswered_results(run.records, error)],
            metrics=run.metrics,
            status="failed",
            error=error,
        )

    async def latency(self, within: float = 3.0) -> tuple[float | None, str | None]:
        """How long one ``GET /models`` of the endpoint takes now (ms), and what went
        wrong (None: nothing); for the console's Health page. Any HTTP answer within
        ``within`` seconds counts as reached (an endpoint without ``/models`` answers
        404, in its own time); a failure to connect or a timeout has no latency, only
        its error."""
        started = time.perf_counter()
        try:
            await self.client.with_options(timeout=within, max_retries=0).models.list()
        except openai.APIStatusError as exc:
            elapsed = (time.perf_counter() - started) * 1000
            return elapsed, (f"HTTP {exc.status_code}" if exc.status_code >= 500 else None)
        except openai.APIError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return (time.perf_counter() - started) * 1000, None

    async def warm_up(self) -> float:
        """Send the byte-stable start of every run (the system prompt, and the tools)
        with a one-token answer, so that a llama.cpp server's prompt cache holds it
        before the first prompt; the seconds it took. Best effort: a failure is
        logged, never raised (the first run then pays for it)."""
        started = time.monotonic()
        try:
            ctx = await self._context(None)
            turns = self.profile.turns(self._endpoint, ctx)
            body: dict[str, Any] = {
                "model": self._model_name,
                "messages": [
                    {"role": "system", "content": turns.system_prompt()},
                    {"role": "user", "content": "hello"},
                ],
            }
            if ctx.tools and turns.offers_tools:
                body["tools"] = ctx.tools
            self._endpoint.sampling(body)
            body["max_tokens"] = 1  # after sampling(), which may set the configured one
            await self._endpoint.complete(body, RunMetrics(), "warm-up")
        except AsyncaiError as exc:
            log.warning("model.warm_up_failed", error=str(exc))
        seconds = time.monotonic() - started
        log.info("model.warmed_up", seconds=round(seconds, 2))
        return seconds

    async def _context(self, request: RunRequest | None) -> RunTools:
        """What every leg of a run needs of the executor (the same after a restart);
        without a request, the executor itself (no thread scope)."""
        await self.executor.start()
        scope = self.executor.thread_scope(request.thread) if request is not None else None
        # a thread's scope offers run_code with the shapes its channel's runs taught
        definitions = (scope if scope is not None else self.executor).definitions()
        tools, names = tool_params(definitions)
        catalog: Catalog | None = None
        if self._catalogs is not None:
            catalog = (
                self._catalogs.channel_catalog(request.channel)
                if request is not None
                else self._catalogs.catalog
            )
        code_mode = [d.name for d in definitions] == ["run_code"]
        return RunTools(
            caller=scope if scope is not None else self.executor,
            thread=request.thread if request is not None and scope is not None else None,
            tools=tools,
            names=names,
            definitions={d.name: d for d in definitions},
            code_mode=code_mode,
            catalog=catalog,
            # direct mode: the policy for the model's own calls of mutating tools (code
            # mode asks it inside the sandbox, through the code-mode executor)
            gate=None if code_mode else self.gate,
            hidden=frozenset(getattr(self.executor, "hidden_functions", None) or ()),
        )

    def _begin(self, turns: Turns, run: RunState) -> LoopState:
        """The first messages of a run: system, history, the prompts (and the note)."""
        request = run.request
        note = self.executor.context_note(request.thread)
        prompt_text = "\n\n".join(p.text for p in request.prompts)
        user_text = f"{prompt_text}\n\n{note}" if note else prompt_text
        messages: list[dict[str, Any]] = [{"role": "system", "content": turns.system_prompt()}]
        messages += [{"role": t.role, "content": t.text} for t in request.history]
        messages.append({"role": "user", "content": user_text})
        run.records.append(user_record([{"type": "text", "text": prompt_text}]))
        return turns.loop_state(messages, prompt_text)

    async def _decided(
        self,
        ctx: RunTools,
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
                ToolUseContext(
                    request.run_id,
                    request.thread_id,
                    call.id,
                    ls.assistant_uuid,
                    request.channel,
                )
            )
            try:
                # the snippet going on after the decision: a run_code span of its own
                with timed("run_code", resumed=True) as span:
                    async with asyncio.timeout(self.params.tool_call_timeout):
                        output = await self.executor.resume(ctx.thread, pause, decisions)
                    if span is not None:
                        span.attributes["outcome"] = "error" if output.is_error else "ok"
                        span.attributes["bytes"] = len(output.content.encode())
                    return output
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
            limit=self.params.tool_call_timeout,
        )
