"""What the daemon stored from hostile input, read back through the CLI, from outside:
a real hub on 127.0.0.1, the daemon with its real store and test MCP server, the
scripted model. Prompts, model replies, tool-call ids, tool arguments and results carry
newlines, carriage returns, ANSI sequences, C1 controls, DEL, NUL and bidi overrides;
`asyncai threads/audit/transcript` must print them so a terminal shows them and never
acts on them, with no line that looks like another turn or row, and the JSON forms
must load back to exactly what was said."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from channels.hub import Hub
from daemon.app import Daemon
from daemon.cli import main
from daemon.config import load_config
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import Person, settled, write_config

# what a terminal acts on: C0 but tab (newline is the lines' own separator), DEL, C1,
# the line and paragraph separators, the bidi marks, embeddings, overrides, isolates
UNSAFE = re.compile(
    r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
EVIL = "a\x1b[31mRED\x1b[0m\rCR\x07bell\x9b2J\u202eRLO\u2028LS\x7fDEL\x00NUL\x1b]0;title\x07"
FORGED = "[2026-01-01 00:00:00] user:"
PROMPT = f"prompt {EVIL}\n{FORGED}\n    forged"
CODE = f"await echo(text={EVIL!r})"
TOOL_ID = f"call_1\n{FORGED}\n    forged\x1b[2K"
ANSWER = f"answer {EVIL}"


async def _converse(tmp_path: Path) -> str:
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Person(hub.url)
        try:
            await alice.start()
            fake.add(ToolCalls(("run_code", {"code": CODE}), ids=[TOOL_ID]), Reply(ANSWER))
            mid, reply = await alice.ask(PROMPT)
            await settled(daemon, mid)
            assert not fake.script
            return reply.thread
        finally:
            await alice.close()
            await daemon.aclose()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The database of one hostile conversation, and its thread id."""
    tmp = tmp_path_factory.mktemp("hostile_sessions")
    thread = asyncio.run(_converse(tmp))
    return tmp / "asyncai.db", thread


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The lines `asyncai ARGV` prints (run in-process), the daemon's log before it left out."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.split("\n")


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["threads", "--json"],
        ["audit"],
        ["audit", "--json"],
        ["transcript", "{thread}"],
        ["transcript", "{thread}", "--jsonl"],
    ],
)
def test_no_stored_text_reaches_the_terminal_as_a_control(capsys, hostile, command):
    """Every line printed is free of what a terminal acts on (ESC, CSI, CR, BEL, DEL,
    NUL, bidi overrides, a line separator): they used to be printed raw, so a prompt or a
    tool's result could recolour, clear or retitle the terminal of whoever read it."""
    db, thread = hostile
    argv = [part.format(thread=thread) for part in command]
    lines = cli(capsys, argv[0], "--db", str(db), *argv[1:])
    assert lines[-1] == ""
    for line in lines[:-1]:
        assert not UNSAFE.search(line), repr(line)


def test_a_stored_text_cannot_forge_a_turn(capsys, hostile):
    """A model's tool-call id carrying a newline and a turn's header used to print as a
    line of its own, indistinguishable from a real turn; the text of a prompt is
    indented under its own header."""
    db, thread = hostile
    lines = cli(capsys, "transcript", "--db", str(db), thread)
    headers = [line for line in lines if line.startswith("[")]
    assert all(FORGED not in line or line.index(FORGED) > 0 for line in headers), headers
    assert not any(line.startswith(FORGED) for line in lines)
    assert sum("assistant → run_code" in line for line in headers) == 1
    assert sum(line.endswith(" user:") for line in headers) == 1  # the prompt's alone


def test_the_jsonl_and_json_lines_load_back_to_what_was_said(capsys, hostile):
    """Escaping for the terminal keeps the JSON value: the export is what was said."""
    db, thread = hostile
    records = [
        json.loads(x) for x in cli(capsys, "transcript", "--db", str(db), thread, "--jsonl")[:-1]
    ]
    prompt, call, result, answer = records
    assert prompt["message"]["content"] == [{"type": "text", "text": PROMPT}]
    [use] = call["message"]["content"]
    assert (use["id"], use["input"]) == (TOOL_ID, {"code": CODE})
    [back] = result["message"]["content"]
    assert (back["tool_use_id"], back["content"]) == (TOOL_ID, EVIL)
    assert result["toolUseResult"]["nested_calls"][0]["arguments"] == {"text": EVIL}
    assert answer["message"]["content"] == [{"type": "text", "text": ANSWER}]
    [row] = [json.loads(x) for x in cli(capsys, "audit", "--db", str(db), "--json")[:-1]]
    assert row["arguments"] == {"text": EVIL}


async def _cut_by_the_deadline(tmp_path: Path) -> str:
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml",
            hub_url=hub.url,
            model_url=fake.base_url,
            runtime="max_run_seconds = 1.0",
        )
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Person(hub.url)
        try:
            await alice.start()
            code = "await echo(text='x')\nawait nap(seconds=3)"
            fake.add(ToolCalls(("run_code", {"code": code})))
            mid, reply = await alice.ask("slow")
            assert "max_run_seconds" in reply.text
            await settled(daemon, mid)
            return reply.thread
        finally:
            await alice.close()
            await daemon.aclose()


def test_a_run_cut_mid_call_exports_every_tool_use_with_its_result(capsys, tmp_path):
    """A run cut off by its deadline in the middle of a run_code call was stored with the
    call's tool_use and no tool_result: the JSONL export then had a tool_use that nothing
    answered, which Claude Code's readers refuse. Its result is now an error saying why."""
    thread = asyncio.run(_cut_by_the_deadline(tmp_path))
    db = str(tmp_path / "asyncai.db")
    lines = cli(capsys, "transcript", "--db", db, thread, "--jsonl")[:-1]
    records = [json.loads(line) for line in lines]
    assert [r["type"] for r in records] == ["user", "assistant", "user"]
    [use] = records[1]["message"]["content"]
    [result] = records[2]["message"]["content"]
    assert (result["type"], result["tool_use_id"], result["is_error"]) == (
        "tool_result",
        use["id"],
        True,
    )
    assert "max_run_seconds" in result["content"]
    assert records[2]["parentUuid"] == records[1]["uuid"]
