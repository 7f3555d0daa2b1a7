"""A scripted OpenAI-compatible server on 127.0.0.1 (port 0), for tests.

The model is the one boundary the tests fake: everything else is real. The
server speaks just enough HTTP/1.1 (keep-alive, Content-Length or chunked
bodies) over asyncio streams for the openai SDK, and answers
``POST /v1/chat/completions`` from a script, one step per request::

    async with FakeOpenAI([ToolCalls(("run_code", {"code": "1 + 1"})), Reply("2")]) as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
        ...
        fake.requests[1]["messages"][-1]   # every request body, in order

Steps:

- ``Reply("text")`` (or a plain ``str``): an assistant text, ``finish_reason`` stop.
- ``ToolCalls(("name", {"arg": 1}), ("name", '{"broken'))``: tool calls; a
  ``str`` argument is sent as is (invalid JSON on purpose). Ids are opaque
  like llama.cpp's (``call__0_run_code_cmpl-…``); ``content`` defaults to
  None as OpenAI sends it.
- ``Error(500, "boom")``: an HTTP error with an OpenAI-style error body;
  ``headers={"retry-after": "0"}`` for 429s.
- ``Hold(then)``: the request is recorded and ``hold.arrived`` is set, then
  the server waits for ``hold.release`` (an ``asyncio.Event``) and serves
  ``then``. Tests hold a reply without sleeping.
- ``Disconnect()``: the connection closes without a response.
- ``Raw(b'{"choices": ...')``: the body sent as is with status 200 (or
  ``status=``), even to a streaming request: malformed responses on purpose.
- a callable ``(body) -> step`` (sync or async): computed from the request.

When the script runs out, ``fallback`` (a step or a callable) answers, and
without one a 400 "script exhausted" error makes the test fail loudly. With
``"stream": true`` the same steps are sent as server-sent events, the usage in
the last chunk; ``llama=True`` streams as llama-cpp-python 0.3.36 does: one
chunk per word and no usage, and ``POST /extras/tokenize/count`` counts the
words of its ``input``.
``GET /v1/models`` lists ``model``; with ``api_key`` set, other keys get 401.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["Disconnect", "Error", "FakeOpenAI", "Hold", "Raw", "Reply", "Step", "ToolCalls"]

WAIT_TIMEOUT = 10.0  # a test waiting longer than this has failed

DEFAULT_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


@dataclass
class Reply:
    """An assistant text answer."""

    content: str
    finish_reason: str = "stop"
    usage: dict | None = None


@dataclass(init=False)
class ToolCalls:
    """An assistant message carrying tool calls; a ``str`` argument is sent verbatim."""

    calls: list[tuple[str, dict | str]]
    content: str | None = None
    usage: dict | None = None
    ids: list[str] | None = None

    def __init__(
        self,
        *calls: tuple[str, dict | str],
        content: str | None = None,
        usage: dict | None = None,
        ids: list[str] | None = None,
    ):
        self.calls = list(calls)
        self.content = content
        self.usage = usage
        self.ids = ids


@dataclass
class Error:
    """An HTTP error response with an OpenAI-style ``{"error": {...}}`` body."""

    status: int
    message: str = "fake error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Hold:
    """Record the request, set ``arrived``, wait for ``release``, then serve ``then``."""

    then: Step
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Disconnect:
    """Close the connection without answering (a connection error for the client)."""


@dataclass
class Raw:
    """A response body sent byte for byte (a ``str`` as UTF-8 with surrogates kept)."""

    body: bytes | str
    status: int = 200
    content_type: str = "application/json"
    #: a content-length larger than the body: the connection is closed after the body,
    #: a transport failure mid-response for the client
    declared: int | None = None
    #: after the body the connection stays open until the server closes (a chunked
    #: body never ended), and the server sends nothing more
    held: bool = False

    def encoded(self) -> bytes:
        """The body's bytes."""
        if isinstance(self.body, bytes):
            return self.body
        return self.body.encode("utf-8", "surrogatepass")


