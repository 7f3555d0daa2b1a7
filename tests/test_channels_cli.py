"""The atirc command line, run as a real subprocess against a real hub.

``pub --wait`` is answered by a test responder (a WebSocketChannel in the
test's loop); ``atirc hub`` runs as its own process under a fake systemd
notify socket.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from channels.client import WebSocketChannel
from channels.errors import UnauthorizedError
from channels.hub import GOING_AWAY_CLOSE
from channels.ids import ZERO_ID, is_id
from channels.protocol import parse_server_frame
from tests.fakes.channels_helpers import WAIT, Clients, Hubs, RawClient, take

ATIRC = Path(sys.executable).with_name("atirc")
TOKEN = "cli-token-0123456789abcdef"


@pytest.fixture
async def hubs(tmp_path):
    """Hubs over one database file, closed after the test."""
    made = Hubs(tmp_path / "hub.db")
    yield made
    await made.aclose()


@pytest.fixture
async def clients():
    """WebSocketChannels closed after the test."""
    made = Clients()
    yield made
    await made.aclose()


def _env(url: str, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ATIRC_", "NOTIFY_", "WATCHDOG_"))
    }
    env.update(ATIRC_URL=url, ATIRC_NICK="cli", **extra)
    return env


async def _atirc(
    *args: str, env: dict[str, str], stdin: bytes | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(ATIRC),
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(WAIT * 2):
            out, err = await proc.communicate(stdin)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _respond(channel: WebSocketChannel, text: str) -> None:
    """The test responder: answer the first message from someone else in its thread."""
    async for message in channel:
        if message.sender != channel.nick:
            await channel.publish(message.channel, text, thread=message.thread, reply_to=message.id)
            return


async def test_pub_prints_the_id(hub_and_sub):
    """atirc pub prints the new message's id; the message arrives from the CLI's nick."""
    hub, sub = hub_and_sub
    code, out, err = await _atirc("pub", "#ops", "hello from the shell", env=_env(hub.url))
    assert code == 0, err
    [message] = await take(sub, 1)
    assert out.strip() == message.id
    assert is_id(message.id)
    assert (message.sender, message.text) == ("cli", "hello from the shell")


async def test_pub_reads_stdin_and_replies_in_a_thread(hub_and_sub):
    """TEXT '-' reads stdin; --thread publishes into an existing thread."""
    hub, sub = hub_and_sub
    root = "01JDN5X6Q7R8S9T0V1W2X3Y4Z5"
    code, _out, err = await _atirc(
        "pub", "#ops", "-", "--thread", root, env=_env(hub.url), stdin=b"from stdin\n"
    )
    assert code == 0, err
    [message] = await take(sub, 1)
    assert (message.thread, message.text) == (root, "from stdin\n")


@pytest.fixture
async def hub_and_sub(hubs, clients):
    """A small-frame hub and a subscriber of #ops."""
    hub = await hubs.start(max_frame=4096)
    sub = await clients.connect(hub.url, nick="watcher")
    await sub.subscribe("#ops")
    return hub, sub


async def test_pub_into_a_thread_of_another_channel_is_refused_clearly(hub_and_sub, clients):
    """Issue 26: ``--thread`` naming an #ops thread in a publish to #pub: the hub refuses
    it (bad_thread), and atirc says so in one line and exits 1; nothing is published."""
    hub, sub = hub_and_sub
    ops = await clients.connect(hub.url, nick="alice")
    root = await ops.publish("#ops", "a thread of #ops")
    code, out, err = await _atirc("pub", "#pub", "in?", "--thread", root.id, env=_env(hub.url))
    assert (code, out) == (1, "")
    assert err == (
        f"atirc: refused: thread {root.id} is not a thread of #pub; --thread must name a "
        "thread of #pub (its root message's id), or leave it out to start one\n"
    )
    assert [m.id for m in await take(sub, 1)] == [root.id]  # only alice's root in #ops


async def test_pub_wait_prints_the_reply(hub_and_sub, clients):
    """--wait prints the first reply in the thread, a split reply joined back together."""
    hub, _ = hub_and_sub
    responder = await clients.connect(hub.url, nick="asyncai")
    await responder.subscribe("#ops")
    reply = "\n".join(f"pod-{i} Running" for i in range(400))  # several frames' worth
    async with asyncio.TaskGroup() as tg:
        answering = tg.create_task(_respond(responder, reply))
        code, out, err = await _atirc("pub", "#ops", "list pods", "--wait", "5", env=_env(hub.url))
    assert answering.done()
    assert code == 0, err
    first, rest = out.split("\n", 1)
    assert is_id(first)
    assert rest == reply + "\n"


