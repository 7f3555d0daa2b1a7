"""Issue 29 attacked from outside: a real hub on 127.0.0.1, the daemon in this process with
its real store, MCP server and Monty pool, the scripted model.

``#ops`` and ``#dev`` see the same tools (one shared executor) but each has its own
approvers: carol in ``#ops``, alice in ``#dev``. A request of ``#ops`` is decided by
carol, in its own thread only: not by alice, who approves in ``#dev``; not from a
``#dev`` thread, another ``#ops`` thread or ``#help``; not by a ``#dev`` message that
carries the ``#ops`` thread's id, as a hostile or older hub would deliver it. No
attempt leaves an "always" rule.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from structlog.testing import capture_logs

from channels.hub import Hub
from channels.ids import IdGenerator
from daemon.app import Daemon
from daemon.config import load_config
from daemon.runtime.ports import InboundMessage
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import write_config
from tests.test_daemon_approval_rules import append, asks, people
from tests.test_daemon_approvals import lines_of, request_id, settled

_ids = IdGenerator()

SECTIONS = """
[approvals]
expire_after = 600

[channel."#ops"]
servers = ["test"]

[channel."#ops".approvals]
approvers = ["carol"]

[channel."#dev"]
servers = ["test"]

[channel."#dev".approvals]
approvers = ["alice"]

[channel."#help"]
servers = ["test"]
tools_allow = ["test.echo"]
"""


def rooms_config(
    tmp_path: Path, hub_url: str, model_url: str, edit: Callable[[str], str] = lambda t: t
) -> Path:
    """The test daemon's config for #ops, #dev and #help with their SECTIONS, its text
    passed through ``edit`` first (a key added, a glob with a typo)."""
    path = write_config(tmp_path / "asyncai.toml", hub_url=hub_url, model_url=model_url)
    text = path.read_text().replace('["#ops"]', '["#ops", "#dev", "#help"]') + SECTIONS
    path.write_text(edit(text))
    return path


async def test_a_request_of_ops_is_decided_only_by_its_approvers_in_its_thread(
    tmp_path: Path,
) -> None:
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = rooms_config(tmp_path, hub.url, fake.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        bob, alice, carol, carol_dev, carol_help = await people(
            hub.url,
            ("bob", "#ops"),
            ("alice", "#ops"),
            ("carol", "#ops"),
            ("carol", "#dev"),
            ("carol", "#help"),
        )
        try:
            target = tmp_path / "ops.txt"
            fake.add(append(target, "ops"), Reply("Appended."))
            mid, request = await asks(bob, "append a line")
            rid = request_id(request.text)
            # alice decides in #dev, not here
            _, refusal = await alice.ask(f"!approve {rid} always", thread=mid)
            assert refusal.text == f"alice may not decide request {rid}: only carol may."
            # carol, but elsewhere: another #ops thread, a #dev thread, #help
            other, _ = await carol.ask("!tools")  # another #ops thread (no model asked)
            _, answer = await carol.ask(f"!approve {rid} always", thread=other)
            assert answer.text == f"There is no approval request {rid} in this thread."
            for person in (carol_dev, carol_help):
                _, answer = await person.ask(f"!approve {rid} always")
                assert answer.text == f"There is no approval request {rid} in this thread."
            _, shown = await carol_help.ask(f"!show {rid}")
            assert shown.text == f"There is no approval request {rid} in this thread."
            # a #dev message in the #ops thread (the hub refuses it; a hostile one would not)
            for text in (f"!approve {rid} always", "!stop"):
                message = InboundMessage("#dev", _ids.new(), mid, "carol", text)
                await daemon.runtime.submit(message)
            await settled(daemon, mid)
            stored = await daemon.store.approvals.get_approval(rid)
            assert stored is not None
            assert stored.status == "pending"
            assert await daemon.store.rules.rules() == []
            assert lines_of(target) == []
            # carol in the thread: made once
            _, reply = await carol.ask(f"!approve {rid}", thread=mid)
            assert reply.text == "Appended."
            assert lines_of(target) == ["ops"]
        finally:
            for person in (bob, alice, carol, carol_dev, carol_help):
                await person.close()
            await daemon.aclose()


EXAMPLES = """
[[example]]
question = "Append the line done to the notes file."
code = "await append_line(path='/notes', line='done')"

