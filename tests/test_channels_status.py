"""Status frames (issue 16): short-lived progress, fanned out by a real hub, never stored.

The frame rules are pure (parse and encode); the fan-out runs on a real hub on
loopback with real clients; ``atirc`` runs as a subprocess, once with stdout on
a pseudo-terminal (the status line) and once on a pipe (no status line).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.client import WebSocketChannel
from channels.errors import ProtocolError
from channels.frames import MAX_STATUS_TEXT, ErrorCode, Status, StatusUpdate
from channels.ids import ZERO_ID
from channels.protocol import encode, parse_client_frame, parse_server_frame
from channels.statusline import ERASE, StatusLine
from tests.fakes.channels_helpers import WAIT, Clients, Hubs, RawClient, take
from tests.test_channels_cli import ATIRC, _atirc, _env

THREAD = "01JDN5X6Q7R8S9T0V1W2X3Y4Z5"
OPS = {"channel": "#ops", "thread": THREAD}


@pytest.fixture
async def hub(tmp_path):
    """A hub on loopback, closed after the test."""
    hubs = Hubs(tmp_path / "hub.db")
    yield await hubs.start()
    await hubs.aclose()


@pytest.fixture
async def clients():
    """WebSocketChannels closed after the test."""
    made = Clients()
    yield made
    await made.aclose()


# -- the frames, pure -----------------------------------------------------------------


def test_a_status_goes_both_ways_through_encode_and_parse():
    """client → hub carries channel, thread, text; hub → client adds from and ts."""
    update = StatusUpdate(channel="#ops", thread=THREAD, text="thinking")
    assert json.loads(encode(update)) == {
        "type": "status",
        "channel": "#ops",
        "thread": THREAD,
        "text": "thinking",
    }
    assert parse_client_frame(encode(update)) == update
    status = Status(
        "#ops", THREAD, "asyncai", "running code (3 tool calls so far)", "2026-11-30T00:00:00.000Z"
    )
    assert json.loads(encode(status))["from"] == "asyncai"
    assert parse_server_frame(encode(status)) == status


@pytest.mark.parametrize(
    ("frame", "code", "words"),
    [
        ({"channel": "#ops", "text": "x"}, ErrorCode.BAD_FRAME, "missing field 'thread'"),
        ({**OPS, "thread": "nope", "text": "x"}, ErrorCode.BAD_FRAME, "not a message id"),
        ({**OPS, "text": ""}, ErrorCode.BAD_FRAME, "empty"),
        ({**OPS, "text": "a\nb"}, ErrorCode.BAD_FRAME, "one line"),
        ({**OPS, "text": "\x1b[2J"}, ErrorCode.BAD_FRAME, "one line"),
        ({**OPS, "text": "x" * 201}, ErrorCode.TOO_LARGE, "limit is 200"),
        ({**OPS, "channel": "ops", "text": "x"}, ErrorCode.BAD_CHANNEL, "invalid channel"),
    ],
)  # fmt: skip
def test_a_bad_status_is_refused_with_a_code_and_no_channel_echoed(frame, code, words):
    """Each bad status gets its code; the error names no channel (nobody waits on a status,
    and a client would take a channel echoed for a refused subscription)."""
    with pytest.raises(ProtocolError) as caught:
        parse_client_frame(json.dumps({"type": "status", **frame}))
    assert caught.value.code == code
    assert words in caught.value.message
    assert caught.value.channel is None
    assert caught.value.client_id is None


@given(st.dictionaries(st.sampled_from(["channel", "thread", "text", "from", "ts"]), st.text()))
def test_any_status_object_parses_or_is_a_protocol_error(fields):
    """Any status-typed object gives a frame or a ProtocolError, both ways, never another error."""
    raw = json.dumps({"type": "status", **fields})
    for parse in (parse_client_frame, parse_server_frame):
        try:
            frame = parse(raw)
        except ProtocolError:
            continue
        assert isinstance(frame, StatusUpdate | Status)
        if isinstance(frame, StatusUpdate):
            assert 0 < len(frame.text) <= MAX_STATUS_TEXT


# -- the hub --------------------------------------------------------------------------


async def test_the_hub_fans_a_status_out_to_subscribers_and_does_not_store_it(hub, clients):
    """A subscriber gets the status with the sender's nick; a later replay from the start has
    the messages and no status."""
    got: list[Status] = []
    watcher = await clients.connect(hub.url, nick="watcher", on_status=got.append)
    await watcher.subscribe("#ops")
    daemon = await clients.connect(hub.url, nick="asyncai")
    first = await daemon.publish("#ops", "before")
    await daemon.status("#ops", "thinking", thread=first.thread)
    last = await daemon.publish("#ops", "after", thread=first.thread)
    assert [m.id for m in await take(watcher, 2)] == [first.id, last.id]
    [status] = got  # the status came before "after": the hub keeps one connection's order
    assert (status.channel, status.thread, status.sender, status.text) == (
        "#ops",
        first.thread,
        "asyncai",
        "thinking",
    )
    assert hub.stats.statuses == 1
    late: list[Status] = []
    replayer = await clients.connect(hub.url, nick="late", on_status=late.append)
    await replayer.subscribe("#ops", since=ZERO_ID)
    assert [m.text for m in await take(replayer, 2)] == ["before", "after"]
    assert late == []


async def test_a_bad_status_gets_bad_frame_and_the_connection_stays(hub, clients):
    """A status without a thread: a bad_frame error without a channel; the same connection
    publishes fine after it, and its subscription is untouched."""
    raw = await RawClient.connect(hub.url, nick="raw")
    try:
        await raw.send({"type": "subscribe", "channel": "#ops"})
        await raw.recv_type("subscribed")
        await raw.send({"type": "status", "channel": "#ops", "text": "thinking"})
        error = await raw.recv_type("error")
        assert error["code"] == "bad_frame"
        assert "channel" not in error
        await raw.send(
            {"type": "publish", "channel": "#ops", "text": "still here", "client_id": "c1"}
        )
        assert (await raw.recv_type("message"))["text"] == "still here"
    finally:
        await raw.close()


async def test_a_status_reaches_only_the_channels_subscribers(hub, clients):
    """Someone subscribed elsewhere gets nothing; the client drops statuses of channels it
    does not follow."""
    elsewhere: list[Status] = []
    other = await clients.connect(hub.url, nick="other", on_status=elsewhere.append)
    await other.subscribe("#dev")
    sender = await clients.connect(hub.url, nick="asyncai")
    await sender.status("#ops", "thinking", thread=THREAD)
    await sender.publish("#dev", "sentinel")
    await take(other, 1)
    assert elsewhere == []


async def test_a_status_callback_that_raises_is_logged_and_messages_keep_coming(hub, clients):
    """The reader survives a broken on_status: the next message still arrives."""

    def broken(status: Status) -> None:
        raise RuntimeError("bug in the caller")

    watcher = await clients.connect(hub.url, nick="watcher", on_status=broken)
    await watcher.subscribe("#ops")
    sender = await clients.connect(hub.url, nick="asyncai")
    await sender.status("#ops", "thinking", thread=THREAD)
    await sender.publish("#ops", "after")
    [message] = await take(watcher, 1)
    assert message.text == "after"
    assert not watcher.broken


async def test_the_client_refuses_a_status_it_could_never_send(hub, clients):
    """A newline or 201 characters: ProtocolError before anything is sent."""
    sender = await clients.connect(hub.url, nick="asyncai")
    for text in ("two\nlines", "x" * 201, ""):
        with pytest.raises(ProtocolError):
            await sender.status("#ops", text, thread=THREAD)
    with pytest.raises(ProtocolError):
        await sender.status("#ops", "ok", thread="not-an-id")


# -- the status line, pure ------------------------------------------------------------


def test_the_status_line_redraws_in_place_with_the_seconds_and_is_erased():
    """show draws "[Ns] text" after an erase; redraw moves the seconds on; clear erases it;
    a line wider than the terminal is cut, so it never wraps."""
    now = [100.0]
    out = io.StringIO()
    line = StatusLine(out, clock=lambda: now[0], width=lambda: 30)
    line.redraw()
    assert out.getvalue() == ""  # nothing to show yet
    line.show("asyncai: thinking")
    now[0] += 3.4
    line.redraw()
    line.show("asyncai: running code (12 tool calls so far)")
    line.clear()
    assert out.getvalue().split(ERASE) == [
        "",
        "[0s] asyncai: thinking",
        "[3s] asyncai: thinking",
        "[3s] asyncai: running code (…",  # 29 columns: the last one stays free
        "",
    ]
    line.clear()  # twice: nothing more
    assert out.getvalue().endswith("…" + ERASE)


# -- the atirc command ----------------------------------------------------------------


async def _sub_lines(hub_url: str, *flags: str, sender: WebSocketChannel) -> list[str]:
    """``atirc sub #ops FLAGS`` while ``sender`` says: a message, a status, a message."""
    proc = await asyncio.create_subprocess_exec(
        str(ATIRC), "sub", "#ops", *flags, env=_env(hub_url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(WAIT):
            # sub is live once a message published now reaches it (statuses are not
            # replayed): ping until one is printed
            reading = asyncio.ensure_future(proc.stdout.readline())
            while not reading.done():
                await sender.publish("#ops", "ping")
                await asyncio.wait([reading], timeout=0.2)
            first = await sender.publish("#ops", "first")
            await sender.status("#ops", "thinking", thread=first.thread)
            await sender.publish("#ops", "last", thread=first.thread)
            lines = [reading.result()]
            while b"last" not in lines[-1]:
                lines.append(await proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return [line.decode() for line in lines if b"ping" not in line]


async def test_sub_prints_statuses_only_with_status(hub, clients):
    """Plain sub: the two messages. --status: the status between them, marked "*"; with
    --json as a status frame."""
    sender = await clients.connect(hub.url, nick="asyncai")
    plain = await _sub_lines(hub.url, sender=sender)
    assert len(plain) == 2
    assert "thinking" not in "".join(plain)
    shown = await _sub_lines(hub.url, "--status", sender=sender)
    assert len(shown) == 3, shown
    assert re.fullmatch(r"\S+Z \* <asyncai> \(re [0-9A-Z]{26}\) thinking\n", shown[1])
    as_json = await _sub_lines(hub.url, "--status", "--json", sender=sender)
    frame = parse_server_frame(as_json[1])
    assert isinstance(frame, Status)
    assert frame.text == "thinking"


async def _respond_with_progress(channel: WebSocketChannel) -> None:
    """Answer the first message from someone else: two statuses, then the reply."""
    async for message in channel:
        if message.sender != channel.nick:
            await channel.status("#ops", "thinking", thread=message.thread)
            await channel.status(
                "#ops", "running code (2 tool calls so far)", thread=message.thread
            )
            await channel.publish("#ops", "Two pods.", thread=message.thread, reply_to=message.id)
            return


def _read_all(fd: int) -> bytes:
    """Everything a pseudo-terminal's controller reads until the other side is closed."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process closed the terminal
            return out
        if not chunk:
            return out
        out += chunk


async def test_pub_wait_at_a_terminal_shows_the_status_line_then_the_reply(hub, clients):
    """stdout on a pty: the id, the status line (erased and redrawn, with seconds), erased,
    then the reply on a clean line."""
    responder = await clients.connect(hub.url, nick="asyncai")
    await responder.subscribe("#ops")
    controller, terminal = pty.openpty()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_respond_with_progress(responder))
            proc = await asyncio.create_subprocess_exec(
                str(ATIRC), "pub", "#ops", "which pods?", "--wait", "10",
                env=_env(hub.url), stdout=terminal, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            os.close(terminal)
            terminal = -1
            async with asyncio.timeout(WAIT * 2):
                out, (_, err) = await asyncio.gather(
                    asyncio.to_thread(_read_all, controller), proc.communicate()
                )
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(controller)
    assert proc.returncode == 0, err
    text = out.decode().replace("\r\n", "\n")  # the terminal's own newline translation
    mid, rest = text.split("\n", 1)
    assert len(mid) == 26
    assert re.search(r"\[\d+s\] asyncai: (thinking|running code \(2 tool calls so far\))", rest)
    drawn, reply = rest.rsplit(ERASE, 1)
    assert drawn.startswith(ERASE)
    assert reply == "Two pods.\n"


async def test_pub_wait_on_a_pipe_prints_no_status(hub, clients):
    """stdout is not a terminal: the id and the reply, nothing of the statuses."""
    responder = await clients.connect(hub.url, nick="asyncai")
    await responder.subscribe("#ops")
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_respond_with_progress(responder))
        code, out, err = await _atirc(
            "pub", "#ops", "which pods?", "--wait", "10", env=_env(hub.url)
        )
    assert code == 0, err
    mid, reply = out.split("\n", 1)
    assert len(mid) == 26
    assert reply == "Two pods.\n"