async def test_pub_wait_times_out_clearly(hub_and_sub):
    """No reply within --wait SECONDS: exit 3 and a message naming the thread."""
    hub, _ = hub_and_sub
    code, out, err = await _atirc("pub", "#ops", "anyone?", "--wait", "0.2", env=_env(hub.url))
    assert code == 3
    assert f"no reply in thread {out.strip()} within 0.2s" in err


async def test_unreachable_hub_is_a_clear_error():
    """Without a hub: exit 1 and a message naming the URL, at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{sock.getsockname()[1]}/"
        code, out, err = await _atirc("pub", "#ops", "hello", env=_env(url))
    assert code == 1
    assert out == ""
    assert f"atirc: cannot reach the hub at {url}" in err


@pytest.mark.parametrize("url", ["ws://[::1", "nats://[::1:4222"])
async def test_a_url_with_an_unclosed_bracket_is_one_line(url):
    """An IPv6 address missing its ']' in ATIRC_URL: the same one line as any other URL
    that cannot be used, not urllib's ValueError traceback from choosing the transport."""
    code, out, err = await _atirc("pub", "#ops", "hello", env=_env(url))
    assert (code, out) == (1, "")
    assert err == (
        f"atirc: invalid channel URL {url!r}: Invalid IPv6 URL (set ATIRC_NICK / ATIRC_URL)\n"
    )


async def test_bad_channel_is_a_usage_error(hub_and_sub):
    """A channel name without '#' is refused before connecting (argparse: exit 2)."""
    hub, _ = hub_and_sub
    code, _, err = await _atirc("pub", "ops", "hello", env=_env(hub.url))
    assert code == 2
    assert "invalid channel 'ops'" in err


