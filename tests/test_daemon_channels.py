"""One daemon, several rooms (issue 29), end to end in this process: a real hub, store,
MCP servers over stdio (the real ``kcp`` against the fake kubectl, the real ``simple``,
the test server), Monty pools and backends; only the models are scripted, two of them.

- ``#help`` sees ``simple`` and three tools of ``test``: no call form of the
  indirect-call corpus (tests/test_code_mode_indirect.py) reaches a ``kcp``
  tool from there; kubectl is never run and the audit has no such call;
- ``#direct`` calls its tools directly: the model's tool list holds only its
  tools, and a ``kcp`` tool named anyway is refused;
- ``#team``'s runs go to the ``[models.big]`` endpoint, the others' to ``[model]``;
- ``!tools`` lists exactly the channel's tools and its approvals mode;
- a channel's limits count its own runs and tokens;
- ``#ops``' ``max_concurrent_runs = 1`` holds while ``#help`` still runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from channels.client import Message, WebSocketChannel
from channels.hub import Hub
from daemon.app import Daemon
from daemon.config import load_config
from daemon.runtime.commands import RESET_DONE, RESET_NONE
from tests.fakes.fake_openai import FakeOpenAI, Hold, Reply, ToolCalls
from tests.test_code_mode_indirect import FORMS, Form
from tests.test_daemon import TEST_SERVER, WAIT
from tests.test_daemon_approvals import settled

FAKES = Path(__file__).parent / "fakes"
CHANNELS = ["#ops", "#help", "#team", "#direct"]
HELP_TOOLS = ["simple.http_get", "test.echo", "test.nap"]  # in the order the servers list them


def write_config(tmp: Path, *, hub_url: str, model_url: str, big_url: str) -> Path:
    """The three channels of the issue's worked example, and ``#direct``."""
    kcps = tmp / "kcps"
    kcps.mkdir()
    path = os.pathsep.join([str(FAKES), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    config = tmp / "asyncai.toml"
    config.write_text(f"""
[model]
base_url = "{model_url}"
model = "fake-model"
api_key = "test-key"
retries = 0

[models.big]
base_url = "{big_url}"
model = "big-model"
api_key = "big-key"
retries = 0

[channels]
url = "{hub_url}"
nick = "asyncai"
channels = {json.dumps(CHANNELS)}

[runtime]
shutdown_grace = 2.0

[sessions]
db = "asyncai.db"

[mcp_servers.kcp]
command = "{sys.executable}"
args = ["-m", "servers.kcp"]
env = {{ PATH = "{path}", ASYNCAI_KCP_DIR = "{kcps}", FAKE_KUBECTL_LOG = "{tmp / "kubectl.log"}" }}

[mcp_servers.simple]
command = "{sys.executable}"
args = ["-m", "servers.simple", "--deny-private"]

[mcp_servers.test]
command = "{sys.executable}"
args = ["{TEST_SERVER}", "--label", "daemon"]

[mcp_servers.broken]
command = "{tmp / "no-such-server"}"

[channel."#help"]
servers = ["simple", "test", "broken"]
tools_allow = ["simple.*", "test.echo", "test.nap", "test.erase"]
tools_deny = ["*.erase"]

[channel."#help".approvals]
mode = "deny"

[channel."#ops"]
servers = ["kcp", "simple"]
max_concurrent_runs = 1

[channel."#team"]
endpoint = "big"
system_prompt = "You answer the team."
max_runs_per_sender_per_hour = 2

[channel."#direct"]
servers = ["simple", "test"]
tools_allow = ["simple.*", "test.echo"]
tool_mode = "direct"
max_tokens_per_sender_per_day = 20
""")
    return config


class Member:
    """Someone on the hub in every channel: publishes prompts, reads the daemon's replies."""

    def __init__(self, url: str, nick: str):
        self.client = WebSocketChannel(url, nick=nick)
        self.replies: dict[str, list[Message]] = {}  # thread → the daemon's messages
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and follow every channel."""
        await self.client.connect()
        for channel in CHANNELS:
            await self.client.subscribe(channel)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.client:
            if message.sender == "asyncai":
                self.replies.setdefault(message.thread, []).append(message)
                self._arrived.set()

    async def say(self, channel: str, text: str, thread: str | None = None) -> str:
        """Publish; the thread of the new message."""
        ack = await self.client.publish(channel, text, thread=thread)
        return ack.thread

    async def reply_in(self, thread: str, count: int = 1) -> list[Message]:
        """The first ``count`` replies of the daemon in ``thread`` (waits, bounded)."""
        async with asyncio.timeout(WAIT):
            while len(self.replies.get(thread, [])) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.replies[thread][:count]

    async def ask(self, channel: str, text: str, thread: str | None = None) -> tuple[str, str]:
        """Publish and wait for the next reply in the thread: ``(thread, reply text)``."""
        before = len(self.replies.get(thread or "", []))
        tid = await self.say(channel, text, thread)
        replies = await self.reply_in(tid, before + 1)
        return tid, replies[before].text

    async def close(self) -> None:
        """Disconnect."""
        await self.client.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


@pytest.fixture(scope="module")
async def world(tmp_path_factory):
    """Hub, the two scripted endpoints, one daemon, and alice."""
    tmp = tmp_path_factory.mktemp("channels")
    async with (
        Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub,
        FakeOpenAI() as model,
        FakeOpenAI(model="big-model") as big,
    ):
        path = write_config(tmp, hub_url=hub.url, model_url=model.base_url, big_url=big.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Member(hub.url, "alice")
        try:
            await alice.start()
            yield daemon, model, big, alice, tmp
        finally:
            await alice.close()
            await daemon.aclose()


def kubectl_calls(tmp: Path) -> list[str]:
    """Every kubectl run so far (the fake kubectl logs each)."""
    log = tmp / "kubectl.log"
    return log.read_text().splitlines() if log.exists() else []


def at_kcp(code: str) -> str:
    """A corpus form turned on kcp's ``delete_object`` (and test's ``echo`` beside it)."""
    return (
        code.replace("append_line", "delete_object")
        .replace('"append_" + "line"', '"delete_" + "object"')
        .replace("append line", "delete object")
        .replace("read_lines", "echo")
    )


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
async def test_help_cannot_reach_a_kcp_tool_by_any_call_form(world, form: Form):
    """Each form of the indirect-call corpus, aimed at kcp's delete_object from #help:
    the snippet fails, kubectl never runs, and the audit holds no call of a kcp tool."""
    daemon, model, _, alice, tmp = world
    runs = [at_kcp(code) for code in form.runs]
    model.add(*(ToolCalls(("run_code", {"code": code})) for code in runs), Reply("done"))
    thread, _ = await alice.ask("#help", f"try {form.name}")
    result = model.requests[-1]["messages"][-1]
    assert result["role"] == "tool"
    assert "deleted" not in result["content"]
    assert any(
        word in result["content"] for word in ("NameError", "KeyError", "IndexError", "_asyncai_")
    ), result["content"]
    assert kubectl_calls(tmp) == []
    await settled(daemon, thread)
    rows = await daemon.store.audit.entries(thread=thread)
    assert [row.tool for row in rows if row.tool not in ("echo", "http_get", "nap")] == []


async def test_the_catalog_of_help_shows_only_its_tools(world):
    """run_code's description in a #help request names #help's tools, no kcp tool, and not
    the tools its globs leave out."""
    _, model, _, alice, _ = world
    model.add(Reply("hello"))
    await alice.ask("#help", "hello")
    (tool,) = model.requests[-1]["tools"]
    description = tool["function"]["description"]
    for name in ("http_get", "echo", "nap"):
        assert name in description
    for name in ("delete_object", "list_kcps", "erase", "append_line", "whoami"):
        assert name not in description


async def test_direct_mode_offers_only_the_channels_tools_and_refuses_the_rest(world):
    """#direct's requests list exactly its tools; a kcp tool the model names anyway is
    refused as no tool, and kubectl never runs."""
    _, model, _, alice, tmp = world
    model.add(
        ToolCalls(("delete_object", {"kind": "pod", "name": "x", "namespace": "default"})),
        Reply("could not"),
    )
    await alice.ask("#direct", "delete the pod x")
    first = model.requests[-2]
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["echo", "http_get"]
    result = model.requests[-1]["messages"][-1]["content"]
    assert "there is no tool named 'delete_object'" in result
    assert kubectl_calls(tmp) == []


async def test_team_runs_go_to_the_big_endpoint(world):
    """#team's run asks [models.big] with its model name and key, under #team's system
    prompt; #help's asks [model] under the built-in one."""
    _, model, big, alice, _ = world
    before = len(model.requests)
    big.add(Reply("from the big model"))
    _, reply = await alice.ask("#team", "hello big")
    assert reply == "from the big model"
    assert big.requests[-1]["model"] == "big-model"
    assert big.headers[-1]["authorization"] == "Bearer big-key"
    assert big.requests[-1]["messages"][0] == {"role": "system", "content": "You answer the team."}
    assert len(model.requests) == before
    model.add(Reply("from the default model"))
    _, reply = await alice.ask("#help", "hello small")
    assert reply == "from the default model"
    assert model.requests[-1]["model"] == "fake-model"
    assert "You answer the team." not in model.requests[-1]["messages"][0]["content"]


async def test_tools_lists_exactly_the_channels_tools_and_its_approvals_mode(world):
    """!tools in #help: its three tools as server.tool with a summary each, mode deny, and
    its server that did not start; in #ops: every kcp and simple tool and no test tool,
    mode ask, and no word of the broken server it does not use. No model is asked."""
    _, model, big, alice, _ = world
    asked = len(model.requests), len(big.requests)
    _, text = await alice.ask("#help", "!tools")
    first, *lines, last = text.splitlines()
    assert first.startswith("Tools in #help (3); approvals: deny")
    assert [line.split(":")[0] for line in lines] == [f"- {name}" for name in HELP_TOOLS]
    assert all(len(line.split(": ", 1)[1]) > 0 for line in lines)
    assert last.startswith("Not started (retried in the background")
    assert last.endswith(": broken.")
    _, text = await alice.ask("#ops", "!tools")
    first, *lines = text.splitlines()
    assert "approvals: ask" in first
    servers = {line[2:].split(".")[0] for line in lines}
    assert servers == {"kcp", "simple"}
    assert "- kcp.delete_object: " in text
    assert "- simple.http_get: " in text
    assert "broken" not in text
    assert (len(model.requests), len(big.requests)) == asked


async def test_limits_count_per_channel(world):
    """carol's runs in #team count against #team's run limit only, and her tokens there
    do not count against #direct's token limit; each refusal names its channel's section."""
    daemon, model, big, _, _ = world
    carol = Member(daemon.config.channels.url, "carol")
    await carol.start()
    try:
        big.add(Reply("one"), Reply("two"))
        assert (await carol.ask("#team", "first"))[1] == "one"
        assert (await carol.ask("#team", "second"))[1] == "two"
        _, refused = await carol.ask("#team", "third")
        assert refused.startswith(
            'Not run: carol reached [channel."#team"] max_runs_per_sender_per_hour = 2'
        )
        # 30 tokens spent in #team; #direct's limit is 20 a day, counted in #direct only
        model.add(Reply("a"), Reply("b"))
        assert (await carol.ask("#direct", "first"))[1] == "a"
        assert (await carol.ask("#direct", "second"))[1] == "b"
        _, refused = await carol.ask("#direct", "third")
        assert refused.startswith(
            'Not run: carol reached [channel."#direct"] max_tokens_per_sender_per_day = 20'
        )
    finally:
        await carol.close()


async def test_a_channels_concurrency_cap_holds_while_another_channel_runs(world):
    """#ops may run one run at a time: its second thread waits while the first is held,
    and a #help prompt that came after it runs and answers meanwhile."""
    _, model, _, alice, _ = world
    hold = Hold(Reply("first"))
    model.add(hold)
    first = await alice.say("#ops", "one")
    async with asyncio.timeout(WAIT):
        await hold.arrived.wait()
    asked = len(model.requests)
    second = await alice.say("#ops", "two")
    model.add(Reply("help answered"))
    _, help_reply = await alice.ask("#help", "meanwhile")
    assert help_reply == "help answered"
    assert len(model.requests) == asked + 1  # #help's run only: #ops' second waits
    model.add(Reply("second"))
    hold.release.set()
    assert [m.text for m in await alice.reply_in(first)] == ["first"]
    assert [m.text for m in await alice.reply_in(second)] == ["second"]


async def test_reset_knows_which_channels_have_a_repl(world):
    """!reset in #direct (tools called directly) says there is no REPL; in #help (code
    mode) it resets the thread's."""
    _, _, _, alice, _ = world
    _, text = await alice.ask("#direct", "!reset")
    assert text == RESET_NONE
    _, text = await alice.ask("#help", "!reset")
    assert text == RESET_DONE
