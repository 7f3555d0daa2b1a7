"""The daemon as a real process (`python -m daemon.cli serve`): crashes, SIGTERM, systemd.

Where a test is about processes it runs the real daemon as a subprocess
against a real hub and the scripted model in this process, and a unix
datagram socket standing in for systemd's ``NOTIFY_SOCKET``. The daemon runs
in its own session, so a test can kill it together with its Monty workers
the way systemd kills a unit's cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from channels.client import WebSocketChannel
from channels.hub import Hub
from daemon.runtime.interrupted import INTERRUPTED_HEAD, INTERRUPTED_TAIL
from sessions.store import Store
from tests.fakes.fake_openai import FakeOpenAI, Hold, Reply, ToolCalls
from tests.fakes.notify import NotifySocket
from tests.test_daemon import WAIT, Person, user_text, write_config

pytestmark = pytest.mark.slow


class DaemonProcess:
    """`asyncai serve` in its own session, logs to a file."""

    def __init__(self, config: Path, notify: NotifySocket):
        self.config = config
        self.notify = notify
        self.log = config.parent / "daemon.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, **extra_env: str) -> None:
        """Spawn it and wait for READY=1 (it is subscribed then)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "ATIRC_", "ASYNCAI_", "WATCHDOG_"))
        }
        env["NOTIFY_SOCKET"] = str(self.notify.path)
        env.update(extra_env)
        self.notify.states.clear()
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "daemon.cli",
                "serve",
                "--config",
                str(self.config),
                "--verbose",
                cwd=self.config.parent,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        try:
            await self.notify.wait_for("READY=1")
        except TimeoutError:
            raise AssertionError(f"no READY=1; log:\n{self.log.read_text()[-3000:]}") from None

    async def wait(self) -> int:
        """Its exit status (waits, bounded)."""
        assert self.proc is not None
        async with asyncio.timeout(WAIT):
            return await self.proc.wait()

    def kill_all(self) -> None:
        """SIGKILL the daemon and every process of its session (workers included)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
async def world(tmp_path):
    """Hub, scripted model, notify socket, a person, and the config of a daemon."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        notify = NotifySocket(tmp_path / "notify.sock")
        config = write_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=False
        )
        config.write_text(
            config.read_text().replace("shutdown_grace = 2.0", "shutdown_grace = 0.5")
        )
        alice = Person(hub.url)
        await alice.start()
        daemons: list[DaemonProcess] = []

        def daemon() -> DaemonProcess:
            d = DaemonProcess(config, notify)
            daemons.append(d)
            return d

        try:
            yield hub, fake, alice, daemon, tmp_path
        finally:
            for d in daemons:
                d.kill_all()
                if d.proc is not None:
                    await d.wait()
            await alice.close()
            await notify.close()


async def thread_replies(hub: Hub, thread: str) -> list[str]:
    """Every message the daemon stored in ``thread``, read back from the hub."""
    reader = WebSocketChannel(hub.url, nick="auditor")
    async with reader:
        sub = await reader.subscribe("#ops", since="0" * 26)
        texts = []
        async with asyncio.timeout(WAIT):
            while True:
                message = await reader.receive()
                if message.thread == thread and message.sender == "asyncai":
                    texts.append(message.text)
                if message.id == sub.head:
                    return texts


async def test_sigkill_mid_run_then_restart_answers_exactly_once(world):
    """Killed with SIGKILL while the model is thinking, started again: the prompt is
    answered once, and the run cut off is recorded as interrupted (its row, deferred
    to the run's first write, is written within a second while the model thinks)."""
    hub, fake, alice, daemon, tmp = world
    held = Hold(Reply("never sent"))
    fake.add(held, Reply("answered once"))
    first = daemon()
    await first.start()
    mid, thread = await alice.say("what is the state of the cluster?")
    async with asyncio.timeout(WAIT):
        await held.arrived.wait()
        while not _runs(tmp / "asyncai.db", thread):  # noqa: ASYNC110 (another process)
            await asyncio.sleep(0.05)
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL
    held.release.set()

    second = daemon()
    await second.start()
    [reply] = await alice.reply_in(thread)
    assert reply.text == "answered once"
    assert reply.reply_to == mid
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0

    assert await thread_replies(hub, thread) == ["answered once"]
    async with Store(tmp / "asyncai.db", create=False) as store:
        [prompt] = await store.queries.get_prompts([mid])
        assert prompt.status == "done"
    runs = _runs(tmp / "asyncai.db", thread)
    assert [status for _, status, _ in runs] == ["interrupted", "done"]
    assert runs[1][0] == prompt.run_id


