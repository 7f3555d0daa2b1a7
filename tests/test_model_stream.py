"""Streamed replies (issue 31): the split of a model request at its first token, the
chunks folded back into the completion a plain request gets, the servers that stream
badly or not at all, and the model slots.

The model is the scripted server on loopback (``tests.fakes.fake_openai``); with
``llama=True`` it streams as llama-cpp-python 0.3.36 does (no usage, a tokenizer
route). Everything else is real: the openai SDK, the endpoint, the timeline.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import sys
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.backoff import Backoff
from daemon.config import ModelConfig
from daemon.errors import BackendError
from daemon.model import ModelSlots
from daemon.model.endpoint import ChatEndpoint
from daemon.model.response import completion_problem
from daemon.model.stream import Assembly, Events
from daemon.runtime.timing import Timelines, time_split
from sessions.model import RunMetrics
from tests.fakes.fake_openai import Error, FakeOpenAI, Hold, Raw, Reply, ToolCalls

MESSAGES = [{"role": "user", "content": "how many pods are not running"}]


def _endpoint(
    fake: FakeOpenAI, *, slots: asyncio.Semaphore | None = None, **params: Any
) -> ChatEndpoint:
    params.setdefault("retries", 0)
    model = ModelConfig(base_url=fake.base_url, api_key="k", model="m", **params)
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
    return ChatEndpoint(client, model, "m", Backoff(0.0, 0.0), slots)


async def _complete(endpoint: ChatEndpoint, metrics: RunMetrics | None = None) -> Any:
    body = {"model": "m", "messages": MESSAGES}
    return await endpoint.complete(body, metrics or RunMetrics(), "r1")


# ---- the assembly, pure ------------------------------------------------------------------


def _chunks(message: dict[str, Any], cuts: list[int], usage: dict | None) -> list[dict]:
    """``message`` as a server streams it, its text and arguments cut at ``cuts``."""
    out: list[dict] = [{"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]}]

    def pieces(text: str) -> list[str]:
        marks = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
        return [text[a:b] for a, b in itertools.pairwise(marks) if b > a]

    for piece in pieces(message.get("content") or ""):
        out.append({"choices": [{"delta": {"content": piece}}]})
    for i, call in enumerate(message.get("tool_calls") or []):
        head = {"index": i, "id": call["id"], "function": {"name": call["function"]["name"]}}
        out.append({"choices": [{"delta": {"tool_calls": [head]}}]})
        for piece in pieces(call["function"]["arguments"]):
            fragment = {"index": i, "function": {"arguments": piece}}
            out.append({"choices": [{"delta": {"tool_calls": [fragment]}}]})
    out.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        out.append({"choices": [], "usage": usage})
    return out


@settings(max_examples=200, deadline=None)
@given(
    content=st.text(max_size=40),
    arguments=st.lists(st.text(max_size=30), max_size=3),
    cuts=st.lists(st.integers(0, 50), max_size=8),
)
def test_folding_any_cut_of_a_reply_gives_the_reply_back(
    content: str, arguments: list[str], cuts: list[int]
) -> None:
    """However a server cuts the text and the calls' arguments into chunks, the folded
    body is the message it streamed, and the response checks read it."""
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": f"f{i}", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assembly = Assembly()
    for chunk in _chunks(message, cuts, usage):
        assembly.add(chunk)
    body = assembly.body()
    assert assembly.problem is None
    assert assembly.usage_reported
    assert completion_problem(body) is None
    folded = json.loads(body)
    got = folded["choices"][0]["message"]
    assert (got.get("content") or "") == content
    assert got.get("tool_calls", []) == calls
    assert folded["usage"] == usage
    assert folded["id"] == "c1"


def test_a_stream_without_usage_counts_its_pieces_and_takes_a_usage_given() -> None:
    assembly = Assembly()
    for chunk in _chunks({"content": "abcdef"}, [2, 4], None):
        assembly.add(chunk)
    assert not assembly.usage_reported
    assert assembly.pieces == 3
    given_usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    assert json.loads(assembly.body(given_usage))["usage"] == given_usage


@pytest.mark.parametrize(
    ("chunk", "problem"),
    [
        ([1], "a streamed chunk is not a JSON object"),
        ({"choices": "x"}, "a streamed chunk's choices is not a list of objects"),
        ({"choices": [{"delta": 3}]}, "a streamed chunk's delta is not an object"),
        ({"choices": [{"delta": {"content": 4}}]}, "delta.content is not a string"),
        ({"choices": [{"delta": {"tool_calls": {}}}]}, "delta.tool_calls is not a list"),
        ({"choices": [{"delta": {"tool_calls": [{"index": "0"}]}}]}, "no integer index"),
        (
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": 1}}]}}]},
            "function.name is not a string",
        ),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_named(chunk: Any, problem: str) -> None:
    assembly = Assembly()
    assembly.add({"choices": [{"delta": {"content": "ok"}}]})
    assembly.add(chunk)
    assembly.add({"choices": [{"delta": {"content": "later"}}]})  # ignored after a problem
    assert assembly.problem is not None
    assert problem in assembly.problem


# ---- the endpoint over the scripted server -------------------------------------------------


async def test_a_streamed_reply_marks_its_first_token_and_reads_as_a_plain_one() -> None:
    """The request asks for a stream with its usage; the reply, its calls and its usage
    are what a plain request gets; the span is split at the first chunk."""
    async with FakeOpenAI(["the answer is 42", ToolCalls(("run_code", {"code": "1 + 1"}))]) as fake:
        endpoint = _endpoint(fake)
        metrics = RunMetrics()
        async with Timelines().timing_run("r1", {}) as timeline:
            text = await _complete(endpoint, metrics)
            calls = await _complete(endpoint, metrics)
        await endpoint.client.close()
    assert fake.requests[0]["stream"] is True
    assert fake.requests[0]["stream_options"] == {"include_usage": True}
    assert text.choices[0].message.content == "the answer is 42"
    assert text.choices[0].finish_reason == "stop"
    (call,) = calls.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "run_code",
        {"code": "1 + 1"},
    )
    assert (metrics.rounds, metrics.prompt_tokens, metrics.completion_tokens) == (2, 20, 10)
    spans = timeline.of_kind("model.request")
    assert len(spans) == 2
    for span in spans:
        assert span.start <= span.marks["first_token"] <= span.end
    split = time_split(timeline)
    assert split.prompt_eval > 0
    assert split.generation >= 0
    assert split.prompt_eval + split.generation <= split.total


async def test_without_streamed_usage_the_tokens_are_counted_by_the_servers_tokenizer() -> None:
    """llama-cpp-python streams no usage: the generated tokens are the stream's pieces
    (one a word here), the prompt's are its tokenizer's count of the messages' text."""
    async with FakeOpenAI(["one two three four"], llama=True) as fake:
        endpoint = _endpoint(fake)
        metrics = RunMetrics()
        reply = await _complete(endpoint, metrics)
        await endpoint.client.close()
    assert reply.choices[0].message.content == "one two three four"
    assert fake.tokenized == ["how many pods are not running"]
    assert (metrics.prompt_tokens, metrics.completion_tokens) == (6, 4)


