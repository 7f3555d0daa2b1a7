"""Benchmark: two `asyncai serve` daemons on one NATS broker beside one (issue 18).

Run: ``.venv/bin/python bench/cluster.py [--prompts N] [--delay S] [--repeat N]``

A real ``nats-server -js`` (its own process, file storage), the scripted
model of the tests answering each request after ``--delay`` seconds (200 ms:
a remote model's latency, so the daemons' own cost is what is left), and
the daemons as real processes (``python -m daemon.cli serve``, code mode,
``max_concurrent_runs = 4``). ``--prompts`` prompts, each in its own thread,
are published at once; the time is from the first publish to the last reply
received. Each set-up ``--repeat`` times, the median reported, with the
ratio of the two daemons' throughput to the one's and how the threads were
split between them.

Bounded: every wait has a timeout; the processes are killed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels.client import Message
from channels.nats import NatsChannel
from tests.fakes.fake_openai import FakeOpenAI, Reply, Step
from tests.fakes.nats_server import NatsServer

WAIT = 120.0  # seconds for any one phase
ROOT = Path(__file__).resolve().parents[1]


def config_text(broker: str, model: str) -> str:
    return f"""
[model]
base_url = "{model}"
model = "fake-model"
api_key = "bench-key"
retries = 0

[channels]
url = "{broker}"
nick = "asyncai"
channels = ["#bench"]
takeover_seconds = 6.0

[runtime]
max_concurrent_runs = 4
shutdown_grace = 1.0

[sessions]
db = "asyncai.db"
"""


def prepare(home: Path, broker: str, model: str, key: bytes) -> dict[str, str]:
    """The daemon's directory (config, the shared scope key); its environment."""
    home.mkdir(parents=True)
    (home / "scope.key").write_bytes(key)
    (home / "scope.key").chmod(0o600)
    (home / "asyncai.toml").write_text(config_text(broker, model))
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ATIRC_", "ASYNCAI_"))
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


async def start_daemon(
    home: Path, broker: str, model: str, key: bytes
) -> asyncio.subprocess.Process:
    """One daemon in ``home``; returns once it logged ``daemon.ready``."""
    env = prepare(home, broker, model, key)
    log = (home / "daemon.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon.cli",
        "serve",
        "--config",
        str(home / "asyncai.toml"),
        cwd=home,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    async with asyncio.timeout(WAIT):
        while b"daemon.ready" not in (home / "daemon.log").read_bytes():
            if proc.returncode is not None:
                raise RuntimeError(f"daemon exited: {(home / 'daemon.log').read_text()[-2000:]}")
            await asyncio.sleep(0.1)
    return proc


async def stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 15)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def one_run(daemons: int, prompts: int, delay: float, tmp: Path) -> tuple[float, list[int]]:
    """Seconds from the first publish to the last reply, and the threads each daemon answered."""

    async def slow(body: dict) -> Step:
        await asyncio.sleep(delay)
        return Reply("done")

    key = os.urandom(32)
    async with NatsServer(tmp / "nats") as broker, FakeOpenAI(fallback=slow) as fake:
        procs = [
            await start_daemon(tmp / f"d{i}", broker.url, fake.base_url, key)
            for i in range(daemons)
        ]
        alice = NatsChannel(broker.url, nick="alice")
        try:
            await alice.subscribe("#bench")
            answered: set[str] = set()
            done = asyncio.Event()

            async def read() -> None:
                async for message in alice:
                    if isinstance(message, Message) and message.sender == "asyncai":
                        answered.add(message.reply_to or "")
                        if len(answered) >= prompts:
                            done.set()

            reader = asyncio.create_task(read())
            started = time.perf_counter()
            await asyncio.gather(
                *(alice.publish("#bench", f"question {n}") for n in range(prompts))
            )
            async with asyncio.timeout(WAIT):
                await done.wait()
            seconds = time.perf_counter() - started
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        finally:
            await alice.close()
            for proc in procs:
                await stop(proc)
        split = []
        for i in range(daemons):
            with contextlib.closing(sqlite3.connect(tmp / f"d{i}" / "asyncai.db")) as conn:
                split.append(
                    conn.execute("SELECT count(DISTINCT thread) FROM prompts").fetchone()[0]
                )
        return seconds, split


async def run(args: argparse.Namespace) -> None:
    results: dict[int, list[float]] = {1: [], 2: []}
    splits: list[list[int]] = []
    for r in range(args.repeat):
        for daemons in (1, 2):
            with tempfile.TemporaryDirectory(prefix="asyncai-bench-cluster-") as tmp:
                seconds, split = await one_run(daemons, args.prompts, args.delay, Path(tmp))
            results[daemons].append(seconds)
            if daemons == 2:
                splits.append(split)
            print(
                f"  run {r + 1}: {daemons} daemon(s): {seconds:.2f} s, threads {split}", flush=True
            )
    one, two = (statistics.median(results[n]) for n in (1, 2))
    rate1, rate2 = args.prompts / one, args.prompts / two
    print(
        f"\n{args.prompts} prompts in {args.prompts} threads, model {args.delay * 1000:.0f} ms per "
        f"request, max_concurrent_runs = 4 per daemon; median of {args.repeat} "
        f"({dt.date.today()}, {os.cpu_count()} cores)\n"
    )
    print("| set-up | seconds | prompts/s | vs one daemon |")
    print("|---|---:|---:|---:|")
    print(f"| one daemon | {one:.2f} | {rate1:.1f} | 1.00 |")
    print(f"| two daemons, one broker | {two:.2f} | {rate2:.1f} | {rate2 / rate1:.2f} |")
    shares = ", ".join("/".join(str(n) for n in s) for s in splits)
    print(f"\nthreads per daemon in the two-daemon runs: {shares}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=120)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
