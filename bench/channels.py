"""Benchmark: pub→sub through the atirc hub, beside a bare websockets server doing the same work,
and the Channel interface on the hub beside the same interface on NATS JetStream.

Run: ``.venv/bin/python bench/channels.py [--messages N] [--idle N] [--no-nats]``

Both servers run as their own processes on loopback (uvloop when installed);
the clients are raw protocol clients in this process, the same code for
both, so the difference is what the hub adds: validation, the SQLite write
(WAL, one writer, batched), ids, outboxes and per-connection limits. The bare
server parses each publish, gives it a counter id, sends it to every
subscriber and acks it: no storage, no checks, no queues.

Measured:

- pipelined: one publisher keeps up to ``--window`` publishes unacked, one
  subscriber receives; msgs/s over the whole run, latency publish→receive.
- serial: publish one, wait until the subscriber has it, repeat; latency.
- each of those ``--repeat`` times, reporting the median.
- the hub's memory (RSS) before and after ``--idle`` idle subscribers connect
  and subscribe, and per subscriber.
- the ``Channel`` interface (what the daemon and ``atirc`` use): the same
  pipelined and serial runs with a :class:`WebSocketChannel` on the hub and a
  :class:`NatsChannel` on a real ``nats-server -js`` (its own process, file
  storage), publish → deliver latency and msgs/s, in one table with the ratio.
  More rows for other set-ups (several daemons on one broker) go in
  ``CHANNEL_ROWS``' table the same way.
- with NATS, the two-daemon throughput against one daemon (``bench/cluster.py``:
  a scripted model at 200 ms per request, 120 prompts in 120 threads;
  ``--no-cluster`` skips it).

Bounded: every phase runs under a timeout, counts are fixed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels import Channel, NatsChannel, WebSocketChannel
from tests.fakes.nats_server import NatsServer

ATIRC = Path(sys.executable).with_name("atirc")
PHASE_TIMEOUT = 120.0  # seconds per phase: a stuck phase fails instead of hanging


def _loop_factory():
    try:
        import uvloop  # optional: absent on Windows

        return uvloop.new_event_loop
    except ImportError:
        return None


# -- the bare server ------------------------------------------------------------------------


async def bare_server() -> None:
    """Publish/subscribe with the hub's frames, no storage or checks (the baseline)."""
    subscribers: dict[str, set[ServerConnection]] = {}
    counter = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal counter
        nick = "?"
        try:
            async for raw in ws:
                frame = json.loads(raw)
                kind = frame["type"]
                if kind == "hello":
                    nick = frame["nick"]
                    await ws.send(json.dumps({"type": "welcome", "nick": nick}))
                elif kind == "subscribe":
                    subscribers.setdefault(frame["channel"], set()).add(ws)
                    reply = {"type": "subscribed", "channel": frame["channel"]}
                    await ws.send(json.dumps(reply | {"head": None, "oldest": None}))
                elif kind == "publish":
                    counter += 1
                    message_id = f"{counter:026d}"
                    message = json.dumps(
                        {
                            "type": "message",
                            "channel": frame["channel"],
                            "id": message_id,
                            "thread": frame.get("thread") or message_id,
                            "reply_to": frame.get("reply_to"),
                            "from": nick,
                            "text": frame["text"],
                            "ts": "",
                        },
                        ensure_ascii=False,
                    )
                    for sub in list(subscribers.get(frame["channel"], ())):
                        await sub.send(message)
                    ack = {"type": "ack", "client_id": frame["client_id"], "id": message_id}
                    await ws.send(json.dumps(ack | {"thread": message_id}))
        finally:
            for subs in subscribers.values():
                subs.discard(ws)

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"bare server listening on ws://127.0.0.1:{port}/", flush=True)
        await asyncio.Event().wait()


# -- clients --------------------------------------------------------------------------------


async def _client(url: str, nick: str) -> ClientConnection:
    ws = await connect(url, compression=None, max_size=None)
    await ws.send(json.dumps({"type": "hello", "nick": nick}))
    assert json.loads(await ws.recv())["type"] == "welcome"
    return ws


