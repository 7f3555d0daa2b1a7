"""``asyncai ask``: the command as a user runs it, against the scripted model server.

Most tests call the command line's ``main`` in a worker thread (it runs its
own event loop, as the console script does) while the fake model serves from
the test's loop; the exit-status and no-traceback checks also run the real
``asyncai`` executable in a subprocess.
"""

from __future__ import annotations

import asyncio
import getpass
import io
import json
import os
import pty
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.approvals import PendingCall
from daemon.cli import main
from daemon.cli.approve import ReadLine, ask_at_terminal
from daemon.logging import reset_logging
from tests.fakes.fake_openai import Error, FakeOpenAI, Raw, Reply, ToolCalls

ASYNCAI = str(Path(sys.executable).parent / "asyncai")
KEY = "sk-ask-test-9876543210fedcba"
_OURS = ("OPENAI_", "ASYNCAI_", "ATIRC_")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A clean working directory and environment (no ./asyncai.toml, no OPENAI_*)."""
    for name in list(os.environ):
        if name.startswith(_OURS):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    reset_logging()


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``asyncai ask ARGV`` in a worker thread; (exit status, stdout, stderr)."""
    code = await asyncio.to_thread(main, ["ask", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def subprocess_ask(cwd: Path, *args: str) -> tuple[int, str, str]:
    """The real console script in ``cwd`` with a clean environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    proc = await asyncio.create_subprocess_exec(
        ASYNCAI,
        "ask",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(40):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


def free_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_ask_prints_the_reply(here: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    """The prompt reaches the model with the key from OPENAI_API_KEY; the reply is stdout."""
    async with FakeOpenAI(["Paris."], api_key=KEY) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("ASYNCAI_MODEL", "tiny")
        result = await run(capsys, "What is the capital of France?", "--tool-mode", "direct")
    assert result == (0, "Paris.\n", "")
    (body,) = fake.requests
    assert body["model"] == "tiny"
    assert body["messages"][-1] == {"role": "user", "content": "What is the capital of France?"}
    assert "tools" not in body  # direct mode without servers: nothing to offer


async def test_ask_without_a_model_says_how_to_set_one(here: Path, capsys):
    """Misconfigured: exit 2 and one line naming the key, the flag and the variable."""
    assert await run(capsys, "hi") == (
        2,
        "",
        "asyncai ask: no model configured: set 'model' in [model] of asyncai.toml, "
        "pass --model, or set ASYNCAI_MODEL\n",
    )


async def test_ask_with_a_typo_in_the_config_names_the_key(here: Path, capsys):
    """An unknown key in ./asyncai.toml stops ask before anything starts."""
    (here / "asyncai.toml").write_text("[model]\nmodel = 'm'\nretires = 2\n")
    assert await run(capsys, "hi") == (
        2,
        "",
        "asyncai ask: unknown key 'model.retires' in asyncai.toml "
        "(did you mean 'model.retries'?)\n",
    )


async def test_ask_with_an_unreachable_endpoint_fails_with_one_clear_line(tmp_path: Path):
    """The console script itself: connection refused is exit 1, the URL and reason, no traceback."""
    (tmp_path / "asyncai.toml").write_text("[model]\nretries = 0\n")
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, out, err = await subprocess_ask(
        tmp_path, "hi", "--model", "m", "--base-url", url, "--tool-mode", "direct"
    )
    assert (code, out) == (1, "")
    assert "Traceback" not in err
    *logs, last = err.splitlines()
    assert last.startswith(f"asyncai ask: the model endpoint {url} cannot be reached (")
    assert [json.loads(line)["event"] for line in logs] == ["model.run_failed"]


async def test_ask_with_a_refused_key_never_prints_the_key(
    here: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    """401: exit 1, told to set OPENAI_API_KEY; the key given appears nowhere."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    async with FakeOpenAI(api_key="the-right-key-000") as fake:
        code, out, err = await run(
            capsys, "hi", "--model", "m", "--base-url", fake.base_url, "--tool-mode", "direct"
        )
    assert code == 1
    assert "refused the API key (HTTP 401" in err
    assert "OPENAI_API_KEY" in err
    assert KEY not in out + err


async def test_ask_reports_a_server_error_after_retries(here: Path, capsys):
    """5xx after the configured retries: exit 1 with the status and the attempts."""
    (here / "asyncai.toml").write_text("[model]\nretries = 1\nbackoff_initial = 0.0\n")
    async with FakeOpenAI([Error(502, "bad gateway"), Error(502, "bad gateway")]) as fake:
        code, _, err = await run(
            capsys, "hi", "--model", "m", "--base-url", fake.base_url, "--tool-mode", "direct"
        )
    assert code == 1
    assert err.splitlines()[-1] == (
        f"asyncai ask: the model endpoint {fake.base_url} failed with HTTP 502: bad gateway "
        "(after 2 attempts)"
    )
    retry = json.loads(err.splitlines()[0])
    assert (retry["event"], retry["level"]) == ("model.request_retry", "warning")


async def test_ask_direct_mode_calls_a_real_stdio_server(here: Path, capsys):
    """--mcp-stdio starts the server; in direct mode its tools are the model's functions."""
    script = [ToolCalls(("get_current_time", {"timezone": "UTC"})), "It is some time in UTC."]
    async with FakeOpenAI(script) as fake:
        code, out, err = await run(
            capsys,
            "what time is it?",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
            "--mcp-stdio",
            "mcp-server-time --local-timezone UTC",
        )
    assert (code, out) == (0, "It is some time in UTC.\n"), err
    names = [t["function"]["name"] for t in fake.requests[0]["tools"]]
    assert "get_current_time" in names
    tool_message = fake.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"])["timezone"] == "UTC"


async def test_ask_fails_when_a_given_server_cannot_start(here: Path, capsys):
    """The user asked for the server: a command that is not there is one line and exit 1."""
    async with FakeOpenAI(["never asked"]) as fake:
        code, out, err = await run(
            capsys,
            "hi",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
            "--mcp-stdio",
            "no-such-mcp-server --flag",
        )
    assert (code, out) == (1, "")
    # the rest of the line is the MCP client's reason (here: command not found)
    assert err.splitlines()[-1].startswith(
        "asyncai ask: MCP server 'no-such-mcp-server' could not start: "
    )
    assert fake.requests == []


# ---- code mode end to end: the spec's Backend and CLI test ----

# the verbose events of spec 0004 (Logging, A9); other lifecycle events may come and go
SPEC_EVENTS = {
    "model.tool_call",
    "model.tool_result",
    "mcp.tool_call",
    "mcp.tool_result",
    "model.turn_summary",
}

RELEASES = {"releases": [{"version": f"3.{i}", "notes": "x" * 500} for i in range(8)]}
HTTP_GET_SNIPPET = (
    'r = await http_get(url="{url}")\njson.loads(r["body"])["releases"][-1]["version"]'
)


class StaticHttp:
    """A loopback HTTP server answering every GET with one JSON document; records the paths."""

    def __init__(self, document: dict):
        self.body = json.dumps(document).encode()
        self.paths: list[str] = []
        self.url = ""  # the document's URL, once started
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> StaticHttp:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/releases.json"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.paths.append(head.split(b" ")[1].decode())
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(self.body)}\r\nconnection: close\r\n\r\n".encode()
                + self.body
            )
            await writer.drain()
        finally:
            writer.close()


