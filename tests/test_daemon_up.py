"""`asyncai up`: the one-machine default, run as the README runs it (a process).

The model is the scripted server in this process; the hub, the daemon, the
bundled asyncai-mcp-simple server and the Monty workers are the real ones
that `asyncai up` starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path

import httpx2
import pytest

from channels.client import WebSocketChannel
from daemon.cli import main
from daemon.cli.up import _unless_stopped
from daemon.errors import ConfigError
from sessions.store import Store
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import WAIT
from tests.test_web_auth import log_in

pytestmark = pytest.mark.slow


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a fresh shell: no model settings, an empty model cache."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ATIRC_", "ASYNCAI_", "NOTIFY_", "WATCHDOG_"))
    }
    env["XDG_CACHE_HOME"] = str(tmp / "cache")  # no fetched local model here
    env.update(extra)
    return env


async def asyncai(tmp: Path, *args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """`asyncai ARGS` started in ``tmp`` (its own session, so it is killed with its children)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon.cli",
        *args,
        cwd=tmp,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


async def test_up_without_a_model_endpoint_says_what_to_set(tmp_path):
    """No OPENAI_BASE_URL and no local model: the exact settings, and exit status 1."""
    proc = await asyncai(tmp_path, "up", "--listen", "127.0.0.1:0", env=clean_env(tmp_path))
    async with asyncio.timeout(WAIT):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    text = err.decode()
    assert "export OPENAI_BASE_URL=" in text
    assert "asyncai model fetch" in text
    assert "pip install -e '.[local]'" in text
    assert out == b""


