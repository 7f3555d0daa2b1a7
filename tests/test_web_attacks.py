"""The console attacked from outside (issue 30): raw HTTP on loopback, hostile text in the store.

Each test is what a stranger on the network, or the author of a prompt whose text
ends up in a transcript, could send or write; the console must answer with a
clear 4xx (never a 500) and never run or mangle what it shows.
"""

from __future__ import annotations

import asyncio
import re

import httpx2

from daemon import asgi
from daemon.web import WebServer
from sessions.testing import tool_call_row
from tests import test_web_live
from tests.test_web_auth import TOKEN, log_in

WAIT = 10.0
served = test_web_live.served  # the fixture: a store with a running run in #ops/t1, a console


async def raw(server: WebServer, request: bytes, *, read: int = 1 << 16) -> bytes:
    """Send ``request`` as it is on a fresh connection; what came back before it closed."""
    assert server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(WAIT):
            return await reader.read(read)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer."""
    found = re.match(rb"HTTP/1\.1 (\d{3})", answer)
    assert found is not None, answer[:200]
    return int(found.group(1))


def sse_messages(stream: bytes) -> list[tuple[str, str]]:
    """``(event, data)`` of a stream parsed as a browser's EventSource does: a line ends at
    CRLF, a lone LF or a lone CR (the HTML standard's event stream format)."""
    messages = []
    event, data = "message", []
    for line in re.split(r"\r\n|\r|\n", stream.decode()):
        if line == "":
            if data:
                messages.append((event, "\n".join(data)))
            event, data = "message", []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    return messages


async def test_a_carriage_return_in_a_transcript_does_not_cut_the_live_html(served):
    """A prompt with a lone CR reaches the browser whole: EventSource ends a line at CR,
    so the stream must not carry one bare inside a data line."""
    store, _, server = served
    hostile = 'evil\revent: end\rdata: <b hx-get="/x">'
    await store.runs.record_prompt("#ops", "t2", "p2", "mallory", hostile, "2026-11-29T18:00:01Z")
    await store.runs.start_run("r2", "#ops", "t2", ["p2"])
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        got = b""
        async with client.stream("GET", "/threads/%23ops/t2/events") as stream:
            chunks = stream.aiter_raw()
            got += await anext(chunks)  # retry:
            await store.audit.add_tool_call(tool_call_row("r2", "t2", tool="nap"))
            async with asyncio.timeout(WAIT):
                while b'data-tool="nap"' not in got or not got.endswith(b"\n\n"):
                    got += await anext(chunks)
    messages = sse_messages(got)
    assert [event for event, _ in messages] == ["update"]
    html = messages[0][1]
    assert "mallory" in html
    assert 'data-tool="nap"' in html
    assert "evil\nevent: end\ndata: " in html
    assert "&lt;b hx-get=&#34;/x&#34;&gt;" in html


# ---- bodies -------------------------------------------------------------------------------


async def chunked(server: WebServer, head: bytes, total: int, first: bytes = b"a=") -> bytes:
    """A chunked body of ``total`` bytes after ``head`` (``first``, then ``x``), sent until
    the server answers."""
    assert server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        chunk = b"x" * 65_536
        sent = 0
        answer = asyncio.ensure_future(reader.read(1000))
        while sent < total and not answer.done():
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
            try:
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.sleep(0)
        if not answer.done():
            writer.write(b"0\r\n\r\n")
        async with asyncio.timeout(WAIT):
            return await answer
    finally:
        writer.close()


FORM_HEAD = (
    b"POST /login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\n"
)


async def test_a_login_body_over_a_mebibyte_is_refused_before_it_is_read(served):
    """No session needed to post /login: a body that says it is large gets 413 on its
    headers alone, one sent in chunks 413 once it passes the bound (before, 9 MB of
    fields were read into memory and parsed: 1000 fields of 1 MB each were let in)."""
    _, _, server = served
    said = await raw(server, FORM_HEAD + b"content-length: 9000000\r\n\r\n")
    assert status_of(said) == 413
    assert status_of(await chunked(server, FORM_HEAD, 9_000_000)) == 413
    upload = b"POST /login HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=b\r\n"
    part = b'--b\r\ncontent-disposition: form-data; name="token"; filename="t"\r\n\r\n'
    assert status_of(await chunked(server, upload, 9_000_000, part)) == 413


async def test_a_logged_in_post_over_a_mebibyte_is_refused_too(served):
    """The guard's own read of a form's csrf field is bounded the same way."""
    _, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        cookie = f"asyncai_session={client.cookies['asyncai_session']}".encode()
    head = (
        b"POST /approvals/abc/decide HTTP/1.1\r\nhost: x\r\ncookie: " + cookie + b"\r\n"
        b"content-type: application/x-www-form-urlencoded\r\n"
    )
    assert status_of(await chunked(server, head, 9_000_000)) == 413
    small = b"csrf=wrong&action=approve"
    answer = await raw(server, head + b"content-length: %d\r\n\r\n%s" % (len(small), small))
    assert status_of(answer) == 403


# ---- slow and many clients ----------------------------------------------------------------


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closes the connection within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1000):
                pass
    except TimeoutError:
        return False
    return True