async def test_ask_runs_http_get_through_run_code(tmp_path: Path):
    """`asyncai ask --mcp-stdio asyncai-mcp-simple --verbose`: the model sees only run_code,
    its snippet awaits http_get against a loopback server, 4 KB stay in the sandbox, the
    reply is printed, and stderr carries the verbose events as NDJSON."""
    async with StaticHttp(RELEASES) as http:
        code = HTTP_GET_SNIPPET.format(url=http.url)
        script = [ToolCalls(("run_code", {"code": code})), "The latest release is 3.7."]
        async with FakeOpenAI(script) as fake:
            status, out, err = await subprocess_ask(
                tmp_path,
                "What is the latest release?",
                "--model",
                "m",
                "--base-url",
                fake.base_url,
                "--mcp-stdio",
                "asyncai-mcp-simple",
                "--verbose",
            )
    assert (status, out) == (0, "The latest release is 3.7.\n"), err
    assert http.paths == ["/releases.json"]
    first, second = fake.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["run_code"]
    assert "async def http_get(" in first["tools"][0]["function"]["description"]
    assert second["messages"][-1]["content"] == "3.7"
    events = [json.loads(line) for line in err.splitlines()]
    ours = [e for e in events if e["event"] in SPEC_EVENTS]
    assert [(e["event"], e.get("via"), e.get("tool")) for e in ours] == [
        ("model.tool_call", None, "run_code"),
        ("mcp.tool_call", "code_mode", "http_get"),
        ("mcp.tool_result", "code_mode", "http_get"),
        ("model.tool_result", None, "run_code"),
        ("model.turn_summary", None, None),
    ]
    assert ours[1]["arguments"] == {"url": http.url}
    assert ours[2]["content"]["status"] == 200  # structured content, decoded
    summary = ours[4]
    assert (summary["rounds"], summary["run_code_calls"], summary["nested_calls"]) == (2, 1, 1)
    assert summary["bytes_in"] > len(json.dumps(RELEASES)) > summary["bytes_out"] == 3