async def test_sigterm_exits_zero_and_records_the_run(world):
    """systemd sees READY=1, STATUS= and WATCHDOG=1; SIGTERM mid-run: exit 0 after the
    grace period, STOPPING=1, the run recorded interrupted, its prompt kept for the next start."""
    hub, fake, alice, daemon, tmp = world
    held = Hold(Reply("never sent"))
    fake.add(held)
    d = daemon()
    await d.start(WATCHDOG_USEC="200000")  # a ping every 0.1 s
    status = await d.notify.wait_for("STATUS=")
    assert status == "STATUS=active runs: 0, queued prompts: 0, live scopes: 0"
    await d.notify.wait_for("WATCHDOG=1")
    mid, thread = await alice.say("a long question")
    async with asyncio.timeout(WAIT):
        await held.arrived.wait()
    await d.notify.wait_for("STATUS=active runs: 1, queued prompts: 0, live scopes: 1")
    d.proc.send_signal(signal.SIGTERM)
    assert await d.wait() == 0
    await d.notify.wait_for("STOPPING=1")
    held.release.set()
    async with Store(tmp / "asyncai.db", create=False) as store:
        [prompt] = await store.queries.get_prompts([mid])
        assert prompt.status == "queued"
    [(_, run_status, error)] = _runs(tmp / "asyncai.db", thread)
    assert (run_status, error) == ("interrupted", "daemon shutting down")
    assert await thread_replies(hub, thread) == []


def _runs(db: Path, thread: str) -> list[tuple[str, str, str | None]]:
    """``(run id, status, error)`` of a thread's runs, read with plain SQL as sqlite3 users do."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT r.id, r.status, r.error FROM runs r JOIN threads t ON t.id = r.thread"
            " WHERE t.thread_id = ? ORDER BY r.started",
            (thread,),
        ).fetchall()


@pytest.mark.parametrize("mode", ["code", "direct"])
async def test_sigkill_during_a_mutating_call_is_not_repeated_after_restart(world, mode):
    """Killed with SIGKILL while a mutating tool call is in flight, started again: the
    prompt is not run again (the tool ran exactly once), and the thread gets the
    interrupted notice naming the call, whose outcome is unknown. In direct tool mode
    too (the model calls the tool itself): the call's audit row is written as it starts."""
    hub, fake, alice, daemon, tmp = world
    config = write_config(
        tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=True
    )
    # approvals would hold the call for a person; this test is about the call itself
    text = config.read_text() + '\n[approvals]\nmode = "allow"\n'
    config.write_text(text.replace("retries = 0", f'retries = 0\ntool_mode = "{mode}"'))
    effects = tmp / "effects.txt"
    if mode == "code":
        code = f"await append_and_block(path={str(effects)!r})"
        fake.add(ToolCalls(("run_code", {"code": code})), Reply("never sent"))
    else:
        fake.add(ToolCalls(("append_and_block", {"path": str(effects)})), Reply("never sent"))
    first = daemon()
    await first.start()
    mid, thread = await alice.say("delete the old config map")
    async with asyncio.timeout(WAIT):
        # another process writes the file: there is no event to wait on, so poll it
        while not effects.exists():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    # the side effect happened; the call now blocks in the server
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL

    second = daemon()
    await second.start()
    [notice] = await alice.reply_in(thread)
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0

    assert effects.read_text() == "called\n"  # exactly once
    assert len(fake.requests) == 1  # the prompt never reached the model again
    assert notice.reply_to == mid
    head, call, tail = notice.text.splitlines()
    assert (head, tail) == (INTERRUPTED_HEAD, INTERRUPTED_TAIL)
    assert call.startswith("- append_and_block(path='/")  # the long path is shortened
    assert call.endswith(") [mutating]: did not finish (outcome unknown)")
    async with Store(tmp / "asyncai.db", create=False) as store:
        [prompt] = await store.queries.get_prompts([mid])
        assert prompt.status == "failed"
        [call] = await store.audit.entries(thread=thread)
        assert (call.tool, call.mutating, call.outcome) == ("append_and_block", True, "unknown")
    assert [status for _, status, _ in _runs(tmp / "asyncai.db", thread)] == ["interrupted"]


