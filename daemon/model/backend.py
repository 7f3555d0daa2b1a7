"""The OpenAI-compatible model loop: one ``RunRequest`` in, one ``RunResult`` out.

A run sends the system prompt, the thread's earlier text, and one user
message (the coalesced prompts, then the executor's context note), and
loops: each tool call the model makes goes to the executor, its result goes
back as a tool message, for at most ``max_rounds`` requests. The last request
withdraws the tools and asks for an answer from the results so far, so a run
always ends with a reply.

The backend is handed a :class:`~daemon.tools.ToolExecutor` and never knows
which: with code mode its tool list is exactly ``[run_code]`` (invariant 1);
the ``direct`` tool mode hands it the MCP executor itself.

Real OpenAI-compatible servers are not OpenAI (notes/local-model.md): an
assistant message carrying tool calls is sent with ``"content": ""``, never
null; tool-call ids are opaque (and made up when missing); invalid JSON in
arguments becomes an error tool message the model can correct, and is
replaced by ``{}`` when the call is replayed, since some servers re-parse
it; 408/409/429/5xx, connection errors and time-outs are retried with an
injectable backoff, then the run fails with a message that says what to fix.

Transcript records are Claude Code shaped and in the order the model saw
them: the user text (the prompts only: the context note and the final-round
request are harness text, kept out of the history the runtime rebuilds from
records), each assistant message with its ``text`` and ``tool_use`` blocks,
one user record per ``tool_result`` carrying the call's audit as
``tool_use_result``, and the final assistant text.

Log events (logger ``asyncai.backend``, info, so with ``--verbose``):
``model.tool_call`` (tool, arguments), ``model.tool_result`` (tool, is_error,
bytes, content JSON-decoded when possible), ``model.turn_summary`` (spec A9
plus tokens) at the end of every run; ``model.request_retry`` (warning) and
``model.run_failed`` (error) always.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import openai
import structlog

from daemon.backoff import Backoff
from daemon.config import Config, ModelConfig
from daemon.errors import AsyncaiError, BackendError, ToolTransportError
from daemon.local_model.fetch import DEFAULT_MODEL
from daemon.logging import log_content, register_secret
from daemon.model import harness as small
from daemon.runtime.runs import RunRequest, RunResult, ToolUseContext, current_tool_use
from daemon.tools import ToolCallOutput, ToolDefinition, ToolExecutor
from sessions.model import Record, RunMetrics

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "CODE_MODE_SYSTEM_PROMPT",
    "DIRECT_SYSTEM_PROMPT",
    "FINAL_ROUND_PROMPT",
    "OpenAiCompatibleBackend",
]

log = structlog.get_logger("asyncai.backend")

CODE_MODE_SYSTEM_PROMPT = """\
You are asyncai, an assistant that answers questions in a chat channel.
You have one tool, run_code. It runs Python in a sandbox; the functions listed \
in its description call the real tools and must be awaited.
Plan first, then write ONE complete run_code snippet that fetches the data, \
filters it in Python and ends with an expression holding exactly the answer. \
Inspect the shape of the data only after a snippet failed.
Variables persist across the whole conversation, but earlier tool results are \
not in your history: reuse the variables listed in the note instead of \
fetching again.
When you have the answer, reply in plain, concise text."""

DIRECT_SYSTEM_PROMPT = """\
You are asyncai, an assistant that answers questions in a chat channel.
Use the tools when you need data, then reply in plain, concise text."""

FINAL_ROUND_PROMPT = (
    "You have used every tool round available for this question. Using the tool "
    "results above, answer my question now in plain text; do not call tools."
)

# What the model is told when it sends arguments that do not parse.
_INVALID_ARGUMENTS = (
    "Error: the arguments of this {tool} call were not valid JSON ({error}); nothing ran. "
    "Send the call again with the arguments as one JSON object, e.g. "
    '{{"code": "..."}}, escaping newlines (\\n) and quotes (\\") inside strings.'
)
_EMPTY_REPLY = "(the model returned an empty reply)"
_PEEK_TIMEOUT = 30.0  # the harness's look at a snippet's variables (no tools are called)
_RETRY_STATUSES = {408, 409, 429}
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names

@dataclass
class _Call:
    """One tool call as the model sent it."""

    id: str  # opaque; made up when the server sent none
    name: str  # as the model called it
    raw: str  # the arguments text
    arguments: dict
    error: str | None  # why ``raw`` is not a JSON object, or None

    @property
    def input(self) -> dict:
        """The ``tool_use`` block's input: the arguments, or the raw text that did not parse."""
        return self.arguments if self.error is None else {"invalid_arguments": self.raw}

    @property
    def wire_arguments(self) -> str:
        """What to replay: as sent when valid, else ``{}`` (some servers re-parse it)."""
        return self.raw if self.error is None and self.raw.strip() else "{}"