async def test_ask_returns_the_run_code_transcript(here: Path):
    """The records of that run: a run_code tool_use, its tool_result with the audit, the reply."""
    from daemon.cli.ask import ask
    from daemon.config import load_config

    async with StaticHttp(RELEASES) as http:
        code = HTTP_GET_SNIPPET.format(url=http.url)
        script = [ToolCalls(("run_code", {"code": code})), "3.7"]
        async with FakeOpenAI(script) as fake:
            overrides = {
                "model.model": "m",
                "model.base_url": fake.base_url,
                "mcp_stdio": ["asyncai-mcp-simple"],
            }
            result = await ask(load_config(None, overrides), "latest release?")
    assert result.status == "done", result.error
    assert [r.type for r in result.records] == ["user", "assistant", "user", "assistant"]
    (tool_use,) = result.records[1].message["content"]
    assert (tool_use["type"], tool_use["name"], tool_use["input"]) == (
        "tool_use",
        "run_code",
        {"code": code},
    )
    (tool_result,) = result.records[2].message["content"]
    assert tool_result == {
        "type": "tool_result",
        "tool_use_id": tool_use["id"],
        "content": "3.7",
        "is_error": False,
    }
    (nested,) = result.records[2].tool_use_result["nested_calls"]
    assert (nested["tool"], nested["arguments"], nested["mutating"]) == (
        "http_get",
        {"url": http.url},
        False,
    )
    assert result.reply == "3.7"


# ---- approvals: the terminal asks, no terminal refuses, --approve-all allows ----

TEST_SERVER = Path(__file__).parent / "fakes" / "mcp_test_server.py"


def files_server(here: Path) -> Path:
    """./asyncai.toml with the test MCP server as ``files``; the file its tools write to."""
    (here / "asyncai.toml").write_text(
        f'[mcp_servers.files]\ncommand = "{sys.executable}"\n'
        f'args = ["{TEST_SERVER}", "--label", "files"]\n'
    )
    return here / "effects.txt"


def written(target: Path) -> list[str]:
    """The lines the test server's tools wrote to ``target`` (none when it is not there)."""
    return target.read_text().splitlines() if target.exists() else []


NO_TERMINAL = (
    "files.append_line needs approval and asyncai ask has no terminal to ask on: pass "
    '--approve-all, or set [approvals] mode = "allow" or allow = ["files.append_line"] '
    "in asyncai.toml"
)