async def test_sigkill_while_an_approval_is_pending_then_approve_after_restart_runs_it_once(
    world,
):
    """Killed with SIGKILL while a run waits for approval, started again: the request
    survives, ``!approve ID`` resumes the stored snapshot, the call is made exactly
    once, the model's answer arrives, and the prompt and request are settled."""
    hub, fake, alice, daemon, tmp = world
    write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=True)
    effects = tmp / "effects.txt"
    code = f"r = await append_line(path={str(effects)!r}, line='once')\nr"
    fake.add(ToolCalls(("run_code", {"code": code})), Reply("Appended it once."))
    first = daemon()
    await first.start()
    mid, asked = await alice.ask("append a line")
    *_, approve, deny = asked.text.splitlines()
    assert approve.startswith("!approve ")
    assert deny.startswith("!deny ")
    rid = approve.split()[1]
    assert not effects.exists()
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL

    second = daemon()
    await second.start()
    assert not effects.exists()
    await alice.say(f"!approve {rid}", thread=mid)
    [_, reply] = await alice.reply_in(mid, 2)
    assert reply.text == "Appended it once."
    assert reply.reply_to == mid
    assert effects.read_text() == "once\n"  # exactly once
    assert fake.requests[-1]["messages"][-1]["content"] == "appended once"
    async with asyncio.timeout(WAIT):
        # the reply is published before the prompt is recorded done: poll the store
        while True:
            async with Store(tmp / "asyncai.db", create=False) as store:
                [prompt] = await store.queries.get_prompts([mid])
                approval = await store.approvals.get_approval(rid)
            if prompt.status == "done" and approval is not None and approval.resumed:
                break
            await asyncio.sleep(0.02)
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0

    assert (approval.status, approval.decided_by, approval.scope) == ("approved", "alice", "call")
    assert await thread_replies(hub, thread=mid) == [asked.text, "Appended it once."]
    assert effects.read_text() == "once\n"
    assert len(fake.requests) == 2  # the prompt was not asked again after the restart
    assert [status for _, status, _ in _runs(tmp / "asyncai.db", mid)] == ["done"]


async def test_sigkill_while_an_approved_run_goes_on_does_not_repeat_the_call(world):
    """Killed with SIGKILL after ``!approve`` was taken and the call made, while the
    model reads its result, started again: the decision is not acted on twice (the
    call ran once) and the thread gets the interrupted notice naming the call."""
    hub, fake, alice, daemon, tmp = world
    write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=True)
    effects = tmp / "effects.txt"
    code = f"await append_line(path={str(effects)!r}, line='once')"
    held = Hold(Reply("never sent"))
    fake.add(ToolCalls(("run_code", {"code": code})), held)
    first = daemon()
    await first.start()
    mid, asked = await alice.ask("append a line")
    rid = asked.text.splitlines()[-2].split()[1]
    await alice.say(f"!approve {rid}", thread=mid)
    async with asyncio.timeout(WAIT):
        await held.arrived.wait()  # the call was made; the model has its result
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL
    held.release.set()

    second = daemon()
    await second.start()
    [_, notice] = await alice.reply_in(mid, 2)
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0

    assert effects.read_text() == "once\n"  # exactly once
    assert len(fake.requests) == 2  # neither the prompt nor the resume went on again
    assert notice.reply_to == mid
    head, call, tail = notice.text.splitlines()
    assert (head, tail) == (INTERRUPTED_HEAD, INTERRUPTED_TAIL)
    assert call.startswith("- append_line(path='/")
    assert call.endswith(", line='once') [mutating]: ok")
    async with Store(tmp / "asyncai.db", create=False) as store:
        [prompt] = await store.queries.get_prompts([mid])
        assert prompt.status == "failed"
        approval = await store.approvals.get_approval(rid)
        assert approval is not None
        assert approval.status == "approved"
        assert approval.resumed is not None
    assert [status for _, status, _ in _runs(tmp / "asyncai.db", mid)] == ["interrupted"]


