"""Soak test (issue 15): random SIGKILLs of the daemon and the hub while prompts run.

The real daemon (``python -m daemon.cli serve``) and the real hub (``atirc
hub``) run as processes, each in its own session so a kill takes its
children (Monty workers, the MCP server) with it, the way systemd kills a
unit's cgroup. The model is the scripted server in this process: each
prompt is answered in two rounds, a ``run_code`` that calls ``echo`` on the
real MCP test server (``tests/fakes/mcp_test_server.py``), then the answer,
each round after a random pause so kills land mid-run, mid-call and idle.

A client publishes ``--prompts`` prompts with unique texts (each a new
thread, with a ``client_id`` so a publish retried across a hub restart is
stored once), while ``--daemon-kills`` SIGKILLs of the daemon and
``--hub-kills`` of the hub happen in random order at random moments; each
killed process is started again at once and waited for (``READY=1`` on its
notify socket). Then it waits (bounded) until every prompt has a reply, a
little longer for late duplicates, and reads every message back from the
hub. It prints a Markdown table: prompts answered once, lost, answered
twice, answered with something else, the runs recorded interrupted, and
``PRAGMA integrity_check`` of the daemon's and the hub's SQLite files.

Run: ``.venv/bin/python bench/soak.py`` (a quick run: 5 daemon and 2 hub
kills, 20 prompts); ``--daemon-kills 90 --hub-kills 10 --prompts 200`` is
the run in docs/benchmarks/index.md (several minutes). Exit status 0 when no prompt was lost
or answered twice and both databases are intact, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels.client import WebSocketChannel
from channels.client.backoff import exponential_backoff
from channels.errors import ChannelError
from daemon.logging import configure_logging
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import write_config
from tests.test_daemon_process import DaemonProcess, NotifySocket

CHANNEL = "#ops"
TAG = re.compile(r"soak-\d+-[0-9a-f]{8}")
READY_WAIT = 60.0  # seconds for a restarted process to say READY=1 on a loaded machine
ANSWER_WAIT = 180.0  # seconds, after the last kill, for every prompt to get its reply
LATE = 3.0  # seconds to go on listening for a second reply after the last first one
PUBLISH_ATTEMPTS = 20  # a publish is retried (same client_id) across hub restarts


def answer(tag: str) -> str:
    """The reply a prompt tagged ``tag`` must get."""
    return f"echoed {tag}"


@dataclass
class Tally:
    """What the run saw."""

    prompts: dict[str, str] = field(default_factory=dict)  # message id → tag
    kills: Counter[str] = field(default_factory=Counter)
    restart_seconds: list[float] = field(default_factory=list)


def model_step(rng: random.Random, max_pause: float) -> Any:
    """The scripted model: ``run_code`` calling ``echo`` with the prompt's tag, then the
    answer; each round after a random pause, so kills land in every phase."""

    async def step(body: dict[str, Any]) -> Any:
        await asyncio.sleep(rng.uniform(0, max_pause))
        messages = body["messages"]
        user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        found = TAG.search(user)
        tag = found.group(0) if found else "?"
        if messages[-1]["role"] == "tool":
            return Reply(answer(tag))
        return ToolCalls(("run_code", {"code": f"await echo(text={tag!r})"}))

    return step


class HubProcess:
    """``atirc hub`` on a fixed port in its own session, its log in a file."""

    def __init__(self, state: Path, port: int, notify: NotifySocket):
        self.db = state / "hub.db"
        self.port = port
        self.notify = notify
        self.log = state / "hub.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        """The hub's URL, the same across restarts."""
        return f"ws://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        """Spawn it and wait for READY=1."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ATIRC_", "WATCHDOG_"))}
        env["NOTIFY_SOCKET"] = str(self.notify.path)
        self.notify.states.clear()
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "import sys; from channels.cli import main; sys.exit(main())",
                "hub",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--db",
                str(self.db),
                cwd=self.db.parent,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        async with asyncio.timeout(READY_WAIT):
            await self.notify.wait_for("READY=1")

    def kill(self) -> None:
        """SIGKILL the hub."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM, and wait for it to exit."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(READY_WAIT):
                await self.proc.wait()


async def restart_daemon(daemon: DaemonProcess) -> None:
    """SIGKILL the daemon's session, then start it again and wait for READY=1."""
    daemon.kill_all()
    assert daemon.proc is not None
    await daemon.proc.wait()
    async with asyncio.timeout(READY_WAIT):
        await daemon.start()