async def test_a_client_that_never_finishes_its_request_is_closed(served, monkeypatch):
    """A connection that sends nothing, half a head, or half a body is cut once the
    request deadline passes (before, each stayed open for good: a stranger could hold
    every file descriptor of the daemon with idle connections)."""
    monkeypatch.setattr(asgi, "REQUEST_TIMEOUT", 0.5)
    _, _, server = served
    assert server.port is not None
    for first in (
        b"",
        b"GET / HTTP/1.1\r\nhost: x\r\n",
        FORM_HEAD + b"content-length: 100\r\n\r\ncsrf=",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(first)
        try:
            assert await closed_within(reader, 5.0), first
        finally:
            writer.close()


async def test_a_live_stream_outlives_the_request_deadline(served, monkeypatch):
    """The deadline is for sending a request, not for its answer: a stream stays open."""
    monkeypatch.setattr(asgi, "REQUEST_TIMEOUT", 0.3)
    store, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        async with client.stream("GET", "/threads/%23ops/t1/events") as stream:
            chunks = stream.aiter_raw()
            assert (await anext(chunks)).startswith(b"retry:")
            await asyncio.sleep(1.0)
            await store.audit.add_tool_call(tool_call_row("r1", "t1", tool="nap"))
            async with asyncio.timeout(WAIT):
                got = b""
                while b'data-tool="nap"' not in got:
                    got += await anext(chunks)
        assert (await client.get("/")).status_code == 200


async def test_connections_past_the_cap_are_closed_at_once(served, monkeypatch):
    """Past MAX_CONNECTIONS open connections a new one is closed at once; when they
    go, the console answers again."""
    monkeypatch.setattr(asgi, "MAX_CONNECTIONS", 5)
    _, _, server = served
    assert server.port is not None
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(5)]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await closed_within(reader, 2.0)
        writer.close()
    finally:
        for _, w in held:
            w.close()
    await asyncio.sleep(0.2)
    assert status_of(await raw(server, b"GET /login HTTP/1.1\r\nhost: x\r\n\r\n")) == 200


async def test_a_head_of_the_live_stream_ends_at_once(served):
    """HEAD of a thread's stream answers its headers and ends (before, the stream ran
    with no body for STREAM_MAX, polling the thread, and the connection could carry
    no other request)."""
    _, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        await log_in(client)
        head = await client.head("/threads/%23ops/t1/events")
        assert head.status_code == 200
        assert head.headers["content-type"].startswith("text/event-stream")
        async with asyncio.timeout(3.0):
            assert (await client.get("/")).status_code == 200
        assert (await client.head("/threads/%23ops/nope/events")).status_code == 404


# ---- login ------------------------------------------------------------------------------


async def test_another_site_cannot_log_a_browser_in_with_a_nul_csrf_field(served):
    """A cross-site form carries no login cookie; its csrf field of one NUL character
    matched the stand-in the check used for a missing cookie, and logged the browser in
    as the token's nick (login CSRF)."""
    _, _, server = served
    async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
        for csrf in ("\0", ""):
            forged = await client.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "/"})
            assert forged.status_code == 403
            assert "asyncai_session" not in client.cookies


async def test_a_login_forms_file_parts_are_closed(served) -> None:
    """A multipart login form may carry file parts (spooled temporary files): the form is
    closed once read, so none is left open for the collector to find and warn about."""
    import gc
    import warnings

    _, _, server = served
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with httpx2.AsyncClient(base_url=server.url, timeout=WAIT) as client:
            answer = await client.post("/login", files={"csrf": ("a", b"x"), "token": ("b", b"y")})
            assert answer.status_code == 403
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == [], [str(w.message) for w in leaked]
