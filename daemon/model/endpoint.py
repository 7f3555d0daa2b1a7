"""The chat completions endpoint: one request with a timeout and retries, and the
openai SDK's errors mapped, in this one place, to a :class:`~daemon.errors.BackendError`
that says what to fix.

408/409/429/5xx, connection errors and time-outs are retried with an
injectable backoff (honouring ``Retry-After``); any other status fails at
once. A 200 whose body the loop cannot read (not JSON, ``message: null``,
``content: 42``, a lone surrogate: :mod:`daemon.model.response`) fails at
once too: a server that sends one is not fixed by asking again. Each retry
is logged (``model.request_retry``, a warning, logger ``asyncai.backend``).
Each request is reported as the run's progress ("thinking", or "answering"
for a ``final`` round: :mod:`daemon.runtime.progress`), and each response's
token usage as the run's spending as it arrives (:mod:`daemon.runtime.usage`).
Each request, its retries included, is one ``model.request`` span of the run's
timeline (:mod:`daemon.runtime.timing`: model, tokens, retries).

Replies are streamed (``[model] stream``, on by default) so that the span can
:func:`~daemon.runtime.timing.mark` its ``first_token``: the time before it is
the server evaluating the prompt, the rest generation (issue 31). The chunks
are folded back into one completion (:mod:`daemon.model.stream`) and checked
like any other. A server that answers a streamed request with a plain body is
read as such; one whose stream brings back nothing (llama-cpp-python with
``tool_choice: auto`` fails inside its stream) is asked again without
streaming, and this endpoint streams no more. A server that streams no usage
(llama-cpp-python) gets its completion tokens counted from the stream (one
chunk a token) and its prompt tokens from its own tokenizer (``POST
/extras/tokenize/count`` over the messages' text, without the chat template's
few tokens a message); where that is missing too, they stay unknown (0).

:class:`ModelSlots` holds at most ``[model] slots`` requests in flight per
endpoint address; a request marks ``slot`` on its span when it gets one, so
the wait is a part of the split of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import openai
import pydantic
import structlog
from openai.types.chat import ChatCompletion

from daemon.backoff import Backoff
from daemon.config import EndpointConfig, ModelConfig
from daemon.errors import BackendError
from daemon.local_model.fetch import DEFAULT_MODEL
from daemon.model.response import completion_problem
from daemon.model.stream import Assembly, Events
from daemon.runtime.progress import model_request
from daemon.runtime.timing import Span, mark, timed
from daemon.runtime.usage import tokens_before_request, tokens_spent
from sessions.model import RunMetrics

__all__ = ["ChatEndpoint", "ModelSlots"]

log = structlog.get_logger("asyncai.backend")

_RETRY_STATUSES = {408, 409, 429}


# Seconds a streamed body may stay open after its [DONE] event (servers end it at once).
_AFTER_DONE = 1.0


class ModelSlots:
    """The requests in flight per model endpoint: one semaphore per address, shared by
    every lane that asks it, so that channels on one endpoint wait in one queue."""

    def __init__(self) -> None:
        self._by_url: dict[str, asyncio.Semaphore] = {}

    def of(self, params: EndpointConfig, model_name: str) -> asyncio.Semaphore | None:
        """The slots of ``params``' endpoint; None where it has no limit. The first
        lane to ask an address sets its size."""
        slots = params.slots
        if slots is None and model_name == DEFAULT_MODEL.alias:
            slots = 1
        if slots is None:
            return None
        semaphore = self._by_url.get(params.base_url)
        if semaphore is None:
            semaphore = self._by_url[params.base_url] = asyncio.Semaphore(slots)
        return semaphore


class ChatEndpoint:
    """The model endpoint a backend talks to: its client, its ``[model]`` parameters,
    the model's name, the backoff between retries and its slots (None: no limit)."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        params: ModelConfig,
        model_name: str,
        backoff: Backoff,
        slots: asyncio.Semaphore | None = None,
    ):
        self.client = client
        self.params = params
        self.model_name = model_name
        self._backoff = backoff
        self._slots = slots
        self._stream = params.stream  # turned off for good by a stream that brings nothing
        self._tokenizer = True  # the server counts tokens (/extras/tokenize/count) until it fails

    def sampling(self, body: dict[str, Any]) -> None:
        """Add the configured temperature and max_tokens to a request body."""
        if self.params.temperature is not None:
            body["temperature"] = self.params.temperature
        if self.params.max_tokens is not None:
            body["max_tokens"] = self.params.max_tokens

    async def complete(
        self, body: dict[str, Any], metrics: RunMetrics, run_id: str, *, final: bool = False
    ) -> Any:
        """One chat completion with timeout and retries; BackendError when it cannot be had.

        Counts the round, its tokens and the retries into ``metrics``; ``final``:
        the round that asks for the answer (shown as the run's progress).
        """
        model_request(final=final)
        await tokens_before_request()  # the earlier responses' tokens on the run's row
        with timed("model.request", model=self.model_name) as span:
            return await self._attempts(body, metrics, run_id, span)

    async def _attempts(
        self, body: dict[str, Any], metrics: RunMetrics, run_id: str, span: Span | None
    ) -> Any:
        attempts = self.params.retries + 1
        limit = self.params.request_timeout
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            try:
                # the wait for a slot is not the server's time: the run's deadline bounds it
                async with self._slot(), asyncio.timeout(limit):
                    content = await self._request(body, limit)
                # The SDK builds its objects without checking them: check the body first.
                problem = completion_problem(content)
                if problem is not None:
                    raise BackendError(
                        f"the model endpoint {self.params.base_url} sent a malformed response: "
                        f"{problem}"
                    )
                response = _completion(content)
                metrics.rounds += 1
                usage = response.usage
                if span is not None:
                    span.attributes["retries"] = attempt - 1
                    if usage is not None:
                        span.attributes["prompt_tokens"] = usage.prompt_tokens or 0
                        span.attributes["completion_tokens"] = usage.completion_tokens or 0
                if usage is not None:
                    metrics.prompt_tokens += usage.prompt_tokens or 0
                    metrics.completion_tokens += usage.completion_tokens or 0
                    # on the run's row before the run goes on: a run stopped later counts them
                    await tokens_spent(usage.prompt_tokens or 0, usage.completion_tokens or 0)
                return response
            except (TimeoutError, openai.APITimeoutError) as exc:
                problem = f"did not answer within {limit:g} s"
                cause: Exception = exc
            except _CutShort as exc:  # asked again: the next stream may well be whole
                problem, cause = str(exc), exc
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
            metrics.retries += 1
            log.warning(
                "model.request_retry",
                run_id=run_id,
                attempt=attempt,
                of=attempts,
                problem=problem,
            )
            await asyncio.sleep(self._backoff.delay(attempt, retry_after))
        raise AssertionError("unreachable")  # the loop returns or raises

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """A slot of this endpoint for one attempt; the request's span marks ``slot``
        when it has one (the wait before it is the split's ``model_slot``)."""
        if self._slots is None:
            yield
            return
        async with self._slots:
            mark("slot")
            yield

    async def _request(self, body: dict[str, Any], limit: float) -> bytes:
        """One attempt: the completion's body as a non-streamed server sends it."""
        if not self._stream:
            return await self._plain(body, limit)
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        # The SDK's own ``post`` (its documented way to any endpoint): the same request,
        # headers and error mapping as ``chat.completions.create``, without re-walking
        # the body against its TypedDicts (bench/daemon.py). Its stream object is only
        # the response: the body is read by _read_stream, not by its iterator.
        try:
            stream = await self.client.post(
                "/chat/completions",
                body=streamed,
                cast_to=dict[str, Any],
                options={"timeout": limit},
                stream=True,
                stream_cls=openai.AsyncStream[dict[str, Any]],
            )
        except openai.APIStatusError as exc:
            if exc.status_code not in (400, 422):
                raise
            # a server that refuses "stream" or "stream_options" (400, or a validation
            # 422); if the plain request is refused too, its error is the answer
            why = f"a streamed request was refused (HTTP {exc.status_code}: {_detail(exc)})"
            return await self._unstreamed(body, limit, why)
        response = stream.response
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return await response.aread()  # the server ignored "stream": no first token
        assembly = Assembly()
        try:
            await self._read_stream(response, assembly)
        except ValueError as exc:  # an event whose data is not JSON
            raise BackendError(
                f"the model endpoint {self.params.base_url} sent a malformed stream: {exc}"
            ) from exc
        finally:
            await response.aclose()
        if assembly.problem is not None:
            raise BackendError(
                f"the model endpoint {self.params.base_url} sent a malformed response: "
                f"{assembly.problem}"
            )
        if assembly.chunks and not assembly.finished:
            raise _CutShort("ended its stream before the reply was finished")
        if not assembly.chunks:
            # llama-cpp-python fails inside a stream and sends nothing (tool_choice auto)
            return await self._unstreamed(body, limit, "a streamed reply brought back nothing")
        usage = None
        if not assembly.usage_reported:
            prompt = await self._count_prompt(body) if self._tokenizer else None
            usage = {
                "prompt_tokens": prompt or 0,
                "completion_tokens": assembly.pieces,
                "total_tokens": (prompt or 0) + assembly.pieces,
            }
        return assembly.body(usage)

    @staticmethod
    async def _read_stream(response: httpx2.Response, assembly: Assembly) -> None:
        """Fold the streamed chunks into ``assembly``, reading the body to its end
        (:class:`~daemon.model.stream.Events` says why not the SDK's iterator), with
        the SDK's errors: a transport failure or time-out mid-stream as its
        ``APIConnectionError`` or ``APITimeoutError``, an ``error`` event as its
        ``APIError``."""
        events = Events()
        response.encoding = "utf-8"  # an event stream is UTF-8, whatever its headers say
        lines = response.aiter_lines()
        try:
            async for line in lines:
                data = events.line(line)
                if data is None:
                    continue
                if data.startswith("[DONE]"):
                    # the body ends here; a server that holds it open is not waited for
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_AFTER_DONE):
                            async for _ in lines:
                                pass
                    return
                chunk = json.loads(data)
                if isinstance(chunk, dict) and chunk.get("error"):
                    error = chunk["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(
                        message=message if isinstance(message, str) else "an error event",
                        request=response.request,
                        body=error,
                    )
                if not assembly.chunks:
                    mark("first_token")
                assembly.add(chunk)
                if assembly.problem is not None:
                    return
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=response.request) from exc
        except (httpx2.RequestError, anyio.EndOfStream) as exc:
            raise openai.APIConnectionError(request=response.request) from exc

    async def _unstreamed(self, body: dict[str, Any], limit: float, why: str) -> bytes:
        """A server that cannot stream: the request asked again plainly, and, once that is
        answered, this endpoint streams no more (``model.stream_unsupported``, a warning)."""
        content = await self._plain(body, limit)
        self._stream = False
        log.warning(
            "model.stream_unsupported",
            base_url=self.params.base_url,
            problem=f"{why}; asking without streaming",
        )
        return content

    async def _plain(self, body: dict[str, Any], limit: float) -> bytes:
        content: bytes = await self.client.post(
            "/chat/completions", body=body, cast_to=bytes, options={"timeout": limit}
        )
        return content  # no first token: the split counts all of it as generation

    async def _count_prompt(self, body: dict[str, Any]) -> int | None:
        """The prompt's tokens by the server's own tokenizer, for a server that streams no
        usage: llama-cpp-python's ``/extras/tokenize/count`` over the messages' text (the
        chat template's few tokens a message are not in it). None, and not asked again,
        where the server has no such route."""
        text = "\n".join(_message_text(m) for m in body.get("messages") or ())
        root = str(self.client.base_url).rstrip("/").removesuffix("/v1")
        try:
            found = await self.client.post(
                f"{root}/extras/tokenize/count", body={"input": text}, cast_to=dict[str, Any]
            )
            count = found.get("count") if isinstance(found, dict) else None
            if isinstance(count, int) and count >= 0:
                return count
        except openai.APIError:
            pass
        self._tokenizer = False
        log.info("model.prompt_tokens_unknown", base_url=self.params.base_url)
        return None

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
                f"(it usually ends in /v1) and the model name {self.model_name!r}"
            )
        return f"the model endpoint {url} rejected the request (HTTP {code}: {detail})"