async def stop_daemon(daemon: DaemonProcess) -> None:
    """SIGTERM the daemon and wait; SIGKILL what is left of its session."""
    if daemon.proc is not None and daemon.proc.returncode is None:
        daemon.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await daemon.wait()
    daemon.kill_all()
    if daemon.proc is not None:
        await daemon.proc.wait()


async def restart_hub(hub: HubProcess) -> None:
    """SIGKILL the hub, then start it again on the same port and wait for READY=1."""
    hub.kill()
    assert hub.proc is not None
    await hub.proc.wait()
    await hub.start()


async def publish_prompts(
    client: WebSocketChannel, count: int, spread: float, tally: Tally, rng: random.Random
) -> None:
    """Publish ``count`` prompts over about ``spread`` seconds, each a new thread."""
    for i in range(count):
        tag = f"soak-{i}-{rng.getrandbits(32):08x}"
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                ack = await client.publish(
                    CHANNEL, f"please echo {tag}", client_id=f"soak-prompt-{i}"
                )
                break
            except ChannelError:
                if attempt == PUBLISH_ATTEMPTS:
                    raise
                await asyncio.sleep(0.5)  # the hub is restarting
        tally.prompts[ack.id] = tag
        await asyncio.sleep(rng.uniform(0, 2 * spread / max(count, 1)))


async def kill_at_random(
    daemon: DaemonProcess,
    hub: HubProcess,
    daemon_kills: int,
    hub_kills: int,
    tally: Tally,
    rng: random.Random,
    gap: float,
) -> None:
    """The kills in random order, each after a random gap; each process restarted at once."""
    order = ["daemon"] * daemon_kills + ["hub"] * hub_kills
    rng.shuffle(order)
    for n, which in enumerate(order, 1):
        await asyncio.sleep(rng.uniform(0.05, gap))
        started = time.monotonic()
        await (restart_daemon(daemon) if which == "daemon" else restart_hub(hub))
        tally.restart_seconds.append(time.monotonic() - started)
        tally.kills[which] += 1
        print(f"  kill {n}/{len(order)}: {which}", file=sys.stderr, flush=True)


async def replies_by_prompt(url: str) -> dict[str, list[str]]:
    """Every reply of the daemon stored in the hub, by the prompt it answers."""
    reader = WebSocketChannel(url, nick="auditor")
    found: dict[str, list[str]] = {}
    async with reader:
        sub = await reader.subscribe(CHANNEL, since="0" * 26)
        if sub.head is None:
            return found
        async with asyncio.timeout(60):
            while True:
                message = await reader.receive()
                if message.sender == "asyncai" and message.reply_to:
                    found.setdefault(message.reply_to, []).append(message.text)
                if message.id == sub.head:
                    return found