@dataclass
class _Run:
    """What one run accumulates."""

    request: RunRequest
    records: list[Record] = field(default_factory=list)
    metrics: RunMetrics = field(default_factory=RunMetrics)
    reply: str = ""
    call_ids: set[str] = field(default_factory=set)


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
        self._backoff = backoff or Backoff(
            self.params.backoff_initial, self.params.backoff_max, jitter=0.25
        )

    async def aclose(self) -> None:
        """Close the HTTP client if the backend built it (not the executor: the caller owns it)."""
        if self._owns_client:
            await self.client.close()

    async def run(self, request: RunRequest) -> RunResult:
        """Answer the request's prompts. Failures come back as ``status="failed"``.

        Cancellation (``!stop``, shutdown) propagates as ``CancelledError``
        after the turn summary is logged.
        """
        state = _Run(request)
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
            self._summary(state, "interrupted", time.monotonic() - started)
            raise
        self._summary(state, status, time.monotonic() - started)
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

    # ---- the loop ----

    async def _loop(self, state: _Run) -> None:
        request = state.request
        await self.executor.start()
        scope = self.executor.thread_scope(request.thread_id)
        caller = scope if scope is not None else self.executor
        note = self.executor.context_note(request.thread_id)
        definitions = self.executor.definitions()
        tools, names = _tool_params(definitions)
        code_mode = [d.name for d in definitions] == ["run_code"]

        prompt_text = "\n\n".join(p.text for p in request.prompts)
        user_text = f"{prompt_text}\n\n{note}" if note else prompt_text
        if self.harness and code_mode:
            # small models: the code-block protocol (daemon/harness.py)
            description = definitions[0].description
            system = small.system_prompt(
                self.params.system_prompt or small.HARNESS_SYSTEM_PROMPT,
                small.compact_description(description),
                self.params.worked_example or small.WORKED_EXAMPLE,
            )
        else:
            system = self.params.system_prompt or (
                CODE_MODE_SYSTEM_PROMPT if code_mode else DIRECT_SYSTEM_PROMPT
            )
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        messages += [{"role": t.role, "content": t.text} for t in request.history]
        messages.append({"role": "user", "content": user_text})
        state.records.append(_user_record([{"type": "text", "text": prompt_text}]))
        if self.harness and code_mode:
            functions = small.catalog_signatures(definitions[0].description)
            await self._code_blocks(state, caller, names, messages, prompt_text, functions)
            return

        max_rounds = self.params.max_rounds
        for round_no in range(1, max_rounds + 1):
            final = round_no == max_rounds
            body: dict[str, Any] = {"model": self._model_name, "messages": messages}
            if final and round_no > 1:
                instruction = (
                    small.answer_instruction(prompt_text, "the tool results above")
                    if self.harness
                    else FINAL_ROUND_PROMPT
                )
                body["messages"] = [*messages, {"role": "user", "content": instruction}]
                state.metrics.final_round_forced = True
            if tools and not final:
                body["tools"] = tools
            self._sampling(body)

            response = await self._request(body, state)
            choice = response.choices[0]
            content = choice.message.content or ""
            calls = [] if final else _parse_calls(choice.message.tool_calls or [], state)
            if self.harness and not calls and not final and tools:
                # a call written as text (Qwen's <tool_call> or a JSON block) is a call
                calls = _text_calls(content, names, state)
                if calls:
                    content = ""
            assistant = self._assistant_record(response, content, calls, choice.finish_reason)
            state.records.append(assistant)
            if not calls:
                state.reply = content.strip() or _EMPTY_REPLY
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
                output = await self._tool_call(caller, names, call, assistant.uuid, state)
                text = output.content if output.content != "" else "(empty result)"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                self._count(state, output, text, code_mode)
                result = {"type": "tool_result", "tool_use_id": call.id, "content": text}
                result["is_error"] = output.is_error
                state.records.append(_user_record([result], tool_use_result=output.audit))

    def _sampling(self, body: dict[str, Any]) -> None:
        if self.params.temperature is not None:
            body["temperature"] = self.params.temperature
        if self.params.max_tokens is not None:
            body["max_tokens"] = self.params.max_tokens

    async def _code_blocks(
        self,
        state: _Run,
        caller: ToolExecutor,
        names: dict[str, str],
        messages: list[dict[str, Any]],
        question: str,
        functions: dict[str, small.Signature],
    ) -> None:
        """The harness's code-block protocol for small models (code mode).

        The model replies with a fenced ``python`` block (no ``tools`` in the
        request: forced JSON tool calls drove a 1.5B model to one-line
        JavaScript); the harness mends and runs it as a ``run_code`` call and
        answers with a user message that carries the result. A failure asks
        for a corrected block (at :data:`~daemon.model.harness.RETRY_TEMPERATURE`,
        at most :data:`~daemon.model.harness.MAX_FAILED_SNIPPETS` times); a good
        result, or the last failure, asks for the answer to the repeated
        question. A reply without code is the answer. The records hold the
        calls as ``tool_use``/``tool_result`` blocks, as in the plain loop;
        the result messages are harness text and stay out of them.
        """
        base = len(messages)  # up to the question; each retry replaces what follows
        failures = 0
        answering = False
        rechecked = False  # an empty result was shown with the data once
        last_result: str | None = None
        max_rounds = self.params.max_rounds
        for round_no in range(1, max_rounds + 1):
            final = answering or round_no == max_rounds
            body: dict[str, Any] = {"model": self._model_name, "messages": messages}
            if final and not answering and round_no > 1:
                instruction = small.answer_instruction(question, "the results above")
                body["messages"] = [*messages, {"role": "user", "content": instruction}]
                state.metrics.final_round_forced = True
            self._sampling(body)
            if not final:
                body["stop"] = [small.CODE_STOP]
                if failures:  # at temperature 0 the failed snippet would come back as it was
                    warmer = max(self.params.temperature or 0.0, small.RETRY_TEMPERATURE)
                    body["temperature"] = warmer

            response = await self._request(body, state)
            choice = response.choices[0]
            content = choice.message.content or ""
            call = None if final else self._code_call(choice.message, content, state)
            if call is None:
                state.records.append(
                    self._assistant_record(response, content, [], choice.finish_reason)
                )
                state.reply = content.strip() or _EMPTY_REPLY
                if last_result is not None and (not content.strip() or small.is_code_only(content)):
                    # the model restated code or said nothing: the result is the answer
                    state.reply = f"The result of run_code: {last_result}"
                    state.metrics.extra["reply_from_result"] = True
                return
            _mend_call(call, functions, state)
            assistant = self._assistant_record(response, "", [call], choice.finish_reason)
            state.records.append(assistant)
            code = call.arguments.get("code") if call.error is None else None
            ran = {"role": "assistant", "content": small.code_message(code or call.raw)}
            output = await self._tool_call(caller, names, call, assistant.uuid, state)
            text = output.content if output.content != "" else "(empty result)"
            if not output.is_error:
                text = small.prints_as_result(text)
            elif isinstance(code, str):
                hint = small.retry_hint(code, text, functions)
                text = f"{text}\n{hint}" if hint else text
            self._count(state, output, text, True)
            result = {"type": "tool_result", "tool_use_id": call.id, "content": text}
            result["is_error"] = output.is_error
            state.records.append(_user_record([result], tool_use_result=output.audit))
            failed = output.is_error or text == small.NO_OUTPUT
            if failed:
                failures += 1
            else:
                last_result = text
            more = round_no + 1 < max_rounds  # the last round must be the answer
            retry = failed and failures < small.MAX_FAILED_SNIPPETS and more
            if failed and not retry:
                state.metrics.extra["harness_gave_up"] = True
            # an empty result is often a filter on a guessed key: one look at the data
            recheck = small.is_empty_result(text) and not rechecked and more
            shapes = None
            if (retry or recheck) and isinstance(code, str):
                shapes = await self._peek(caller, code, state)
            recheck = recheck and shapes is not None
            rechecked = rechecked or recheck
            reply = small.result_message(
                text, question, failed=failed, retry=retry or recheck, shapes=shapes, empty=recheck
            )
            answering = not (retry or recheck)
            # A retry follows the question alone, with the feedback: shown its failed
            # code, a small model sends it again verbatim. The answer sees the code.
            del messages[base:]
            if answering:
                messages.append(ran)
            messages.append({"role": "user", "content": reply})

    async def _peek(self, caller: ToolExecutor, code: str, state: _Run) -> str | None:
        """What the variables a failed (or empty-handed) snippet assigned hold now, as
        short sketches from the same REPL scope; None when there is nothing to show."""
        names = small.assigned_names(code)
        if not names:
            return None
        try:
            async with asyncio.timeout(_PEEK_TIMEOUT):
                output = await caller.call_tool("run_code", {"code": small.peek_code(names)})
        except (TimeoutError, ToolTransportError):
            return None
        text = "" if output.is_error else small.prints_as_result(output.content)
        if not text.strip() or text == small.NO_OUTPUT:
            return None
        m = state.metrics.extra
        m["peeks"] = m.get("peeks", 0) + 1
        return text

    def _code_call(self, message: Any, content: str, state: _Run) -> _Call | None:
        """The run_code call in a reply: a real tool call, one written as text, or the
        first fenced Python block; None when the reply holds no code (an answer)."""
        calls = _parse_calls(message.tool_calls or [], state)
        calls = [c for c in calls if c.name == "run_code"] or _text_calls(
            content, {"run_code": "run_code"}, state
        )
        if calls:
            return calls[0]
        code = small.extract_code(content)
        if code is None:
            return None
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        state.call_ids.add(call_id)
        m = state.metrics.extra
        m["code_blocks"] = m.get("code_blocks", 0) + 1
        return _Call(call_id, "run_code", json.dumps({"code": code}), {"code": code}, None)

    def _assistant_record(
        self, response: Any, content: str, calls: list[_Call], finish: str | None
    ) -> Record:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls
        ]
        usage = response.usage
        stop = "tool_use" if calls else ("max_tokens" if finish == "length" else "end_turn")
        return Record(
            uuid=str(uuid.uuid4()),
            type="assistant",
            timestamp=_now(),
            message={
                "id": response.id or f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "model": response.model or self._model_name,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": getattr(usage, "prompt_tokens", 0) or 0,
                    "output_tokens": getattr(usage, "completion_tokens", 0) or 0,
                },
            },
        )

    async def _tool_call(
        self,
        caller: ToolExecutor,
        names: dict[str, str],
        call: _Call,
        record_uuid: str,
        state: _Run,
    ) -> ToolCallOutput:
        request = state.request
        ids = {"run_id": request.run_id, "thread_id": request.thread_id, "tool_use_id": call.id}
        shown = call.arguments if call.error is None else log_content(call.raw)
        log.info("model.tool_call", tool=call.name, arguments=shown, **ids)
        if call.error is not None:
            text = _INVALID_ARGUMENTS.format(tool=call.name, error=call.error)
            output = ToolCallOutput(text, is_error=True)
        elif call.name not in names:
            offered = ", ".join(sorted(names)) or "none"
            text = f"Error: there is no tool named {call.name!r}; the tools are: {offered}."
            output = ToolCallOutput(text, is_error=True)
        else:
            output = await self._execute(
                caller, names[call.name], call.arguments, call.id, record_uuid, state
            )
        log.info(
            "model.tool_result",
            tool=call.name,
            is_error=output.is_error,
            bytes=len(output.content.encode()),
            content=log_content(output.content),
            **ids,
        )
        return output

    async def _execute(
        self,
        caller: ToolExecutor,
        name: str,
        arguments: dict,
        tool_use_id: str,
        record_uuid: str,
        state: _Run,
    ) -> ToolCallOutput:
        """One tool call under its own timeout, with ``current_tool_use`` set for the audit."""
        request = state.request
        token = current_tool_use.set(
            ToolUseContext(request.run_id, request.thread_id, tool_use_id, record_uuid)
        )
        limit = self.params.tool_call_timeout
        try:
            async with asyncio.timeout(limit):
                return await caller.call_tool(name, arguments)
        except TimeoutError:
            return ToolCallOutput(
                f"Error: {name} did not finish within {limit:g} s and was cancelled.", is_error=True
            )
        except ToolTransportError as exc:
            return ToolCallOutput(f"Error: tool error: {exc}", is_error=True)
        finally:
            current_tool_use.reset(token)

    def _count(self, state: _Run, output: ToolCallOutput, sent: str, code_mode: bool) -> None:
        m = state.metrics
        m.run_code_calls += 1
        m.bytes_out += len(sent.encode())
        nested = (output.audit or {}).get("nested_calls")
        if isinstance(nested, list):
            m.nested_calls += len(nested)
            m.bytes_in += sum(int(c.get("bytes") or 0) for c in nested if isinstance(c, dict))
        elif not code_mode:  # direct mode: the tool result is the MCP result
            m.bytes_in += len(output.content.encode())
        if output.is_error:
            m.extra["tool_errors"] = m.extra.get("tool_errors", 0) + 1

    # ---- requests ----

    async def _request(self, body: dict[str, Any], state: _Run) -> Any:
        """One chat completion with timeout and retries; BackendError when it cannot be had."""
        attempts = self.params.retries + 1
        limit = self.params.request_timeout
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            try:
                async with asyncio.timeout(limit):
                    response = await self.client.chat.completions.create(**body, timeout=limit)
                if not getattr(response, "choices", None):
                    raise BackendError(
                        f"the model endpoint {self.params.base_url} returned no choices"
                    )
                state.metrics.rounds += 1
                usage = response.usage
                if usage is not None:
                    state.metrics.prompt_tokens += usage.prompt_tokens or 0
                    state.metrics.completion_tokens += usage.completion_tokens or 0
                return response
            except (TimeoutError, openai.APITimeoutError) as exc:
                problem = f"did not answer within {limit:g} s"
                cause: Exception = exc
            except openai.APIConnectionError as exc:
                problem = f"cannot be reached ({_cause(exc)})"
                cause = exc
            except openai.APIStatusError as exc:
                if exc.status_code not in _RETRY_STATUSES and exc.status_code < 500:
                    raise BackendError(self._status_message(exc)) from exc
                problem = f"failed with HTTP {exc.status_code}: {_detail(exc)}"
                retry_after = _retry_after(exc)
                cause = exc
            except openai.APIError as exc:  # a response the SDK could not make sense of
                raise BackendError(
                    f"the model endpoint {self.params.base_url} sent an unusable response: {exc}"
                ) from exc
            if attempt == attempts:
                tries = f" (after {attempts} attempts)" if attempts > 1 else ""
                raise BackendError(
                    f"the model endpoint {self.params.base_url} {problem}{tries}"
                ) from cause
            state.metrics.extra["retries"] = state.metrics.extra.get("retries", 0) + 1
            log.warning(
                "model.request_retry",
                run_id=state.request.run_id,
                attempt=attempt,
                of=attempts,
                problem=problem,
            )
            await asyncio.sleep(self._backoff.delay(attempt, retry_after))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _status_message(self, exc: openai.APIStatusError) -> str:
        url, code, detail = self.params.base_url, exc.status_code, _detail(exc)
        if code in (401, 403):
            return (
                f"the model endpoint {url} refused the API key (HTTP {code}: {detail}); "
                "set OPENAI_API_KEY or api_key in [model]"
            )
        if code == 404:
            return (
                f"the model endpoint {url} answered HTTP 404 ({detail}); check the base URL "
                f"(it usually ends in /v1) and the model name {self._model_name!r}"
            )
        return f"the model endpoint {url} rejected the request (HTTP {code}: {detail})"

    def _summary(self, state: _Run, status: str, seconds: float) -> None:
        m = state.metrics
        log.info(
            "model.turn_summary",
            run_id=state.request.run_id,
            thread_id=state.request.thread_id,
            status=status,
            rounds=m.rounds,
            run_code_calls=m.run_code_calls,
            nested_calls=m.nested_calls,
            bytes_in=m.bytes_in,
            bytes_out=m.bytes_out,
            final_round_forced=m.final_round_forced,
            prompt_tokens=m.prompt_tokens,
            completion_tokens=m.completion_tokens,
            duration_ms=round(seconds * 1000, 1),
        )