async def test_without_usage_or_tokenizer_the_prompt_tokens_stay_unknown_and_unasked() -> None:
    """A server without usage in its stream and without the tokenizer route: prompt
    tokens 0, generated ones counted; the route is not asked again."""

    async with FakeOpenAI(["a b", "c d e"], llama=True) as fake:
        fake.llama = True
        endpoint = _endpoint(fake)
        fake_dispatch = fake._dispatch

        async def no_tokenizer(method, path, headers, body, writer):  # type: ignore[no-untyped-def]
            if path.startswith("/extras"):
                path = "/missing"
            return await fake_dispatch(method, path, headers, body, writer)

        fake._dispatch = no_tokenizer  # type: ignore[method-assign]
        metrics = RunMetrics()
        await _complete(endpoint, metrics)
        first = metrics.completion_tokens
        await _complete(endpoint, metrics)
        await endpoint.client.close()
    assert (metrics.prompt_tokens, first, metrics.completion_tokens) == (0, 2, 5)
    assert fake.tokenized == []


async def test_a_stream_that_brings_nothing_is_asked_again_plainly_and_never_streamed_again():
    """llama-cpp-python with tool_choice auto fails inside its stream: the client sees an
    empty stream. The same request goes again without streaming, and so do later ones."""
    empty = Raw(b"data: [DONE]\n\n", content_type="text/event-stream")
    async with FakeOpenAI([empty, "plain", "still plain"]) as fake:
        endpoint = _endpoint(fake)
        first = await _complete(endpoint)
        second = await _complete(endpoint)
        await endpoint.client.close()
    assert [first.choices[0].message.content, second.choices[0].message.content] == [
        "plain",
        "still plain",
    ]
    assert [r.get("stream") for r in fake.requests] == [True, None, None]


