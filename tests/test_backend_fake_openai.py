"""The scripted OpenAI-compatible server every area's tests use, checked through the real SDK."""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai import AsyncOpenAI

from tests.fakes.fake_openai import Disconnect, Error, FakeOpenAI, Hold, Reply, ToolCalls

MESSAGES = [{"role": "user", "content": "hi"}]


def client_for(fake: FakeOpenAI, key: str = "k") -> AsyncOpenAI:
    """An SDK client on the fake, without the SDK's own retries."""
    return AsyncOpenAI(base_url=fake.base_url, api_key=key, max_retries=0, timeout=10)


async def test_steps_are_served_in_order_and_requests_recorded():
    """Reply, a bare string and ToolCalls, one per request; bodies and headers kept."""
    script = [Reply("one"), "two", ToolCalls(("f", {"a": 1}), ("g", "{broken"))]
    async with FakeOpenAI(script) as fake:
        client = client_for(fake)
        try:
            r1 = await client.chat.completions.create(model="m", messages=MESSAGES)
            r2 = await client.chat.completions.create(model="m", messages=MESSAGES, temperature=0)
            r3 = await client.chat.completions.create(model="m", messages=MESSAGES)
        finally:
            await client.close()
    assert (r1.choices[0].message.content, r2.choices[0].message.content) == ("one", "two")
    calls = r3.choices[0].message.tool_calls
    assert r3.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("f", '{"a": 1}'),
        ("g", "{broken"),
    ]
    assert calls[0].id.startswith("call__0_f_cmpl-")
    assert r3.choices[0].message.content is None
    assert r1.usage.prompt_tokens == 10
    assert [r["model"] for r in fake.requests] == ["m", "m", "m"]
    assert fake.requests[1]["temperature"] == 0
    assert fake.headers[0]["authorization"] == "Bearer k"


async def test_errors_carry_status_body_and_headers():
    """Error(status) reaches the SDK as its exception type, with the message and headers."""
    async with FakeOpenAI([Error(429, "slow down", headers={"retry-after": "3"})]) as fake:
        client = client_for(fake)
        try:
            with pytest.raises(openai.RateLimitError) as err:
                await client.chat.completions.create(model="m", messages=MESSAGES)
        finally:
            await client.close()
    assert err.value.status_code == 429
    assert err.value.body["message"] == "slow down"
    assert err.value.response.headers["retry-after"] == "3"


async def test_hold_waits_for_release_without_sleeping():
    """A held request is recorded, signals arrival, and is answered only when released."""
    hold = Hold(Reply("released"))
    async with FakeOpenAI([hold]) as fake:
        client = client_for(fake)
        try:
            task = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
            await hold.arrived.wait()
            assert len(fake.requests) == 1
            assert not task.done()
            hold.release.set()
            response = await task
        finally:
            await client.close()
    assert response.choices[0].message.content == "released"


async def test_closing_ends_held_requests():
    """close() does not wait for a release that never comes: the client sees the connection drop."""
    hold = Hold(Reply("never"))
    fake = await FakeOpenAI([hold]).start()
    client = client_for(fake)
    try:
        task = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
        await hold.arrived.wait()
        await fake.close()
        with pytest.raises(openai.APIConnectionError):
            await task
    finally:
        await client.close()


async def test_disconnect_callables_fallback_and_exhaustion():
    """Disconnect drops the connection; callables see the body; fallback answers past the script."""
    script = [Disconnect(), lambda body: Reply(f"{len(body['messages'])} messages")]
    async with FakeOpenAI(script) as fake:
        client = client_for(fake)
        try:
            with pytest.raises(openai.APIConnectionError):
                await client.chat.completions.create(model="m", messages=MESSAGES)
            r = await client.chat.completions.create(model="m", messages=MESSAGES * 3)
            assert r.choices[0].message.content == "3 messages"
            with pytest.raises(openai.BadRequestError, match="script exhausted"):
                await client.chat.completions.create(model="m", messages=MESSAGES)
            fake.fallback = "always this"
            r = await client.chat.completions.create(model="m", messages=MESSAGES)
            assert r.choices[0].message.content == "always this"
        finally:
            await client.close()


async def test_async_callable_steps_and_wait_for_requests():
    """An async step can wait on the test; wait_for_requests blocks until requests arrived."""
    gate = asyncio.Event()

    async def gated(body: dict) -> Reply:
        await gate.wait()
        return Reply("through")

    async with FakeOpenAI([gated]) as fake:
        client = client_for(fake)
        try:
            task = asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
            await fake.wait_for_requests(1)
            gate.set()
            assert (await task).choices[0].message.content == "through"
        finally:
            await client.close()


async def test_streaming_sends_the_same_steps_as_server_sent_events():
    """stream=True: text in word chunks, tool-call arguments in fragments, usage at the end."""
    async with FakeOpenAI(["hello there", ToolCalls(("f", {"long": "x" * 30}))]) as fake:
        client = client_for(fake)
        try:
            text, usage = "", None
            async for chunk in await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True
            ):
                text += chunk.choices[0].delta.content or ""
                usage = chunk.usage or usage
            args, fragments = "", 0
            async for chunk in await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True
            ):
                for tc in chunk.choices[0].delta.tool_calls or []:
                    if tc.function and tc.function.arguments:
                        args += tc.function.arguments
                        fragments += 1
        finally:
            await client.close()
    assert text.strip() == "hello there"
    assert usage.total_tokens == 15
    assert args == '{"long": "' + "x" * 30 + '"}'
    assert fragments > 1


async def test_models_and_api_key_check():
    """GET /v1/models lists the model; with api_key set, another key is refused with 401."""
    async with FakeOpenAI(api_key="right", model="tiny") as fake:
        good, bad = client_for(fake, "right"), client_for(fake, "wrong")
        try:
            assert [m.id async for m in good.models.list()] == ["tiny"]
            with pytest.raises(openai.AuthenticationError):
                await bad.chat.completions.create(model="m", messages=MESSAGES)
        finally:
            await good.close()
            await bad.close()
    assert fake.requests == []