async def wait_for_answers(url: str, prompts: dict[str, str]) -> dict[str, list[str]]:
    """Until every prompt has a reply (bounded by ANSWER_WAIT), then LATE seconds more."""
    deadline = time.monotonic() + ANSWER_WAIT
    while True:
        replies = await replies_by_prompt(url)
        if all(replies.get(mid) for mid in prompts) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)  # the hub tells no one when the last reply is in: poll it
    await asyncio.sleep(LATE)
    return await replies_by_prompt(url)


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of a SQLite file: ``ok`` or its first complaint."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def interrupted_runs(db: Path) -> int:
    """The runs the daemon recorded as interrupted (cut off by a kill)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(
            conn.execute("SELECT count(*) FROM runs WHERE status = 'interrupted'").fetchone()[0]
        )


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def soak(args: argparse.Namespace, state: Path) -> int:
    """Run the campaign in ``state``; print the table; the exit status."""
    configure_logging(verbose=False, stream=io.StringIO())
    rng = random.Random(args.seed)
    tally = Tally()
    started = time.monotonic()
    async with FakeOpenAI(fallback=model_step(rng, args.model_pause)) as fake:
        hub = HubProcess(state, free_port(), NotifySocket(state / "hub-notify.sock"))
        await hub.start()
        config = write_config(
            state / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, grace=0.5
        )
        daemon = DaemonProcess(config, NotifySocket(state / "daemon-notify.sock"))
        await daemon.start()
        client = WebSocketChannel(hub.url, nick="alice", backoff=exponential_backoff(maximum=1.0))
        try:
            await client.connect()
            spread = (args.daemon_kills + args.hub_kills) * (args.gap / 2 + 1.5)
            await asyncio.gather(
                publish_prompts(client, args.prompts, spread, tally, rng),
                kill_at_random(
                    daemon, hub, args.daemon_kills, args.hub_kills, tally, rng, args.gap
                ),
            )
            replies = await wait_for_answers(hub.url, tally.prompts)
        finally:
            await client.close()
            await stop_daemon(daemon)
            await hub.stop()
            await daemon.notify.close()
            await hub.notify.close()
        model_requests = len(fake.requests)
    seconds = time.monotonic() - started

    counts = Counter(len(replies.get(mid, [])) for mid in tally.prompts)
    wrong = sum(
        1
        for mid, tag in tally.prompts.items()
        if replies.get(mid) and any(text != answer(tag) for text in replies[mid])
    )
    stray = sum(len(texts) for mid, texts in replies.items() if mid not in tally.prompts)
    checks = {"asyncai.db": integrity(state / "asyncai.db"), "hub.db": integrity(hub.db)}
    lost = counts[0]
    twice = sum(n for k, n in counts.items() if k > 1)
    restarts = sorted(tally.restart_seconds)
    median = restarts[len(restarts) // 2] if restarts else 0.0
    rows = [
        ("SIGKILLs of the daemon / of the hub", f"{tally.kills['daemon']} / {tally.kills['hub']}"),
        ("prompts published", str(len(tally.prompts))),
        ("answered exactly once", str(counts[1])),
        ("lost (no reply)", str(lost)),
        ("answered twice or more", str(twice)),
        ("answered with another text", str(wrong)),
        ("replies to no prompt of ours", str(stray)),
        ("runs recorded interrupted", str(interrupted_runs(state / "asyncai.db"))),
        ("model requests (2 per answer without kills)", str(model_requests)),
        ("integrity_check asyncai.db / hub.db", f"{checks['asyncai.db']} / {checks['hub.db']}"),
        ("restart to READY=1, median / max", f"{median:.2f} s / {max(restarts, default=0):.2f} s"),
        ("wall time", f"{seconds:.0f} s"),
    ]
    print(f"soak test, {date.today().isoformat()}, seed {args.seed}\n")
    print("| measurement | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    ok = lost == 0 and twice == 0 and wrong == 0 and set(checks.values()) == {"ok"}
    if not ok:
        print(f"\nstate kept in {state} (daemon.log, hub.log, the databases)", file=sys.stderr)
    return 0 if ok else 1


def main() -> int:
    """Parse the flags, run in a fresh directory (kept when something failed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon-kills", type=int, default=5, metavar="N")
    parser.add_argument("--hub-kills", type=int, default=2, metavar="M")
    parser.add_argument("--prompts", type=int, default=20, metavar="P")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--gap", type=float, default=1.2, help="at most this many seconds between kills"
    )
    parser.add_argument(
        "--model-pause", type=float, default=0.3, help="at most this many seconds per model round"
    )
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="asyncai-soak-"))
    status = asyncio.run(soak(args, state))
    if status == 0:
        shutil.rmtree(state)
    return status


if __name__ == "__main__":
    sys.exit(main())