async def test_ask_without_a_terminal_refuses_a_call_it_would_ask_about(here: Path, capsys):
    """stdin is no terminal (pytest's): the mutating call is not made, the model reads a
    PermissionError naming --approve-all and the settings; no call returned data, so the
    reply names the refusal and its reason, never the model's invented answer."""
    target = files_server(here)
    invented = "Added the line; the file now holds 3 lines."
    script = [ToolCalls(("append_line", {"path": str(target), "line": "one"})), invented]
    async with FakeOpenAI(script) as fake:
        code, out, err = await run(
            capsys,
            "add a line",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
        )
    assert (code, out) == (0, _refused_reply("append_line", NO_TERMINAL)), err
    assert written(target) == []
    assert fake.requests[1]["messages"][-1]["content"] == f"PermissionError: {NO_TERMINAL}"


def _refused_reply(tool: str, why: str) -> str:
    """The reply of a run whose one call was refused (daemon.model.nodata), printed."""
    return (
        "I could not find this out: no tool call returned any data, so I cannot answer "
        f"from data and will not guess.\n- {tool} was refused: PermissionError: {why}\n"
    )


async def test_ask_without_a_terminal_refuses_inside_run_code(here: Path, capsys):
    """Code mode: the snippet's await raises the same PermissionError; nothing is written;
    the reply names the refused tool and why, not the model's invented answer."""
    target = files_server(here)
    snippet = f"await append_line(path={str(target)!r}, line='one')"
    invented = "Added the line; the file now holds 3 lines."
    script = [ToolCalls(("run_code", {"code": snippet})), invented]
    async with FakeOpenAI(script) as fake:
        code, out, err = await run(
            capsys, "add a line", "--model", "m", "--base-url", fake.base_url
        )
    assert (code, out) == (0, _refused_reply("append_line", NO_TERMINAL)), err
    assert written(target) == []
    result = fake.requests[1]["messages"][-1]["content"]
    assert f"PermissionError: {NO_TERMINAL}" in result


@pytest.mark.parametrize("mode", ["code", "direct"])
async def test_ask_with_the_harness_never_replies_with_data_no_call_returned(
    here: Path, capsys, mode: str
):
    """The small-model harness on ([model] harness = true), every call refused: the
    model's invented answer after the refusal is not the reply; the refused tool and
    its reason are, in code mode (the code-block protocol) and direct mode."""
    target = files_server(here)
    with (here / "asyncai.toml").open("a") as f:
        f.write("[model]\nharness = true\n")
    invented = "John Doe appended 1234 lines, version 1.2."
    first = (
        Reply(f"```python\nawait append_line(path={str(target)!r}, line='one')\n")
        if mode == "code"
        else ToolCalls(("append_line", {"path": str(target), "line": "one"}))
    )
    async with FakeOpenAI([first, invented]) as fake:
        code, out, err = await run(
            capsys, "add a line", "--model", "m", "--base-url", fake.base_url, "--tool-mode", mode
        )
    assert (code, out) == (0, _refused_reply("append_line", NO_TERMINAL)), err
    assert written(target) == []


async def test_ask_with_approve_all_makes_the_call_once(here: Path, capsys):
    """--approve-all: the call the policy would ask about is made, once, without a question."""
    target = files_server(here)
    script = [ToolCalls(("append_line", {"path": str(target), "line": "one"})), "Added."]
    async with FakeOpenAI(script) as fake:
        code, out, err = await run(
            capsys,
            "add a line",
            "--approve-all",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
        )
    assert (code, out) == (0, "Added.\n"), err
    assert written(target) == ["one"]
    assert fake.requests[1]["messages"][-1]["content"] == "appended one"
    assert "approve " not in err


async def test_approve_all_still_refuses_a_deny_glob(here: Path, capsys):
    """A deny glob in [approvals] wins over --approve-all: the call is refused as configured."""
    target = files_server(here)
    with (here / "asyncai.toml").open("a") as f:
        f.write('[approvals]\ndeny = ["files.append_*"]\n')
    script = [ToolCalls(("append_line", {"path": str(target), "line": "one"})), "Refused."]
    async with FakeOpenAI(script) as fake:
        code, out, err = await run(
            capsys,
            "add a line",
            "--approve-all",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
        )
    deny = "files.append_line is refused by [approvals] deny = 'files.append_*'"
    assert (code, out) == (0, _refused_reply("append_line", deny)), err
    assert written(target) == []
    assert fake.requests[1]["messages"][-1]["content"] == (
        "PermissionError: files.append_line is refused by [approvals] deny = 'files.append_*'"
    )