RESTORED = "[run_code REPL was restored from the save of "
TAMPERED = (
    "[run_code REPL is empty: the saved REPL was not restored: its MAC does not match: "
    "the stored bytes were changed; fetch again what you need.]"
)


def _two_scopes(config: Path) -> None:
    """At most two live REPLs (and so two concurrent runs, which may not exceed them)."""
    text = config.read_text().replace(
        "shutdown_grace = 0.5", "shutdown_grace = 0.5\nmax_concurrent_runs = 2"
    )
    config.write_text(text + "\n[code_mode]\nmax_scopes = 2\n")


def _note_of(fake: FakeOpenAI, prompt: str) -> str:
    """What the daemon appended to ``prompt`` in the newest request to the model."""
    text = user_text(fake.requests[-1])
    assert text.startswith(prompt)
    return text[len(prompt) :]


async def _remember_41(alice: Person, fake: FakeOpenAI) -> str:
    """A new thread whose REPL binds ``x = 41``; its thread id, once the reply is in."""
    fake.add(ToolCalls(("run_code", {"code": "x = 41"})), Reply("kept 41"))
    thread, reply = await alice.ask("remember 41")
    assert reply.text == "kept 41"
    return thread


async def _recorded_done(db: Path, prompt_id: str) -> None:
    """Until the prompt is recorded done, just after the hub acked its reply (bounded).

    A crash before that runs the prompt again at the next start (its reply is
    not published twice), which would ask the model a second time.
    """
    async with asyncio.timeout(WAIT):
        while True:
            async with Store(db, create=False) as store:
                [prompt] = await store.queries.get_prompts([prompt_id])
            if prompt.status == "done":
                return
            await asyncio.sleep(0.02)  # the daemon signals nothing: poll the store


async def _stop(d: DaemonProcess) -> None:
    """SIGTERM: the daemon exits 0, and no process of its session is left."""
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert await d.wait() == 0
    await _session_ended(d)


async def _session_ended(d: DaemonProcess) -> None:
    """Until no process of the daemon's session (its Monty workers) is left (bounded)."""
    assert d.proc is not None
    async with asyncio.timeout(WAIT):
        while True:
            try:
                os.killpg(d.proc.pid, 0)
            except ProcessLookupError:
                return
            # orphaned workers are reaped by init, which signals nothing: poll
            await asyncio.sleep(0.02)