@pytest.mark.parametrize("flag", ["--listen", "--web-listen"])
def test_a_port_out_of_range_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys, flag):
    """--listen 127.0.0.1:99999 passed the flag's check, and after the model had loaded
    (minutes, for the local one) the hub's bind ended `asyncai up` in an OverflowError
    traceback. It is a usage error now: exit 2, nothing started, nothing made."""
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_BASE_URL", "ASYNCAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no local model to load
    assert main(["up", flag, "127.0.0.1:99999"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"asyncai up: {flag} must be HOST:PORT with a port of 0 to 65535, not '127.0.0.1:99999'\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("state_dir", ["a-file", "a-file/state"])
def test_a_state_dir_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys, state_dir):
    """--state-dir naming a file (or a path under one): exit 1 and one line, where the
    directory's mkdir used to end `asyncai up` in a FileExistsError/NotADirectoryError
    traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    assert main(["up", "--state-dir", state_dir]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"asyncai up: cannot make the state directory {state_dir}: ")
    assert len(err.splitlines()) == 1


@contextlib.asynccontextmanager
async def web_server(body: dict):
    """A loopback HTTP server answering every GET with ``body`` as JSON."""
    payload = json.dumps(body).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/inventory.json"
    finally:
        server.close()
        await server.wait_closed()


async def test_up_answers_on_asyncai_with_http_get_and_stops_on_ctrl_c(tmp_path):
    """`asyncai up` prints how to talk to it; a prompt on #asyncai is answered through
    run_code calling the bundled http_get; the audit has the call; Ctrl-C exits 0."""
    inventory = {"hosts": [{"name": "web1", "up": True}, {"name": "db1", "up": False}]}
    async with web_server(inventory) as url, FakeOpenAI() as fake:
        code = (
            f"r = await http_get(url={url!r})\n"
            "[h['name'] for h in json.loads(r['body'])['hosts'] if not h['up']]"
        )
        fake.add(ToolCalls(("run_code", {"code": code})), Reply("db1 is down."))
        env = clean_env(tmp_path, OPENAI_BASE_URL=fake.base_url, ASYNCAI_MODEL="fake-model")
        proc = await asyncai(
            tmp_path, "up", "--listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0", env=env
        )
        try:
            lines: list[str] = []
            async with asyncio.timeout(WAIT * 2):
                while not lines or lines[-1] != "Ctrl-C stops it.":
                    line = await proc.stdout.readline()
                    if not line:
                        raise AssertionError((await proc.stderr.read()).decode()[-3000:])
                    lines.append(line.decode().rstrip("\n"))
            printed = "\n".join(lines)
            assert "atirc pub '#asyncai'" in printed
            assert "--wait" in printed
            hub_url = re.search(r"hub +(ws://\S+)", printed).group(1)
            assert f"ATIRC_URL={hub_url}" in printed  # not the default port: atirc must be told
            # the console's line: its login URL with the token up wrote for 'operator'
            login = r"console +(http://\S+/)login#token=(\S+) +\(nick operator"
            console = re.search(login, printed)
            assert console is not None, printed
            tokens = tmp_path / ".asyncai" / "web.tokens"
            assert os.stat(tokens).st_mode & 0o777 == 0o600
            assert f"{console.group(2)} operator" in tokens.read_text()

            async with WebSocketChannel(hub_url, nick="alice") as alice:
                await alice.subscribe("#asyncai")
                ack = await alice.publish("#asyncai", "Which hosts are down?")
                async with asyncio.timeout(WAIT):
                    async for message in alice:
                        if message.thread == ack.thread and message.sender == "asyncai":
                            break
            assert message.text == "db1 is down."
            tool_result = fake.requests[1]["messages"][-1]
            assert json.loads(tool_result["content"]) == ["db1"]
            # a newcomer logs in with the printed token and sees the thread
            async with httpx2.AsyncClient(base_url=console.group(1)) as browser:
                assert (await log_in(browser, console.group(2))).status_code == 303
                threads = await browser.get("/")
                assert threads.status_code == 200
                assert "#asyncai" in threads.text

            os.killpg(proc.pid, signal.SIGINT)
            async with asyncio.timeout(WAIT):
                assert await proc.wait() == 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async with Store(tmp_path / ".asyncai" / "asyncai.db", create=False) as store:
        [row] = await store.audit.entries(thread=ack.thread)
        assert (row.tool, row.arguments, row.mutating) == ("http_get", {"url": url}, False)
        [prompt] = await store.queries.get_prompts([ack.id])
        assert prompt.status == "done"


async def test_a_stop_while_the_model_loads_waits_for_its_cleanup_and_is_none():
    """Ctrl-C while a slow start (the local model loading) runs: the start is cancelled,
    its cleanup runs to the end, and the answer is None; ``task.result()`` on the
    cancelled but unfinished task used to raise ``InvalidStateError``."""
    stop = asyncio.Event()
    loading, cleaned = asyncio.Event(), asyncio.Event()

    async def load_model() -> str:
        loading.set()
        try:
            await asyncio.Event().wait()  # minutes, for a real model
        finally:
            for _ in range(5):  # stopping the child process takes a few loop turns
                await asyncio.sleep(0)
            cleaned.set()
        return "never"

    waiter = asyncio.create_task(_unless_stopped(load_model(), stop))
    await loading.wait()
    stop.set()
    async with asyncio.timeout(WAIT):
        assert await waiter is None
    assert cleaned.is_set()


async def test_unless_stopped_gives_the_result_or_the_error_of_the_work():
    """Not stopped: the work's value, or its own error (a ConfigError to print)."""

    async def fails() -> str:
        raise ConfigError("no model")

    async def works() -> str:
        return "endpoint"

    assert await _unless_stopped(works(), asyncio.Event()) == "endpoint"
    with pytest.raises(ConfigError, match="no model"):
        await _unless_stopped(fails(), asyncio.Event())


async def test_unless_stopped_cancelled_itself_cancels_the_work_first():
    """Cancelling the caller (shutdown) cancels the work, waits for it, then propagates."""
    loading, cleaned = asyncio.Event(), asyncio.Event()

    async def load_model() -> None:
        loading.set()
        try:
            await asyncio.Event().wait()
        finally:
            for _ in range(5):
                await asyncio.sleep(0)
            cleaned.set()

    waiter = asyncio.create_task(_unless_stopped(load_model(), asyncio.Event()))
    await loading.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert cleaned.is_set()