async def pty_ask(cwd: Path, answer: str, *args: str) -> tuple[int, str, str]:
    """The console script with stdin on a pseudo-terminal: waits for the question on
    stderr, types ``answer`` and Enter; (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    controller, terminal = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            ASYNCAI,
            "ask",
            *args,
            cwd=cwd,
            env=env,
            stdin=terminal,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        os.close(terminal)
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            async with asyncio.timeout(40):
                err = b""
                while b"? [y/N] " not in err:
                    chunk = await proc.stderr.read(4096)
                    assert chunk, f"no question before the end of stderr: {err.decode()}"
                    err += chunk
                os.write(controller, answer.encode() + b"\n")
                out, rest = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
                await proc.wait()
        except BaseException:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
    finally:
        os.close(controller)
    return proc.returncode or 0, out.decode(), (err + rest).decode()


@pytest.mark.parametrize(
    ("answer", "lines", "result"),
    [
        ("y", ["one"], "appended one"),
        ("n", [], "PermissionError: denied by {user}: denied at the terminal"),
    ],
)
async def test_ask_at_a_terminal_puts_the_call_to_the_person(
    tmp_path: Path, answer: str, lines: list[str], result: str
):
    """stdin is a terminal: the question names the call on stderr; "y" makes it once,
    "n" refuses it with the user's name; the model's answer is the reply when the call was
    made, the refusal and its reason when it was not."""
    target = files_server(tmp_path)
    script = [ToolCalls(("append_line", {"path": str(target), "line": "one"})), "Done."]
    async with FakeOpenAI(script) as fake:
        code, out, err = await pty_ask(
            tmp_path,
            answer,
            "add a line",
            "--model",
            "m",
            "--base-url",
            fake.base_url,
            "--tool-mode",
            "direct",
        )
    user = getpass.getuser()
    refused = result.format(user=user).removeprefix("PermissionError: ")
    reply = "Done.\n" if lines else _refused_reply("append_line", refused)
    assert (code, out) == (0, reply), err
    question = f'approve files.append_line({{"path": "{target}", "line": "one"}})? [y/N] '
    assert question in err
    assert written(target) == lines
    user = getpass.getuser()
    assert fake.requests[1]["messages"][-1]["content"] == result.format(user=user)


async def test_ask_at_a_terminal_resumes_a_paused_snippet(tmp_path: Path):
    """Code mode: the snippet pauses at its await, "yes" makes the call once and the
    snippet goes on from there with the result."""
    target = files_server(tmp_path)
    snippet = f"r = await append_line(path={str(target)!r}, line='one')\nr + '!'"
    script = [ToolCalls(("run_code", {"code": snippet})), "Done."]
    async with FakeOpenAI(script) as fake:
        code, out, err = await pty_ask(
            tmp_path, "yes", "add a line", "--model", "m", "--base-url", fake.base_url
        )
    assert (code, out) == (0, "Done.\n"), err
    assert written(target) == ["one"]
    assert fake.requests[1]["messages"][-1]["content"] == "appended one!"


def pending(call_id: int, line: str) -> PendingCall:
    """A pending ``files.append_line`` call."""
    return PendingCall(call_id, "append_line", "files", {"path": "/tmp/x", "line": line}, "why")


def typed(*lines: str) -> ReadLine:
    """The lines a person types, then end of input."""
    queue = list(lines)

    async def read_line() -> str:
        return queue.pop(0) if queue else ""

    return read_line


async def test_ask_at_terminal_asks_each_call_and_end_of_input_denies():
    """One question per call, in order; "Yes" approves, end of input (Ctrl-D) denies."""
    out = io.StringIO()
    decisions = await ask_at_terminal(
        [pending(3, "a"), pending(5, "b")],
        by="ann",
        expire_after=10,
        read_line=typed("Yes\n"),
        out=out,
    )
    assert out.getvalue() == (
        'approve files.append_line({"path": "/tmp/x", "line": "a"})? [y/N] '
        'approve files.append_line({"path": "/tmp/x", "line": "b"})? [y/N] '
    )
    assert {i: (d.approved, d.by, d.reason, d.kind) for i, d in decisions.items()} == {
        3: (True, "ann", "", "approved"),
        5: (False, "ann", "denied at the terminal", "denied"),
    }


async def test_ask_at_terminal_expires_unanswered_calls():
    """Nobody answers within expire_after: the unanswered calls count as expired."""

    async def never() -> str:
        await asyncio.Event().wait()
        return ""

    out = io.StringIO()
    decisions = await ask_at_terminal(
        [pending(1, "a")], by="ann", expire_after=0.01, read_line=never, out=out
    )
    (decision,) = decisions.values()
    assert (decision.approved, decision.by, decision.kind) == (False, "expiry", "expired")
    assert decision.reason == "not answered within 0.01 s"
    assert out.getvalue().endswith("? [y/N] \n")


def _completion(message: object) -> str:
    """A chat completion body with ``message`` as its one choice's message."""
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})