# ---- pure helpers ----


def _tool_params(definitions: Sequence[ToolDefinition]) -> tuple[list[dict], dict[str, str]]:
    """OpenAI ``tools`` and the map from the name the model uses to the tool's name.

    Names OpenAI would refuse (dots, slashes, over 64 characters) are
    sanitized, with a numeric suffix on collisions.
    """
    tools: list[dict] = []
    names: dict[str, str] = {}
    for d in definitions:
        wire = (
            d.name
            if _NAME_OK.match(d.name)
            else re.sub(r"[^A-Za-z0-9_-]", "_", d.name)[:60] or "tool"
        )
        base, n = wire, 2
        while wire in names:
            wire, n = f"{base}_{n}", n + 1
        names[wire] = d.name
        parameters = d.input_schema or {"type": "object", "properties": {}}
        tools.append(
            {
                "type": "function",
                "function": {"name": wire, "description": d.description, "parameters": parameters},
            }
        )
    return tools, names


def _parse_arguments(raw: str) -> tuple[dict, str | None]:
    """The arguments object, or ``({}, why not)``."""
    if not raw.strip():
        return {}, None  # some servers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {type(value).__name__}"
    return value, None


def _parse_calls(tool_calls: Sequence[Any], state: _Run) -> list[_Call]:
    """The SDK's tool calls as :class:`_Call`, with unique ids."""
    out = []
    for call in tool_calls:
        fn = getattr(call, "function", None)  # None: a "custom" tool call, not a function
        name = fn.name if fn is not None else getattr(getattr(call, "custom", None), "name", "?")
        raw = (fn.arguments if fn is not None else None) or ""
        call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        if call_id in state.call_ids:  # opaque, but each result must answer exactly one call
            call_id = f"{call_id}_{uuid.uuid4().hex[:8]}"
        state.call_ids.add(call_id)
        arguments, error = _parse_arguments(raw)
        out.append(_Call(call_id, name, raw, arguments, error))
    return out