async def test_a_plain_body_to_a_streamed_request_is_read_and_checked() -> None:
    """A server that ignores "stream" and answers JSON: read as such, and checked."""
    good = {
        "id": "x",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    }
    bad = {"choices": [{"index": 0, "message": None}]}
    async with FakeOpenAI([Raw(json.dumps(good)), Raw(json.dumps(bad))]) as fake:
        endpoint = _endpoint(fake)
        assert (await _complete(endpoint)).choices[0].message.content == "hi"
        with pytest.raises(BackendError, match=r"choices\[0\]\.message is null"):
            await _complete(endpoint)
        await endpoint.client.close()


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        (b"data: {not json\n\n", "sent a malformed stream"),
        (b'data: {"choices": [{"delta": {"content": 5}}]}\n\ndata: [DONE]\n\n', "not a string"),
        (
            b'data: {"choices": [{"delta": {"content": "\\ud800"}, "finish_reason": "stop"}]}\n\n',
            "not Unicode",
        ),
    ],
)
async def test_a_malformed_stream_fails_with_its_reason(events: bytes, problem: str) -> None:
    async with FakeOpenAI([Raw(events, content_type="text/event-stream")]) as fake:
        endpoint = _endpoint(fake)
        with pytest.raises(BackendError, match=problem):
            await _complete(endpoint)
        await endpoint.client.close()


async def test_a_stream_cut_short_is_asked_again_and_named_when_it_stays_cut() -> None:
    """A stream that ends without a finish_reason (llama-cpp-python cuts one so when
    another request arrives) is not a reply: it is asked again, like a time-out."""
    cut = Raw(
        b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\ndata: [DONE]\n\n',
        content_type="text/event-stream",
    )
    async with FakeOpenAI([cut, "whole", cut, cut]) as fake:
        endpoint = _endpoint(fake, retries=1)
        metrics = RunMetrics()
        assert (await _complete(endpoint, metrics)).choices[0].message.content == "whole"
        with pytest.raises(BackendError, match="ended its stream before the reply was finished"):
            await _complete(endpoint)
        await endpoint.client.close()
    assert (metrics.rounds, metrics.retries, len(fake.requests)) == (1, 1, 4)


async def test_a_server_that_refuses_the_stream_keys_is_asked_plainly_from_then_on() -> None:
    """A server that answers a streamed request with 400 (it knows no stream_options) is
    asked again without streaming, and not streamed to again; a request its plain form
    refuses as well fails with the plain request's error."""

    def strict(body: dict) -> Any:
        if "stream" in body or "stream_options" in body:
            return Error(400, "Unrecognized request argument supplied: stream_options")
        return Reply("plain")

    async with FakeOpenAI(fallback=strict) as fake:
        endpoint = _endpoint(fake)
        first = await _complete(endpoint)
        second = await _complete(endpoint)
        await endpoint.client.close()
    assert [first.choices[0].message.content, second.choices[0].message.content] == [
        "plain",
        "plain",
    ]
    assert [("stream" in r) for r in fake.requests] == [True, False, False]
    async with FakeOpenAI([Error(400, "bad model"), Error(400, "bad model")]) as fake:
        endpoint = _endpoint(fake)
        with pytest.raises(BackendError, match="HTTP 400: bad model"):
            await _complete(endpoint)
        await endpoint.client.close()
    assert len(fake.requests) == 2


async def test_stream_false_sends_plain_requests() -> None:
    async with FakeOpenAI(["x"]) as fake:
        endpoint = _endpoint(fake, stream=False)
        metrics = RunMetrics()
        async with Timelines().timing_run("r1", {}) as timeline:
            await _complete(endpoint, metrics)
        await endpoint.client.close()
    assert "stream" not in fake.requests[0]
    (span,) = timeline.of_kind("model.request")
    assert "first_token" not in span.marks  # no first token: all of it is generation
    assert time_split(timeline).prompt_eval == 0


# ---- the slots ----------------------------------------------------------------------------


async def test_one_slot_holds_the_second_request_until_the_first_is_answered() -> None:
    """With one slot a second request waits in the daemon, not at the server, and its
    span's wait for the slot is the split's model_slot."""
    hold = Hold(Reply("first"))
    async with FakeOpenAI([hold, "second"]) as fake:
        slots = ModelSlots().of(ModelConfig(base_url=fake.base_url, model="m", slots=1), "m")
        endpoint = _endpoint(fake, slots=slots)
        timelines = Timelines()

        async def ask(run_id: str) -> Any:
            async with timelines.timing_run(run_id, {}) as timeline:
                await _complete(endpoint)
            return timeline

        first = asyncio.create_task(ask("r1"))
        await asyncio.wait_for(hold.arrived.wait(), 10)
        second = asyncio.create_task(ask("r2"))
        await asyncio.sleep(0.2)
        assert len(fake.requests) == 1  # the second waits for the slot
        hold.release.set()
        waited = await asyncio.wait_for(second, 10)
        await first
        await endpoint.client.close()
    assert len(fake.requests) == 2
    assert time_split(waited).model_slot >= 0.15


def test_the_embedded_model_gets_one_slot_and_others_none_unless_configured() -> None:
    slots = ModelSlots()
    local = ModelConfig(base_url="http://127.0.0.1:1/v1", model="qwen-coder-1.5b")
    assert slots.of(local, "qwen-coder-1.5b") is slots.of(local, "qwen-coder-1.5b")
    remote = ModelConfig(base_url="https://api.example/v1", model="gpt")
    assert slots.of(remote, "gpt") is None
    three = ModelConfig(base_url="https://api.example/v2", model="gpt", slots=3)
    semaphore = slots.of(three, "gpt")
    assert semaphore is not None
    assert semaphore._value == 3