[[example]]
question = "Echo hello back to me."
code = "await echo(text='hello')"
"""


async def test_the_harness_shows_no_example_of_a_tool_the_channel_lacks(tmp_path: Path) -> None:
    """[model] examples is the endpoint's, shared by #help and #ops: #help's system
    message shows only the examples its own tools answer (the one of append_line,
    which #help does not have, is not there, even for a question that is closest to
    it); #ops, which has append_line, is shown it."""
    async with (
        Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub,
        FakeOpenAI(fallback=Reply("done")) as fake,
    ):
        (tmp_path / "examples.toml").write_text(EXAMPLES)
        harness = 'retries = 0\nharness = true\nexamples = "examples.toml"\n'
        path = rooms_config(
            tmp_path, hub.url, fake.base_url, lambda t: t.replace("retries = 0\n", harness)
        )
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        helper, operator = await people(hub.url, ("dave", "#help"), ("carol", "#ops"))
        try:
            await helper.ask("Append the line done to the notes file.")
            help_requests = list(fake.requests)
            assert help_requests
            for request in help_requests:
                assert "append_line" not in request["messages"][0]["content"]
            await helper.ask("Echo hello back to me.")
            assert "await echo(text='hello')" in fake.requests[-1]["messages"][0]["content"]
            await operator.ask("Append the line done to the notes file.")
            system = fake.requests[-1]["messages"][0]["content"]
            assert "await append_line(path='/notes', line='done')" in system
        finally:
            await helper.close()
            await operator.close()
            await daemon.aclose()


async def test_a_deny_glob_written_while_a_request_waits_beats_its_approval(
    tmp_path: Path,
) -> None:
    """bob's #ops request waits; the operator adds deny = ["test.append_line"] to #ops'
    approvals and restarts (stopping writes). carol's !approve ID always, then !approve
    ID, are refused with one line each: the call is never made and no rule is left (a
    deny glob wins over an always, and over a once); !deny ends the request."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = rooms_config(tmp_path, hub.url, fake.base_url)
        target = tmp_path / "ops.txt"
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        (bob,) = await people(hub.url, ("bob", "#ops"))
        try:
            fake.add(append(target, "ops"), Reply("Appended."))
            mid, request = await asks(bob, "append a line")
            rid = request_id(request.text)
        finally:
            await bob.close()
            await daemon.aclose()
        ops = 'approvers = ["carol"]\n'
        path.write_text(path.read_text().replace(ops, ops + 'deny = ["test.append_line"]\n'))
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        (carol,) = await people(hub.url, ("carol", "#ops"))
        try:
            for command in (f"!approve {rid} always", f"!approve {rid}"):
                _, refusal = await carol.ask(command, thread=mid)
                assert refusal.text == (
                    f"Request {rid} cannot be approved: test.append_line is refused by "
                    "[approvals] deny = 'test.append_line' now; !deny it to end it."
                )
            stored = await daemon.store.approvals.get_approval(rid)
            assert stored is not None
            assert stored.status == "pending"
            assert await daemon.store.rules.rules() == []
            _, reply = await carol.ask(f"!deny {rid}", thread=mid)
            assert "denied by carol" in reply.text
            assert lines_of(target) == []
        finally:
            await carol.close()
            await daemon.aclose()


async def test_a_channel_with_servers_empty_has_no_tool_in_either_mode(tmp_path: Path) -> None:
    """servers = []: !tools says there are none; in code mode run_code is offered and a
    tool named anyway is a NameError; in direct mode the request carries no tools at all,
    and a tool named anyway is refused. The test server is never called from there."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        text = path.read_text().replace('["#ops"]', '["#ops", "#quiet", "#quietd"]')
        quiet = '[channel."#quiet"]\nservers = []\n'
        path.write_text(text + quiet + quiet.replace("quiet", "quietd") + 'tool_mode = "direct"\n')
        target = tmp_path / "never.txt"
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        code, direct = await people(hub.url, ("dave", "#quiet"), ("dave", "#quietd"))
        try:
            for person, channel in ((code, "#quiet"), (direct, "#quietd")):
                _, tools = await person.ask("!tools")
                assert tools.text.startswith(f"No tools in {channel};")
            fake.add(append(target, "x"), Reply("no"))
            await code.ask("append")
            assert [t["function"]["name"] for t in fake.requests[-2]["tools"]] == ["run_code"]
            result = fake.requests[-1]["messages"][-1]["content"]
            assert "NameError: name 'append_line' is not defined" in result
            fake.add(ToolCalls(("append_line", {"path": str(target), "line": "x"})), Reply("no"))
            await direct.ask("append")
            assert "tools" not in fake.requests[-2]
            result = fake.requests[-1]["messages"][-1]["content"]
            assert "there is no tool named 'append_line'" in result
            assert lines_of(target) == []
        finally:
            await code.close()
            await direct.close()
            await daemon.aclose()