def _text_calls(content: str, names: dict[str, str], state: _Run) -> list[_Call]:
    """Tool calls the model wrote in its text, as :class:`_Call` with made-up ids."""
    calls = []
    for name, arguments in small.text_tool_calls(content, names):
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        state.call_ids.add(call_id)
        calls.append(_Call(call_id, name, json.dumps(arguments), arguments, None))
    if calls:
        m = state.metrics.extra
        m["text_tool_calls"] = m.get("text_tool_calls", 0) + len(calls)
    return calls


def _mend_call(call: _Call, functions: dict[str, small.Signature], state: _Run) -> None:
    """The harness's repairs of one run_code call, in place: arguments that are not
    valid JSON, then the code (await precedence, a trailing assignment, stubs)."""
    if call.name != "run_code":
        return
    fixes: list[str] = []
    if call.error is not None:
        recovered, how = small.recover_arguments(call.raw)
        if recovered is None:
            return  # the model is told its arguments did not parse
        call.arguments, call.error = recovered, None
        fixes.append(f"arguments: {how}")
    code = call.arguments.get("code")
    if isinstance(code, str):
        mended, repairs = small.repair_code(code, functions)
        if repairs:
            call.arguments = {**call.arguments, "code": mended}
            fixes += repairs
    if fixes:
        # replayed (and recorded) as what ran, in valid JSON
        call.raw = json.dumps(call.arguments)
        m = state.metrics.extra
        m["harness_repairs"] = m.get("harness_repairs", 0) + len(fixes)
        log.info(
            "harness.repaired",
            run_id=state.request.run_id,
            thread_id=state.request.thread_id,
            tool_use_id=call.id,
            repairs=fixes,
        )


def _user_record(content: list[dict[str, Any]], tool_use_result: Any = None) -> Record:
    return Record(
        uuid=str(uuid.uuid4()),
        type="user",
        timestamp=_now(),
        message={"role": "user", "content": content},
        tool_use_result=tool_use_result,
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error (the SDK's own text is 'Connection error.')."""
    reasons = []
    inner: BaseException | None = exc
    while inner is not None and len(reasons) < 10:
        if str(inner):
            reasons.append(str(inner))
        inner = inner.__cause__ or inner.__context__
    return reasons[-1] if reasons else type(exc).__name__


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or body
        text = message if isinstance(message, str) else json.dumps(message)
    elif isinstance(body, str) and body:
        text = body
    else:
        text = exc.message
    return text[:300]


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