# ---- the events of a stream's body -------------------------------------------------------


def test_events_are_read_as_the_sse_standard_parses_them() -> None:
    """A blank line ends an event; several data lines join with newlines; one space after
    the colon is dropped, no more; comments, other fields and an event with no data
    give nothing; ``end`` dispatches the event in progress, as a blank line does."""
    events = Events()
    lines = [": a comment", "event: chunk", 'data: {"a":', "data:  1}", "", "", "id: 7", ""]
    assert [d for d in map(events.line, lines) if d is not None] == ['{"a":\n 1}']
    assert events.line("data") is None
    assert events.line("") == ""
    assert events.line("data:[DONE]") is None
    assert events.end() == "[DONE]"
    assert events.end() is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(exclude_characters="\r\n")), max_size=12))
def test_any_lines_give_events_or_nothing_and_never_fail(lines: list[str]) -> None:
    """Any line is read; each event's data is the data lines' values joined."""
    events = Events()
    got = [d for d in map(events.line, lines) if d is not None]
    assert all(isinstance(d, str) for d in got)
    tail = events.end()
    assert len(got) + (tail is not None) <= sum(1 for ln in lines if ln.split(":")[0] == "data")


async def test_a_streamed_reply_leaves_no_async_generator_to_the_loops_finalizer() -> None:
    """The body is read to its end: nothing of the stream is left for the loop to close
    (the SDK's iterator stopped at [DONE] and left four generators, each a thread-safe
    wake-up and a task of the loop's, issue 31)."""
    finalized: list[object] = []
    firstiter, finalizer = sys.get_asyncgen_hooks()
    assert finalizer is not None

    def counting(agen: Any) -> None:
        finalized.append(agen)
        finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=counting)
    try:
        async with FakeOpenAI([Reply("hi"), Reply("again")]) as fake:
            endpoint = _endpoint(fake)
            for _ in range(2):
                assert (await _complete(endpoint)).choices[0].message.content in ("hi", "again")
            gc.collect()
            await asyncio.sleep(0)
            await endpoint.client.close()
    finally:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
    assert finalized == []


async def test_an_error_event_fails_the_request_with_its_message() -> None:
    """An ``error`` event in the stream is the SDK's APIError: not retried, its message
    in the BackendError."""
    events = b'data: {"error": {"message": "the model crashed"}}\n\n'
    async with FakeOpenAI([Raw(events, content_type="text/event-stream")]) as fake:
        endpoint = _endpoint(fake, retries=2)
        with pytest.raises(BackendError, match="unusable response: the model crashed"):
            await _complete(endpoint)
        assert len(fake.requests) == 1
        await endpoint.client.close()


async def test_a_stream_whose_connection_drops_is_asked_again() -> None:
    """The connection closed in the middle of the body: a connection error, retried; the
    next answer is the reply."""
    chunk = b'data: {"choices": [{"delta": {"content": "h"}}]}\n\n'
    cut = Raw(chunk, content_type="text/event-stream", declared=len(chunk) + 500)
    async with FakeOpenAI([cut, Reply("hi")]) as fake:
        endpoint = _endpoint(fake, retries=1)
        metrics = RunMetrics()
        assert (await _complete(endpoint, metrics)).choices[0].message.content == "hi"
        assert metrics.retries == 1
        await endpoint.client.close()


async def test_a_stream_is_read_as_utf_8_whatever_its_headers_say() -> None:
    """Text beyond ASCII, sent as raw UTF-8 under a header naming another charset, comes
    back whole: an event stream is UTF-8."""
    text = "Zürich — 日本語, 3 pods"
    chunk = {"choices": [{"delta": {"content": text}, "finish_reason": "stop"}]}
    body = b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\ndata: [DONE]\n\n"
    raw = Raw(body, content_type="text/event-stream; charset=iso-8859-1")
    async with FakeOpenAI([raw]) as fake:
        endpoint = _endpoint(fake)
        assert (await _complete(endpoint)).choices[0].message.content == text
        await endpoint.client.close()


async def test_a_stream_held_open_after_done_is_not_waited_for() -> None:
    """A server that keeps the body open after its [DONE] event: the reply is read, not
    the request's time-out (5 s here) waited for and failed."""
    chunk = {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}
    body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    async with FakeOpenAI([Raw(body, content_type="text/event-stream", held=True)]) as fake:
        endpoint = _endpoint(fake, request_timeout=5)
        assert (await _complete(endpoint)).choices[0].message.content == "hi"
        await endpoint.client.close()