def _completion(content: bytes) -> ChatCompletion:
    """The SDK's object for a body :func:`completion_problem` passed.

    Validated from the JSON by pydantic's core when the body follows the
    spec (about 5 µs, where the SDK's own lenient construction takes about
    90); a body off the spec in what the loop does not read (no ``created``,
    a tool call without ``type``) is built as the SDK builds it, unchecked.
    """
    try:
        return ChatCompletion.model_validate_json(content)
    except pydantic.ValidationError:
        return ChatCompletion.construct(**json.loads(content))


class _CutShort(Exception):
    """A streamed reply that ended without saying why: retried like a time-out."""


def _message_text(message: Any) -> str:
    """The text of one chat message as its prompt holds it: content and calls."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    parts = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        parts += [p.get("text", "") for p in content if isinstance(p, dict)]
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts += [str(function.get("name", "")), str(function.get("arguments", ""))]
    return "\n".join(p for p in parts if isinstance(p, str))


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error (the SDK's own text is 'Connection error.')."""
    reasons: list[str] = []
    inner: BaseException | None = exc
    while inner is not None and len(reasons) < 10:
        if str(inner):
            reasons.append(str(inner))
        inner = inner.__cause__ or inner.__context__
    return reasons[-1] if reasons else type(exc).__name__


def _detail(exc: openai.APIStatusError) -> str:
    """The server's own words about a refused request, at most 300 characters."""
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
    """The ``Retry-After`` header in seconds, when the response has a numeric one."""
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