_CALL = {"id": "c1", "type": "function", "function": {"name": "run_code", "arguments": {}}}
MALFORMED = {
    "not JSON": (Raw("<html>502 Bad Gateway</html>"), "the body is not JSON ("),
    "truncated": (Raw(_completion({"role": "assistant", "content": "Paris"})[:50]), "not JSON ("),
    "message null": (Raw(_completion(None)), "choices[0].message is null, not an object"),
    "content 42": (
        Raw(_completion({"role": "assistant", "content": 42})),
        "choices[0].message.content is a number (42), not text",
    ),
    "arguments as an object": (
        Raw(_completion({"role": "assistant", "content": None, "tool_calls": [_CALL]})),
        "choices[0].message.tool_calls[0].function.arguments is an object, not text",
    ),
    "a lone surrogate": (
        Raw(_completion({"role": "assistant", "content": "Par\ud800is"})),  # json escapes it
        "choices[0].message.content holds a lone surrogate ('\\ud800' at 3), which is not Unicode",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_model_response_is_one_line_and_exit_1(here: Path, capsys, case: str):
    """Each malformed body the model endpoint may send ends the run as failed: exit 1 and
    one line saying what is wrong with it; each used to escape the backend as an exception
    (JSONDecodeError, AttributeError, TypeError) or, for the surrogate, crash the print."""
    step, problem = MALFORMED[case]
    async with FakeOpenAI([step]) as fake:
        code, out, err = await run(
            capsys, "capital?", "--model", "m", "--base-url", fake.base_url, "--tool-mode", "direct"
        )
    assert (code, out) == (1, "")
    last = err.splitlines()[-1]
    assert last.startswith(
        f"asyncai ask: the model endpoint {fake.base_url} sent a malformed response: "
    )
    assert problem in last
    assert len(fake.requests) == 1  # not retried: the server would send it again


async def test_a_non_utf8_prompt_is_one_line_not_a_traceback(tmp_path: Path):
    """`asyncai ask` with bytes that are not UTF-8 as its prompt: exit 2 and one line
    showing them, before any model is asked; it used to end in a UnicodeEncodeError
    traceback while the request was encoded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    async with FakeOpenAI(["never asked"]) as fake:
        env |= {"OPENAI_BASE_URL": fake.base_url, "ASYNCAI_MODEL": "m"}
        proc = await asyncio.create_subprocess_exec(
            ASYNCAI,
            b"ask",
            b"caf\xe9?",  # Latin-1
            b"--tool-mode",
            b"direct",
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(40):
            out, err = await proc.communicate()
    assert (proc.returncode, out) == (2, b"")
    assert err == b"asyncai: an argument is not UTF-8 text: b'caf\\xe9?'; pass text in UTF-8\n"
    assert fake.requests == []