async def _subscribe(ws: ClientConnection, channel: str) -> None:
    await ws.send(json.dumps({"type": "subscribe", "channel": channel}))
    while json.loads(await ws.recv())["type"] != "subscribed":
        pass


def _publish_frame(run: str, seq: int, payload: str) -> str:
    # client_ids unique per run: the hub would (rightly) deduplicate a repeated one
    frame = {"type": "publish", "channel": "#bench", "text": f"{seq} {payload}"}
    return json.dumps(frame | {"client_id": f"{run}-{seq}"})


async def pipelined(url: str, count: int, window: int, size: int) -> dict[str, float]:
    """Msgs/s and latency with up to ``window`` publishes unacked."""
    sub = await _client(url, "sub")
    pub = await _client(url, "pub")
    await _subscribe(sub, "#bench")
    payload = "x" * size
    run = uuid.uuid4().hex
    sent: dict[int, float] = {}
    latencies: list[float] = []
    slots = asyncio.Semaphore(window)

    async def receive() -> float:
        while len(latencies) < count:
            frame = json.loads(await sub.recv())
            if frame["type"] == "message":
                seq = int(frame["text"].split(" ", 1)[0])
                latencies.append(time.perf_counter() - sent[seq])
        return time.perf_counter()

    async def acks() -> None:
        got = 0
        while got < count:
            if json.loads(await pub.recv())["type"] == "ack":
                got += 1
                slots.release()

    async with asyncio.timeout(PHASE_TIMEOUT), asyncio.TaskGroup() as tg:
        receiving = tg.create_task(receive())
        tg.create_task(acks())
        start = time.perf_counter()
        for seq in range(count):
            await slots.acquire()
            sent[seq] = time.perf_counter()
            await pub.send(_publish_frame(run, seq, payload))
    elapsed = receiving.result() - start
    await sub.close()
    await pub.close()
    return {"rate": count / elapsed, **_percentiles(latencies)}


async def serial(url: str, count: int, size: int) -> dict[str, float]:
    """Latency of one publish at a time (publish, wait for the subscriber, repeat)."""
    sub = await _client(url, "sub2")
    pub = await _client(url, "pub2")
    await _subscribe(sub, "#bench")
    payload = "x" * size
    run = uuid.uuid4().hex
    latencies = []
    async with asyncio.timeout(PHASE_TIMEOUT):
        for seq in range(count):
            start = time.perf_counter()
            await pub.send(_publish_frame(run, seq, payload))
            while json.loads(await sub.recv())["type"] != "message":
                pass
            latencies.append(time.perf_counter() - start)
            while json.loads(await pub.recv())["type"] != "ack":
                pass
    await sub.close()
    await pub.close()
    return _percentiles(latencies)


