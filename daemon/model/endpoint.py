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
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pydantic
import structlog
from openai.types.chat import ChatCompletion

from daemon.backoff import Backoff
from daemon.config import ModelConfig
from daemon.errors import BackendError
from daemon.model.response import completion_problem
from daemon.runtime.progress import model_request
from daemon.runtime.timing import Span, timed
from daemon.runtime.usage import tokens_spent
from sessions.model import RunMetrics

__all__ = ["ChatEndpoint"]

log = structlog.get_logger("asyncai.backend")

_RETRY_STATUSES = {408, 409, 429}


class ChatEndpoint:
    """The model endpoint a backend talks to: its client, its ``[model]`` parameters,
    the model's name and the backoff between retries."""

    def __init__(
        self, client: openai.AsyncOpenAI, params: ModelConfig, model_name: str, backoff: Backoff
    ):
        self.client = client
        self.params = params
        self.model_name = model_name
        self._backoff = backoff

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
                async with asyncio.timeout(limit):
                    # The SDK's own ``post`` (its documented way to any endpoint): the
                    # same request, headers and error mapping as ``chat.completions
                    # .create``, without re-walking the body against its TypedDicts
                    # (an identity for the plain dicts the loop sends, and about half
                    # a millisecond of CPU per request: bench/daemon.py).
                    content = await self.client.post(
                        "/chat/completions", body=body, cast_to=bytes, options={"timeout": limit}
                    )
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
                    # on the run's row now: a run stopped later still counts them
                    await tokens_spent(usage.prompt_tokens or 0, usage.completion_tokens or 0)
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