async def test_a_glob_that_names_no_tool_is_warned_about_at_start(tmp_path: Path) -> None:
    """A deny glob with a typo refuses nothing: the daemon says so once at start, naming the
    key and the glob; the globs that name a tool say nothing."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        typo = 'tools_allow = ["test.echo"]\n'
        deny = typo + 'tools_deny = ["test.eras", "*.erase"]\n'
        path = rooms_config(tmp_path, hub.url, fake.base_url, lambda t: t.replace(typo, deny))
        daemon = Daemon(load_config(path, environ={}), env={})
        with capture_logs() as logs:
            await daemon.start()
        try:
            idle = [e for e in logs if e["event"] == "daemon.glob_matches_no_tool"]
            assert [(e["key"], e["glob"]) for e in idle] == [
                ('channel."#help".tools_deny', "test.eras")
            ]
        finally:
            await daemon.aclose()


SECRET = '{"alice@corp.example": {"role": "admin", "token_hint": "ak-77"}}'


def _run_code(code: str) -> ToolCalls:
    return ToolCalls(("run_code", {"code": code}))


def _tools_text(request: dict) -> str:
    """What a model request shows of the tools: the run_code description, the system."""
    tools = " ".join(str(tool) for tool in request.get("tools") or [])
    return tools + " " + str(request["messages"][0]["content"])


async def test_a_shape_learned_in_ops_is_never_shown_to_another_channel(tmp_path: Path) -> None:
    """#ops and #dev share one executor (the same tools): #ops's echo returns a dict keyed
    by alice's address and code mode learns its shape. #ops's next run shows it
    (``Returns (observed)``); #dev's stub and system never do (nor its snippet's catalog),
    nor, after a restart, #dev's or #help's: the stored shape is #ops's alone."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = rooms_config(tmp_path, hub.url, fake.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        operator, developer = await people(hub.url, ("carol", "#ops"), ("alice", "#dev"))
        try:
            lanes = daemon._lanes
            assert lanes is not None
            assert lanes.lane("#ops").executor is lanes.lane("#dev").executor
            fake.add(_run_code(f"await echo(text={SECRET!r})"), Reply("echoed"))
            await operator.ask("echo the directory entry")
            fake.add(_run_code("await echo(text='hi')"), Reply("echoed"))
            await developer.ask("what does echo return?")
            for request in fake.requests[-2:]:
                assert "alice@corp.example" not in _tools_text(request)
            fake.add(Reply("known"))
            await operator.ask("what does echo return?")
            assert "Returns (observed)" in _tools_text(fake.requests[-1])
            assert "alice@corp.example" in _tools_text(fake.requests[-1])
        finally:
            await operator.close()
            await developer.close()
            await daemon.aclose()

        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        people_after = await people(
            hub.url, ("carol", "#ops"), ("alice", "#dev"), ("dave", "#help")
        )
        operator, developer, helper = people_after
        try:
            for person in (developer, helper):
                fake.add(Reply("unknown"))
                await person.ask("what does echo return?")
                assert "alice@corp.example" not in _tools_text(fake.requests[-1])
            fake.add(Reply("known"))
            await operator.ask("what does echo return?")
            assert "alice@corp.example" in _tools_text(fake.requests[-1])
        finally:
            for person in people_after:
                await person.close()
            await daemon.aclose()