def _percentiles(latencies: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(latencies, n=100)
    return {"p50": cuts[49] * 1000, "p99": cuts[98] * 1000}


def _median(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each measure's median over the runs (the machine is shared: single runs are noisy)."""
    return {
        phase: {key: statistics.median(run[phase][key] for run in runs) for key in runs[0][phase]}
        for phase in runs[0]
    }


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def idle_memory(url: str, pid: int, count: int) -> tuple[int, int]:
    """The hub's RSS (KiB) before and after ``count`` idle subscribers."""
    before = _rss_kib(pid)
    connections: list[ClientConnection] = []
    try:
        async with asyncio.timeout(PHASE_TIMEOUT):
            for start in range(0, count, 50):
                batch = await asyncio.gather(
                    *(_client(url, f"idle{i}") for i in range(start, min(count, start + 50)))
                )
                await asyncio.gather(*(_subscribe(ws, "#idle") for ws in batch))
                connections.extend(batch)
        await asyncio.sleep(0.5)  # let the hub settle before reading its RSS
        after = _rss_kib(pid)
    finally:
        await asyncio.gather(*(ws.close() for ws in connections), return_exceptions=True)
    return before, after


# -- the Channel interface: hub and NATS ------------------------------------------------------


async def channel_pipelined(make, count: int, window: int, size: int) -> dict[str, float]:
    """Msgs/s and publish→deliver latency with up to ``window`` publishes awaiting their ack."""
    sub: Channel = await make("sub")
    pub: Channel = await make("pub")
    channel = f"#bench-{uuid.uuid4().hex[:8]}"
    await sub.subscribe(channel)
    payload = "x" * size
    sent: dict[int, float] = {}
    latencies: list[float] = []
    slots = asyncio.Semaphore(window)

    async def receive() -> float:
        while len(latencies) < count:
            message = await sub.receive()
            seq = int(message.text.split(" ", 1)[0])
            latencies.append(time.perf_counter() - sent[seq])
        return time.perf_counter()

    async def publish(seq: int) -> None:
        try:
            await pub.publish(channel, f"{seq} {payload}")
        finally:
            slots.release()

    async with asyncio.timeout(PHASE_TIMEOUT), asyncio.TaskGroup() as tg:
        receiving = tg.create_task(receive())
        start = time.perf_counter()
        for seq in range(count):
            await slots.acquire()
            sent[seq] = time.perf_counter()
            tg.create_task(publish(seq))
    elapsed = receiving.result() - start
    await sub.close()
    await pub.close()
    return {"rate": count / elapsed, **_percentiles(latencies)}


async def channel_serial(make, count: int, size: int) -> dict[str, float]:
    """Publish → deliver latency of one publish at a time."""
    sub: Channel = await make("sub2")
    pub: Channel = await make("pub2")
    channel = f"#bench-{uuid.uuid4().hex[:8]}"
    await sub.subscribe(channel)
    payload = "x" * size
    latencies = []
    async with asyncio.timeout(PHASE_TIMEOUT):
        for seq in range(count):
            start = time.perf_counter()
            publishing = asyncio.create_task(pub.publish(channel, f"{seq} {payload}"))
            await sub.receive()
            latencies.append(time.perf_counter() - start)
            await publishing
    await sub.close()
    await pub.close()
    return _percentiles(latencies)


async def channel_runs(make, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    runs = []
    for _ in range(args.repeat):
        runs.append(
            {
                "pipelined": await channel_pipelined(make, args.messages, args.window, args.size),
                "serial": await channel_serial(make, args.serial, args.size),
            }
        )
    return _median(runs)


async def channel_results(args: argparse.Namespace, tmp: Path) -> dict[str, dict]:
    """Hub and NATS through the Channel interface, each server its own process."""
    results: dict[str, dict] = {}
    async with _server(*_hub_argv(tmp / "channel.db")) as (url, _pid):

        async def hub_client(nick: str) -> Channel:
            client = WebSocketChannel(url, nick=nick, max_in_flight=args.window)
            await client.connect()
            return client

        results["hub"] = await channel_runs(hub_client, args)
    if args.nats:
        async with NatsServer(tmp / "nats") as server:

            async def nats_client(nick: str) -> Channel:
                client = NatsChannel(server.url, nick=nick)
                await client.connect()
                return client

            results["nats"] = await channel_runs(nats_client, args)
    return results


CHANNEL_ROWS = [
    ("pipelined msgs/s", "pipelined", "rate", "{:,.0f}"),
    ("pipelined p50 ms", "pipelined", "p50", "{:.2f}"),
    ("pipelined p99 ms", "pipelined", "p99", "{:.2f}"),
    ("serial p50 ms", "serial", "p50", "{:.2f}"),
    ("serial p99 ms", "serial", "p99", "{:.2f}"),
]


def print_channel_table(results: dict[str, dict]) -> None:
    """Hub beside NATS through the Channel interface, with the ratio NATS / hub."""
    hub, nats = results["hub"], results.get("nats")
    print("\nThe Channel interface: WebSocketChannel on the hub, NatsChannel on nats-server -js\n")
    print("| measure | hub | NATS JetStream | NATS / hub |")
    print("|---|---:|---:|---:|")
    for label, phase, key, fmt in CHANNEL_ROWS:
        h = hub[phase][key]
        if nats is None:
            print(f"| {label} | {fmt.format(h)} | – | – |")
            continue
        n = nats[phase][key]
        print(f"| {label} | {fmt.format(h)} | {fmt.format(n)} | {n / h:.2f} |")


# -- the servers as processes ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def _server(*argv: str):
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            line = (await proc.stdout.readline()).decode()
        url = line.strip().rsplit(" ", 1)[-1]
        if not url.startswith("ws://"):
            raise RuntimeError(f"server did not start: {line!r}")
        yield url, proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _hub_argv(db: Path) -> list[str]:
    # The benchmark publishes far faster than people do: lift the per-connection rate.
    return [
        str(ATIRC), "hub", "--listen", "127.0.0.1:0", "--db", str(db),
        "--rate", "1000000", "--burst", "1000000", "--queue-size", "100000",
    ]  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    bare_argv = [sys.executable, __file__, "--bare-server"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in (("hub", _hub_argv(Path(tmp) / "bench.db")), ("bare", bare_argv)):
            async with _server(*argv) as (url, _pid):
                runs = []
                for _ in range(args.repeat):
                    runs.append(
                        {
                            "pipelined": await pipelined(
                                url, args.messages, args.window, args.size
                            ),
                            "serial": await serial(url, args.serial, args.size),
                        }
                    )
                results[name] = _median(runs)
        async with _server(*_hub_argv(Path(tmp) / "idle.db")) as (url, pid):
            before, after = await idle_memory(url, pid, args.idle)
        channels = await channel_results(args, Path(tmp))

    hub, bare = results["hub"], results["bare"]
    today = dt.date.today().isoformat()
    print(
        f"\natirc hub vs bare websockets server, loopback, {today} "
        f"({os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"{args.messages} msgs of {args.size} B, window {args.window}; serial {args.serial}; "
        f"median of {args.repeat} runs; load average {os.getloadavg()[0]:.1f})\n"
    )
    print("| measure | hub | bare websockets | hub / bare |")
    print("|---|---:|---:|---:|")
    rows = [
        ("pipelined msgs/s", hub["pipelined"]["rate"], bare["pipelined"]["rate"], "{:,.0f}"),
        ("pipelined p50 ms", hub["pipelined"]["p50"], bare["pipelined"]["p50"], "{:.2f}"),
        ("pipelined p99 ms", hub["pipelined"]["p99"], bare["pipelined"]["p99"], "{:.2f}"),
        ("serial p50 ms", hub["serial"]["p50"], bare["serial"]["p50"], "{:.2f}"),
        ("serial p99 ms", hub["serial"]["p99"], bare["serial"]["p99"], "{:.2f}"),
    ]
    for label, h, b, fmt in rows:
        print(f"| {label} | {fmt.format(h)} | {fmt.format(b)} | {h / b:.2f} |")
    delta = after - before
    print(
        f"\nhub RSS with {args.idle} idle subscribers: {before / 1024:.1f} MiB → "
        f"{after / 1024:.1f} MiB (+{delta / 1024:.1f} MiB, {delta / args.idle:.1f} KiB each)"
    )
    print_channel_table(channels)
    if args.nats and args.cluster:
        from bench.cluster import run as cluster_run

        print("\nSeveral daemons on one broker (bench/cluster.py):")
        await cluster_run(argparse.Namespace(prompts=120, delay=0.2, repeat=args.repeat))


def main() -> None:
    """Parse the options and run the benchmark (or the bare server)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--serial", type=int, default=500)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--size", type=int, default=200, help="text bytes per message")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measure (median)")
    parser.add_argument(
        "--no-nats", dest="nats", action="store_false", help="skip NATS (no nats-server)"
    )
    parser.add_argument(
        "--no-cluster",
        dest="cluster",
        action="store_false",
        help="skip the two-daemon throughput (bench/cluster.py)",
    )
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(bare_server() if args.bare_server else run(args))


if __name__ == "__main__":
    main()