def _flip_a_byte_of_the_dump(db: Path, thread: str) -> None:
    """Change one byte of the thread's stored REPL in place, with plain SQL."""
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        [(key, data)] = conn.execute(
            "SELECT s.thread, s.data FROM scopes s JOIN threads t ON t.id = s.thread"
            " WHERE t.thread_id = ?",
            (thread,),
        ).fetchall()
        changed = bytearray(data)
        changed[len(changed) // 2] ^= 0x01
        conn.execute("UPDATE scopes SET data = ? WHERE thread = ?", (bytes(changed), key))


async def test_a_threads_repl_survives_eviction_and_sigterm(world):
    """With two live REPLs, two newer threads evict A's: A's next run gets its REPL back
    from the store (the note says so and lists ``x``); after SIGTERM and a new start,
    A's REPL is loaded again."""
    _, fake, alice, daemon, tmp = world
    _two_scopes(tmp / "asyncai.toml")
    first = daemon()
    await first.start()
    a = await _remember_41(alice, fake)
    for name in ("b", "c"):
        fake.add(ToolCalls(("run_code", {"code": f"{name} = '{name}'"})), Reply(f"kept {name}"))
        await alice.ask(f"remember {name}")
    fake.add(Reply("41"))
    _, reply = await alice.ask("what is x?", thread=a)
    assert reply.text == "41"
    note = _note_of(fake, "what is x?")
    assert RESTORED in note
    assert "x: int" in note
    await _stop(first)

    second = daemon()
    await second.start()
    fake.add(Reply("still 41"))
    _, reply = await alice.ask("and now?", thread=a)
    assert reply.text == "still 41"
    note = _note_of(fake, "and now?")
    assert RESTORED in note
    assert "x: int" in note
    await _stop(second)
    assert not fake.script


async def test_a_threads_repl_survives_sigkill(world):
    """Killed with SIGKILL right after A's reply: the dump made after the run is enough,
    and the next start loads A's REPL for its next run."""
    _, fake, alice, daemon, tmp = world
    _two_scopes(tmp / "asyncai.toml")
    first = daemon()
    await first.start()
    a = await _remember_41(alice, fake)
    await _recorded_done(tmp / "asyncai.db", a)
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL
    await _session_ended(first)

    second = daemon()
    await second.start()
    fake.add(Reply("41"))
    await alice.ask("what is x?", thread=a)
    note = _note_of(fake, "what is x?")
    assert RESTORED in note
    assert "x: int" in note
    await _stop(second)
    assert not fake.script


async def test_a_tampered_dump_starts_the_thread_empty_with_the_reason(world):
    """One byte of A's stored REPL changed while the daemon is down: the next start
    does not load it; A's note says its REPL is empty because the MAC does not match."""
    _, fake, alice, daemon, tmp = world
    _two_scopes(tmp / "asyncai.toml")
    first = daemon()
    await first.start()
    a = await _remember_41(alice, fake)
    await _stop(first)
    _flip_a_byte_of_the_dump(tmp / "asyncai.db", a)

    second = daemon()
    await second.start()
    fake.add(Reply("I lost it"))
    await alice.ask("what is x?", thread=a)
    note = _note_of(fake, "what is x?")
    assert TAMPERED in note
    assert RESTORED not in note
    assert "x: int" not in note
    await _stop(second)
    assert not fake.script


async def test_sigkill_mid_run_keeps_the_tokens_it_spent_for_the_sender_limit(world):
    """Killed with SIGKILL after a model response that used 100 000 tokens: the tokens
    were on the run row already, so after the restart (the prompt runs again, another
    100 000) alice's next prompt meets max_tokens_per_sender_per_day = 150 000."""
    _, fake, alice, daemon, tmp = world
    config = tmp / "asyncai.toml"
    limit = "[runtime]\nmax_tokens_per_sender_per_day = 150000\n"
    config.write_text(config.read_text().replace("[runtime]\n", limit))
    big = {"prompt_tokens": 90_000, "completion_tokens": 10_000, "total_tokens": 100_000}
    none = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    held = Hold(Reply("never sent"))
    fake.add(ToolCalls(("run_code", {"code": "1 + 1"}), usage=big), held)
    first = daemon()
    await first.start()
    _, thread = await alice.say("a long question")
    async with asyncio.timeout(WAIT):
        await held.arrived.wait()
    first.kill_all()
    assert await first.wait() == -signal.SIGKILL
    held.release.set()

    fake.add(ToolCalls(("run_code", {"code": "2 + 2"}), usage=big), Reply("Here.", usage=none))
    second = daemon()
    await second.start()
    [reply] = await alice.reply_in(thread)
    assert reply.text == "Here."
    _, refusal = await alice.ask("and another")
    assert refusal.text.startswith(
        "Not run: alice reached [runtime] max_tokens_per_sender_per_day = 150000 "
        "(200000 tokens in the last 24 hours)"
    ), refusal.text
    second.proc.send_signal(signal.SIGTERM)
    assert await second.wait() == 0
    runs = _runs(tmp / "asyncai.db", thread)
    assert [status for _, status, _ in runs] == ["interrupted", "done"]