async def test_sub_prints_messages_and_stops_on_sigterm(hub_and_sub, clients):
    """atirc sub --since --json prints one JSON frame per message; SIGTERM ends it with 0."""
    hub, _ = hub_and_sub
    pub = await clients.connect(hub.url, nick="pub")
    ids = [(await pub.publish("#ops", f"m{i}")).id for i in range(3)]
    proc = await asyncio.create_subprocess_exec(
        str(ATIRC),
        "sub",
        "#ops",
        "--since",
        ZERO_ID,
        "--json",
        env=_env(hub.url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(WAIT):
            lines = [await proc.stdout.readline() for _ in range(3)]
            live = await pub.publish("#ops", "live")
            lines.append(await proc.stdout.readline())
        frames = [parse_server_frame(line.decode()) for line in lines]
        assert [f.id for f in frames] == [*ids, live.id]  # type: ignore[union-attr]
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sub_whose_reader_went_away_exits_quietly(hub_and_sub, clients):
    """`atirc sub ... | head -1`: once the pipe's reader is gone, the next message ends
    sub with exit 0 and nothing on stderr (it used to print a BrokenPipeError traceback)."""
    hub, _ = hub_and_sub
    pub = await clients.connect(hub.url, nick="pub")
    await pub.publish("#ops", "first")
    read_end, write_end = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            str(ATIRC), "sub", "#ops", "--since", ZERO_ID,
            env=_env(hub.url), stdout=write_end, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as reader:
            line = await asyncio.wait_for(asyncio.to_thread(reader.readline), WAIT)
        assert b"first" in line  # like head -1: one line, then the reader is gone
        await pub.publish("#ops", "second")
        assert proc.stderr is not None
        async with asyncio.timeout(WAIT):
            err = await proc.stderr.read()
            assert await proc.wait() == 0
        assert err.decode() == ""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_hub_process_notifies_systemd_and_exits_cleanly_on_sigterm(tmp_path, clients):
    """atirc hub: READY=1 once listening, tokens from a file, SIGTERM → 1001 to clients, exit 0."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# token nick\n{TOKEN} alice\n")
    tokens.chmod(0o600)
    notify_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify_sock:
        notify_sock.bind(str(notify_path))
        notify_sock.setblocking(False)
        env = _env("ws://unused/", NOTIFY_SOCKET=str(notify_path))
        proc = await asyncio.create_subprocess_exec(
            str(ATIRC),
            "hub",
            "--listen",
            "127.0.0.1:0",
            "--db",
            str(tmp_path / "hub.db"),
            "--tokens",
            str(tokens),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        loop = asyncio.get_running_loop()
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(WAIT):
                ready = await loop.sock_recv(notify_sock, 4096)
                line = (await proc.stdout.readline()).decode()
            assert ready.startswith(b"READY=1")
            url = line.strip().rsplit(" ", 1)[-1]
            assert url.startswith("ws://127.0.0.1:")
            assert url in ready.decode()

            alice = await clients.connect(url, token=TOKEN)
            assert alice.nick == "alice"
            with pytest.raises(UnauthorizedError):
                await clients.connect(url, token="not-the-token-0123456789")
            raw = await RawClient.connect(
                url, nick=None, additional_headers={"Authorization": f"Bearer {TOKEN}"}
            )
            proc.send_signal(signal.SIGTERM)
            await raw.until_closed()
            assert (raw.ws.close_code, raw.ws.close_reason) == GOING_AWAY_CLOSE
            async with asyncio.timeout(WAIT):
                assert await proc.wait() == 0
                assert await loop.sock_recv(notify_sock, 4096) == b"STOPPING=1"
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_hub_refuses_a_bad_tokens_file(tmp_path):
    """A malformed tokens file stops atirc hub with exit 1 and the file's line."""
    tokens = tmp_path / "tokens"
    tokens.write_text("just-one-field\n")
    tokens.chmod(0o600)
    code, _, err = await _atirc(
        "hub", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "h.db"), "--tokens", str(tokens),
        env=_env("ws://unused/"),
    )  # fmt: skip
    assert code == 1
    assert f"{tokens}:1: expected 'TOKEN NICK'" in err


async def test_hub_refuses_a_tokens_file_others_can_read(tmp_path):
    """A tokens file with mode 0644 stops atirc hub before it listens: exit 1 and one
    line naming the file and the fix (chmod 600); no traceback (issue 15, item 17)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} alice\n")
    tokens.chmod(0o644)
    code, out, err = await _atirc(
        "hub", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "h.db"), "--tokens", str(tokens),
        env=_env("ws://unused/"),
    )  # fmt: skip
    assert code == 1
    assert out == ""  # never said it was listening
    assert err.splitlines() == [
        f"atirc: tokens file {tokens} is open to other users (mode 0644): run chmod 600 {tokens}"
    ]


async def test_hub_with_an_unusable_db_is_one_line_not_a_thread_traceback(tmp_path):
    """A --db that cannot be opened (a directory) exits 1 with one message, and no
    traceback from aiosqlite's worker thread reporting to a closed event loop."""
    (tmp_path / "dir.db").mkdir()
    code, _, err = await _atirc(
        "hub", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "dir.db"),
        env=_env("ws://unused/"),
    )  # fmt: skip
    assert code == 1
    assert "cannot open the hub's store" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--max-frame", "10", "max_frame"),
        ("--queue-size", "0", "queue_size"),
        ("--retention-count", "-1", "retention_count"),
        ("--rate", "0", "rate"),
    ],
)
async def test_hub_with_a_bad_limit_is_one_line(tmp_path, flag, value, needle):
    """A limit out of range stops atirc hub with exit 1 and one line naming it; it used
    to be a ValueError traceback, and --rate 0 even started a hub that failed every
    connection."""
    code, _, err = await _atirc(
        "hub", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "h.db"), flag, value,
        env=_env("ws://unused/"),
    )  # fmt: skip
    assert code == 1
    assert err.startswith("atirc: ")
    assert needle in err
    assert "Traceback" not in err


def test_a_non_utf8_argument_is_one_line_not_a_traceback() -> None:
    """Bytes that are not UTF-8 in a message text: exit 2 and one line, before any
    connection is tried (issue 15, item 12)."""
    import subprocess

    proc = subprocess.run(
        [os.fsencode(str(ATIRC)), b"pub", b"#ops", b"caf\xe9"],
        capture_output=True,
        timeout=30,
        env={**os.environ, "ATIRC_URL": "ws://127.0.0.1:9/"},
    )
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.splitlines() == [
        "atirc: an argument is not UTF-8 text: b'caf\\xe9'; pass text in UTF-8"
    ]
    assert "Traceback" not in err