Step = Union[  # noqa: UP007 -- a runtime alias: `|` of a str and a Callable is not allowed
    Reply,
    ToolCalls,
    Error,
    Hold,
    Disconnect,
    Raw,
    str,
    Callable[[dict], "Step | Awaitable[Step]"],
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    411: "Length Required",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class _Close(Exception):
    """Drop the connection (a Disconnect step)."""


class FakeOpenAI:
    """The scripted server; an async context manager that starts and stops it."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        fallback: Step | None = None,
        api_key: str | None = None,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        llama: bool = False,
    ):
        self.llama = llama
        self.tokenized: list[str] = []  # the inputs /extras/tokenize/count was asked about
        self.script: deque[Step] = deque(script)
        self.fallback = fallback
        self.api_key = api_key
        self.model = model
        self.host = host
        self.requests: list[dict] = []  # chat request bodies, in arrival order
        self.headers: list[dict[str, str]] = []  # their headers, lower-case names
        self.port: int = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()

    @property
    def base_url(self) -> str:
        """The URL to give the SDK (ends in ``/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        self.script.extend(steps)

    async def wait_for_requests(self, n: int) -> list[dict]:
        """Wait (at most ``WAIT_TIMEOUT`` s) for ``n`` chat requests; the bodies so far."""
        async with asyncio.timeout(WAIT_TIMEOUT), self._changed:
            await self._changed.wait_for(lambda: len(self.requests) >= n)
        return self.requests

    async def start(self) -> FakeOpenAI:
        """Listen on an ephemeral loopback port."""
        self._server = await asyncio.start_server(self._connection, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening and end every open connection (held steps included).

        Connections are aborted rather than their tasks cancelled: Python 3.11's
        stream server logs a cancelled handler task as an error.
        """
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=WAIT_TIMEOUT)
            for task in pending:  # a callable step that never returns
                task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeOpenAI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- HTTP ----

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                line, *header_lines = head.decode("latin-1").split("\r\n")
                method, target, _ = line.split(" ", 2)
                headers = {}
                for h in header_lines:
                    if ":" in h:
                        k, v = h.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await _read_chunked(reader)
                else:
                    body = await reader.readexactly(int(headers.get("content-length") or 0))
                try:
                    await self._dispatch(method, target.split("?", 1)[0], headers, body, writer)
                except _Close:
                    return
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()

    async def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> None:
        path = path.rstrip("/")
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            await _send_json(writer, 401, _error_body(401, "Incorrect API key provided"))
            return
        if method == "GET" and path == "/v1/models":
            data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]
            await _send_json(writer, 200, {"object": "list", "data": data})
            return
        if self.llama and method == "POST" and path == "/extras/tokenize/count":
            text = json.loads(body).get("input", "")
            self.tokenized.append(text)
            await _send_json(writer, 200, {"count": len(text.split())})
            return
        if method != "POST" or path != "/v1/chat/completions":
            await _send_json(writer, 404, _error_body(404, f"no route {method} {path}"))
            return
        try:
            request = json.loads(body)
        except ValueError:
            await _send_json(writer, 400, _error_body(400, "body is not JSON"))
            return
        async with self._changed:
            self.requests.append(request)
            self.headers.append(headers)
            self._changed.notify_all()
        step: Any = self.script.popleft() if self.script else self.fallback
        await self._serve(step, request, writer)

    async def _serve(self, step: Any, request: dict, writer: asyncio.StreamWriter) -> None:
        while callable(step) and not isinstance(
            step, Reply | ToolCalls | Error | Hold | Disconnect | Raw
        ):
            step = step(request)
            if inspect.isawaitable(step):
                step = await step
        if step is None:
            await _send_json(writer, 400, _error_body(400, "fake_openai: script exhausted"))
        elif isinstance(step, Hold):
            step.arrived.set()
            waits = [asyncio.ensure_future(e.wait()) for e in (step.release, self._closing)]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if not step.release.is_set():
                raise _Close
            await self._serve(step.then, request, writer)
        elif isinstance(step, Disconnect):
            raise _Close
        elif isinstance(step, Raw):
            await _send_raw(writer, step)
            if step.held:
                await self._closing.wait()
            if step.declared is not None or step.held:
                raise _Close
        elif isinstance(step, Error):
            await _send_json(
                writer, step.status, _error_body(step.status, step.message), step.headers
            )
        else:
            message, finish, usage = self._message(
                step if not isinstance(step, str) else Reply(step)
            )
            model = request.get("model") or self.model
            if request.get("stream"):
                await _send_stream(writer, model, message, finish, None if self.llama else usage)
            else:
                await _send_json(writer, 200, _completion(model, message, finish, usage))

    def _message(self, step: Reply | ToolCalls) -> tuple[dict, str, dict]:
        if isinstance(step, Reply):
            msg = {"role": "assistant", "content": step.content}
            return msg, step.finish_reason, step.usage or DEFAULT_USAGE
        calls = []
        for i, (name, args) in enumerate(step.calls):
            call_id = step.ids[i] if step.ids else f"call__{i}_{name}_cmpl-{uuid.uuid4()}"
            arguments = args if isinstance(args, str) else json.dumps(args)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        msg = {"role": "assistant", "content": step.content, "tool_calls": calls}
        return msg, "tool_calls", step.usage or DEFAULT_USAGE


def _completion(model: str, message: dict, finish: str, usage: dict) -> dict:
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }


def _error_body(status: int, message: str) -> dict:
    kind = {401: "invalid_request_error", 404: "not_found", 429: "rate_limit_exceeded"}
    return {"error": {"message": message, "type": kind.get(status, "server_error"), "code": None}}


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


async def _send_json(
    writer: asyncio.StreamWriter, status: int, obj: Any, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps(obj).encode()
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    head += ["content-type: application/json", f"content-length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


async def _send_raw(writer: asyncio.StreamWriter, step: Raw) -> None:
    body = step.encoded()
    head = [f"HTTP/1.1 {step.status} {_REASONS.get(step.status, 'Status')}"]
    if step.held:  # chunked, the last chunk never sent
        head += [f"content-type: {step.content_type}", "transfer-encoding: chunked"]
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n"
    else:
        length = len(body) if step.declared is None else step.declared
        head += [f"content-type: {step.content_type}", f"content-length: {length}"]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


async def _send_stream(
    writer: asyncio.StreamWriter, model: str, message: dict, finish: str, usage: dict | None
) -> None:
    """The message as SSE chunks (tool-call arguments split like real servers do)."""
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    writer.write(head.encode())
    cid, created = "chatcmpl-" + uuid.uuid4().hex[:12], int(time.time())

    async def send(data: str) -> None:
        raw = data.encode()
        writer.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        await writer.drain()

    async def chunk(
        delta: dict, finish_reason: str | None = None, with_usage: bool = False
    ) -> None:
        obj: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if with_usage and usage is not None:
            obj["usage"] = usage
        await send(f"data: {json.dumps(obj)}\n\n")

    calls = message.get("tool_calls") or []
    await chunk({"role": "assistant", "content": None if calls else ""})
    if message.get("content"):  # the text first, then any calls, as real servers send them
        words = message["content"].split(" ")
        for k, word in enumerate(words):  # the words joined again are the content, exactly
            await chunk({"content": word + (" " if k < len(words) - 1 else "")})
    for i, tc in enumerate(calls):
        fn = tc["function"]
        await chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": tc["id"],
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": ""},
                    }
                ]
            }
        )
        for j in range(0, len(fn["arguments"]), 8):
            await chunk(
                {
                    "tool_calls": [
                        {"index": i, "function": {"arguments": fn["arguments"][j : j + 8]}}
                    ]
                }
            )
    await chunk({}, finish, with_usage=True)
    await send("data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
