"""Benchmark: does a small local model answer real questions, in code mode and in direct mode?

Twenty questions over fixture data: kcp-style objects (pods, deployments,
events, configmaps, logs) served by the bundled ``asyncai-mcp-kcp`` server
through the fake ``kubectl`` of ``tests/fakes`` (behind a thin filter that
honours ``--namespace``, ``--selector`` and ``--field-selector``, which the
fake ignores), ``http_get`` (``asyncai-mcp-simple``) against a loopback
HTTP server, and ``mcp-server-time`` (the dev extra's). The first fifteen
are the original suite; the last five have other shapes: a join of two
results, a date computation, an answer of "none", a time-zone conversion
and arithmetic with no tool at all. Each question has a checker of the facts its answer must hold
(and names it must not). The daemon's own backend runs every question once
per mode, each in a fresh thread; the table shows, per question and mode,
whether the answer was right, the model rounds, the tool calls (run_code
calls in code mode, MCP calls in direct mode), bytes_in (tool output that
reached the sandbox, or the model in direct mode) and bytes_out (what the
model read back), and the seconds it took.

Run::

    .venv/bin/python bench/small_model.py                  # starts the local model
    .venv/bin/python bench/small_model.py --base-url http://127.0.0.1:8080/v1 --model NAME
    .venv/bin/python bench/small_model.py --modes code --only 1,4 --harness off

Without ``--base-url`` it needs ``asyncai model fetch`` and the ``local`` extra,
and skips (exit 0) when they are missing. It takes minutes: on 2 cores the
1.5B model generates about 16 tokens/s, and the code-mode system prompt (the
catalog) costs a minute to process once. Code mode runs all its questions
before direct mode starts, so llama.cpp's prompt-prefix cache stays warm.
``--json FILE`` keeps every answer and metric for a closer look (written after
every question, so a long run can be read while it goes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import re
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.cli.up import BANNER_QUESTION
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.config import Config, ModelConfig
from daemon.executors import code_mode_limits
from daemon.logging import configure_logging
from daemon.mcp.executor import McpToolExecutor
from daemon.runtime.runs import Prompt, RunRequest

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "fakes"
WS = "root:shop"
# The loopback HTTP server's port, in the URLs of six questions: fixed (a dev server's
# usual one, chosen before any run), so every run asks the very same prompts.
HTTP_PORT = 8000

# ---- fixture data --------------------------------------------------------------------------

# name, namespace, phase, restarts, node, app
PODS = [
    ("frontend-a", "web", "Running", 0, "node-a", "frontend"),
    ("frontend-b", "web", "Running", 1, "node-b", "frontend"),
    ("api-1", "web", "Running", 3, "node-a", "api"),
    ("api-2", "web", "Failed", 14, "node-b", "api"),
    ("ledger-0", "payments", "Running", 0, "node-c", "ledger"),
    ("ledger-1", "payments", "Pending", 0, None, "ledger"),
    ("gateway-1", "payments", "Running", 5, "node-a", "gateway"),
    ("report-28813", "batch", "Succeeded", 0, "node-c", "report"),
    ("report-28814", "batch", "Failed", 2, "node-c", "report"),
    ("cleanup-1", "batch", "Running", 0, "node-a", "cleanup"),
    ("etl-1", "batch", "Pending", 0, None, "etl"),
    ("etl-2", "batch", "Running", 1, "node-b", "etl"),
]
# name, namespace, desired, ready, image
DEPLOYMENTS = [
    ("frontend", "web", 2, 2, "shop/frontend:2.3.1"),
    ("api", "web", 2, 1, "shop/api:1.9.0"),
    ("ledger", "payments", 2, 1, "shop/ledger:4.0.2"),
    ("gateway", "payments", 1, 1, "shop/gateway:0.8.5"),
    ("cleanup", "batch", 1, 1, "shop/cleanup:1.0.0"),
    ("etl", "batch", 2, 1, "shop/etl:3.1.4"),
]
# type, reason, pod, namespace, message
EVENTS = [
    ("Warning", "BackOff", "api-2", "web", "Back-off restarting failed container api"),
    (
        "Warning",
        "FailedScheduling",
        "ledger-1",
        "payments",
        "0/3 nodes are available: 3 Insufficient memory",
    ),
    ("Warning", "BackOff", "report-28814", "batch", "Back-off restarting failed container report"),
    (
        "Warning",
        "FailedScheduling",
        "etl-1",
        "batch",
        "0/3 nodes are available: 3 Insufficient cpu",
    ),
    (
        "Warning",
        "Unhealthy",
        "gateway-1",
        "payments",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
    ),
    ("Warning", "BackOff", "api-2", "web", "Back-off restarting failed container api"),
    ("Normal", "Scheduled", "frontend-a", "web", "Successfully assigned web/frontend-a to node-a"),
    ("Normal", "Pulled", "frontend-b", "web", "Container image already present on machine"),
    ("Normal", "Started", "cleanup-1", "batch", "Started container cleanup"),
]
CONFIGMAPS = [
    (
        "app-settings",
        "web",
        {"LOG_LEVEL": "debug", "FEATURE_FLAGS": "checkout-v2,dark-mode", "MAX_CONNECTIONS": "200"},
    ),
    ("ledger-config", "payments", {"CURRENCY": "EUR", "ROUNDING": "half-even"}),
]
LOGS = """\
2026-11-29T10:00:00Z INFO starting api 1.9.0
2026-11-29T10:00:01Z INFO connected to ledger
2026-11-29T10:00:02Z ERROR payment provider timed out after 30s
2026-11-29T10:00:03Z WARN retrying payment provider (1/3)
2026-11-29T10:00:04Z ERROR payment provider timed out after 30s
2026-11-29T10:00:05Z INFO request served in 12ms
2026-11-29T10:00:06Z ERROR database connection reset by peer
2026-11-29T10:00:07Z WARN slow query (2.4s)
2026-11-29T10:00:08Z INFO request served in 9ms
2026-11-29T10:00:09Z ERROR payment provider timed out after 30s
"""
HTTP_FILES = {
    "/status.json": (
        "application/json",
        json.dumps(
            {
                "service": "checkout",
                "version": "2.7.1",
                "healthy": False,
                "components": [
                    {"name": "db", "status": "up"},
                    {"name": "cache", "status": "down"},
                    {"name": "queue", "status": "up"},
                    {"name": "search", "status": "down"},
                ],
            }
        ),
    ),
    "/inventory.csv": ("text/csv", "item,stock\nbolts,120\nnuts,45\nwashers,8\nscrews,300\n"),
    "/customers.json": (
        "application/json",
        json.dumps(
            [
                {"name": "acme", "country": "DE"},
                {"name": "globex", "country": "US"},
                {"name": "initech", "country": "DE"},
            ]
        ),
    ),
    "/releases.json": (
        "application/json",
        json.dumps(
            {
                "releases": [
                    {"version": "2.6.0", "date": "2026-09-14"},
                    {"version": "2.7.0", "date": "2026-10-30"},
                    {"version": "2.7.1", "date": "2026-11-21"},
                ]
            }
        ),
    ),
    "/orders.json": (
        "application/json",
        json.dumps(
            [
                {"id": "o-1", "customer": "acme", "amount": 120.5},
                {"id": "o-2", "customer": "globex", "amount": 80},
                {"id": "o-3", "customer": "acme", "amount": 42.25},
                {"id": "o-4", "customer": "initech", "amount": 300},
            ]
        ),
    ),
}


def _meta(name: str, namespace: str, **extra: Any) -> dict:
    return {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "100",
        "creationTimestamp": "2026-11-29T09:00:00Z",
        "annotations": {"kcp.io/cluster": "2abc"},
        **extra,
    }


def _list(items: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def write_fixtures(directory: Path) -> None:
    """The fake kubectl's fixture files for the data above."""
    directory.mkdir(parents=True)
    pods = []
    for name, ns, phase, restarts, node, app in PODS:
        spec: dict[str, Any] = {"containers": [{"name": app, "image": f"shop/{app}"}]}
        if node:
            spec["nodeName"] = node
        status: dict[str, Any] = {"phase": phase}
        if phase != "Pending":
            status["containerStatuses"] = [
                {"name": app, "ready": phase == "Running", "restartCount": restarts}
            ]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": _meta(name, ns, labels={"app": app}),
                "spec": spec,
                "status": status,
            }
        )
    deployments = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(name, ns, labels={"app": name}),
            "spec": {
                "replicas": desired,
                "template": {"spec": {"containers": [{"name": name, "image": image}]}},
            },
            "status": {"replicas": desired, "readyReplicas": ready},
        }
        for name, ns, desired, ready, image in DEPLOYMENTS
    ]
    events = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": _meta(f"{pod}.{i}", ns),
            "type": kind,
            "reason": reason,
            "message": message,
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
        }
        for i, (kind, reason, pod, ns, message) in enumerate(EVENTS)
    ]
    configmaps = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, ns), "data": data}
        for name, ns, data in CONFIGMAPS
    ]
    for resource, items in (
        ("pods", pods),
        ("deployments", deployments),
        ("deployments.apps", deployments),
        ("events", events),
        ("configmaps", configmaps),
    ):
        (directory / f"{resource}.json").write_text(json.dumps(_list(items)))
    (directory / "logs.txt").write_text(LOGS)
    for name in ("api-resources.txt", "workspaces.tenancy.kcp.io.json"):
        (directory / name).write_text((FAKES / "kcp_fixtures" / name).read_text())


# The fake kubectl ignores namespaces and selectors; this filter in front of it applies
# them to its JSON output, so a model that passes namespace= gets what kubectl would give.
KUBECTL_FILTER = r"""#!PYTHON
import json, os, subprocess, sys

argv = sys.argv[1:]
done = subprocess.run([sys.executable, os.environ["BENCH_FAKE_KUBECTL"], *argv],
                      capture_output=True, text=True)
sys.stderr.write(done.stderr)
if done.returncode != 0 or not done.stdout.lstrip().startswith("{"):
    sys.stdout.write(done.stdout)
    sys.exit(done.returncode)
obj = json.loads(done.stdout)
opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)

def dig(o, path):
    for part in path.split("."):
        o = o.get(part) if isinstance(o, dict) else None
    return o

def keep(item):
    ns = opts.get("namespace")
    if ns and item.get("metadata", {}).get("namespace") != ns:
        return False
    for cond in filter(None, opts.get("selector", "").split(",")):
        k, _, v = cond.partition("=")
        if (item.get("metadata", {}).get("labels") or {}).get(k) != v:
            return False
    for cond in filter(None, opts.get("field-selector", "").split(",")):
        k, _, v = cond.partition("=")
        if str(dig(item, k)) != v:
            return False
    return True

if "items" in obj:
    obj["items"] = [i for i in obj["items"] if keep(i)]
elif "metadata" in obj and not keep(obj):
    name = obj["metadata"].get("name")
    sys.stderr.write(f'Error from server (NotFound): "{name}" not found\n')
    sys.exit(1)
print(json.dumps(obj, indent=2))
"""


def kubeconfig(server: str) -> str:
    """A kubeconfig (JSON is YAML) whose current context points at ``server``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "root",
            "clusters": [{"name": "kcp", "cluster": {"server": server}}],
            "contexts": [{"name": "root", "context": {"cluster": "kcp", "user": "admin"}}],
            "users": [{"name": "admin", "user": {"token": "t"}}],
        }
    )


# ---- questions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """A prompt, the facts its answer must state, and the ones it must not."""

    key: str
    text: str
    must: tuple[str, ...]  # regexes (case-insensitive), all required
    must_not: tuple[str, ...] = ()  # regexes that make the answer wrong

    def check(self, answer: str) -> bool:
        """Whether ``answer`` states every required fact and none of the wrong ones."""
        return all(re.search(p, answer, re.IGNORECASE) for p in self.must) and not any(
            re.search(p, answer, re.IGNORECASE) for p in self.must_not
        )


def _n(number: str) -> str:
    return rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)"


#: The bundled http_get server, as ``asyncai up`` adds it (this checkout's code).
SIMPLE_SERVER = {
    "command": sys.executable,
    "args": ["-m", "servers.simple"],
    "env": {"PYTHONPATH": str(ROOT)},
    "cwd": str(ROOT),
}


def questions(base_url: str) -> list[Question]:
    """The suite; ``base_url`` is the loopback HTTP server's."""
    ws = f"In kcp workspace {WS}"
    return [
        Question(
            "pods-not-running",
            f"{ws}, which pods are not in phase Running?",
            ("api-2", "ledger-1", "report-28813", "report-28814", "etl-1"),
            (r"frontend-a", r"api-1\b", r"gateway-1", r"cleanup-1", r"etl-2", r"ledger-0"),
        ),
        Question(
            "count-payments",
            f"{ws}, how many pods are in namespace payments?",
            (_n("3") + "|three",),
            (_n("12"),),
        ),
        Question(
            "most-restarts",
            f"{ws}, which pod has the most container restarts, and how many?",
            ("api-2", _n("14")),
        ),
        Question(
            "deploys-not-ready",
            f"{ws}, which deployments have fewer ready replicas than desired?",
            (r"\bapi\b", r"\bledger\b", r"\betl\b"),
            (r"frontend", r"gateway", r"cleanup"),
        ),
        Question(
            "warning-events",
            f"{ws}, how many Warning events are there, and which reason is the most common?",
            (_n("6") + "|six", r"BackOff"),
        ),
        Question(
            "configmap-value",
            f"{ws}, what is LOG_LEVEL in configmap app-settings in namespace web?",
            (r"\bdebug\b",),
        ),
        Question(
            "busiest-node",
            f"{ws}, which node runs the most pods, and how many?",
            (r"node-a", _n("4") + "|four"),
        ),
        Question(
            "failed-namespaces",
            f"{ws}, which namespaces have at least one pod in phase Failed?",
            (r"\bweb\b", r"\bbatch\b"),
            (r"payments",),
        ),
        Question(
            "log-errors",
            f"{ws}, how many ERROR lines are in the logs of pod api-2 in namespace web?",
            (_n("4") + "|four",),
        ),
        Question(
            "deploy-image",
            f"{ws}, which container image does deployment gateway in namespace payments run?",
            (r"shop/gateway:0\.8\.5",),
        ),
        Question(
            "total-restarts",
            f"{ws}, what is the total number of container restarts over all pods?",
            (_n("26"),),
        ),
        Question(
            "status-version",
            f"What version does the service at {base_url}/status.json report, and is it healthy?",
            (r"2\.7\.1", r"not healthy|unhealthy|isn't healthy|is not|false|\bno\b"),
        ),
        Question(
            "components-down",
            f"Which components are down according to {base_url}/status.json?",
            (r"\bcache\b", r"\bsearch\b"),
        ),
        Question(
            "lowest-stock",
            f"Which item has the lowest stock in {base_url}/inventory.csv, and how many are left?",
            (r"washers", _n("8")),
        ),
        Question(
            "customer-total",
            f"What is the total amount of customer acme's orders in {base_url}/orders.json?",
            (r"162\.75",),
        ),
        # ---- five more shapes (issue 16) ----
        Question(  # a join: orders by customer, customers by country
            "country-total",
            f"The orders are in {base_url}/orders.json and the customers' countries in "
            f"{base_url}/customers.json. What is the total amount of the orders of "
            "customers in country DE?",
            (r"462\.75",),
        ),
        Question(  # a date computation
            "release-days",
            f"How many days passed between release 2.6.0 and release 2.7.1, by the dates in "
            f"{base_url}/releases.json?",
            (_n("68"),),
        ),
        Question(  # the answer is "none"
            "payments-failed",
            f"{ws}, which pods in namespace payments are in phase Failed?",
            (r"\bno\b|\bnone\b|nothing|\bzero\b|(?<![\d.])0(?![\d.])|empty",),
            (r"ledger-0", r"ledger-1", r"gateway-1", r"api-2", r"report-28814"),
        ),
        Question(  # mcp-server-time: CET (UTC+1) to JST (UTC+9), no DST from November to March
            "tokyo-time",
            "What time is it in Tokyo (Asia/Tokyo) when it is 09:30 in Berlin (Europe/Berlin)?",
            (r"17:30|5:30 ?pm",),
        ),
        Question(  # arithmetic like the banner's example, no tool needed
            "prime-sum",
            "What is the sum of all prime numbers below 10000?",
            (r"(?<![\d.,])5,?736,?396(?![\d])",),
        ),
    ]


# ---- loopback HTTP server ------------------------------------------------------------------


async def _serve_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await reader.readline()
        while (await reader.readline()).strip():
            pass  # headers
        parts = request.decode("latin-1").split()
        path = parts[1] if len(parts) > 1 else "/"
        content_type, body = HTTP_FILES.get(path, ("text/plain", "not found"))
        status = "200 OK" if path in HTTP_FILES else "404 Not Found"
        data = body.encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# ---- running -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One question in one mode."""

    ok: bool
    rounds: int
    tool_calls: int
    bytes_in: int
    bytes_out: int
    seconds: float
    reply: str
    status: str
    extra: dict = field(default_factory=dict)


@dataclass
class Env:
    """The MCP server entries and the HTTP base URL the questions use."""

    servers: dict[str, dict]
    http_base: str


@contextlib.asynccontextmanager
async def environment(http_port: int = 0):
    """Fixtures, the kubectl filter, a reachable kcp 'server', and the HTTP server.

    The HTTP server listens on ``http_port`` (0: any free port). Its URL is in
    six questions' text, so a port that changes from run to run changes their
    prompts, and with them a small model's generations: a fixed port makes a
    run repeatable.
    """
    with tempfile.TemporaryDirectory(prefix="asyncai-bench-") as tmp:
        root = Path(tmp)
        write_fixtures(root / "fixtures")
        bin_dir = root / "bin"
        bin_dir.mkdir()
        kubectl = bin_dir / "kubectl"
        kubectl.write_text(KUBECTL_FILTER.replace("#!PYTHON", f"#!{sys.executable}", 1))
        kubectl.chmod(0o755)
        listener = socket.socket()  # list_kcps reports a kcp running when its port accepts
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        kcps = root / "kcps"
        kcps.mkdir()
        port = listener.getsockname()[1]
        (kcps / "shop.kubeconfig").write_text(kubeconfig(f"https://127.0.0.1:{port}/clusters/root"))
        http = await asyncio.start_server(_serve_http, "127.0.0.1", http_port)
        http_port = http.sockets[0].getsockname()[1]
        path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
        servers = {
            "kcp": {
                "command": sys.executable,
                "args": ["-m", "servers.kcp", "--readonly"],
                "env": {
                    "PATH": path,
                    "ASYNCAI_KCP_DIR": str(kcps),
                    "FAKE_KUBECTL_FIXTURES": str(root / "fixtures"),
                    "BENCH_FAKE_KUBECTL": str(FAKES / "kubectl"),
                    "PYTHONPATH": str(ROOT),
                },
                "cwd": str(ROOT),
            },
            "simple": SIMPLE_SERVER,
            # the dev extra's mcp-server-time, next to this Python
            "time": {
                "command": str(Path(sys.executable).parent / "mcp-server-time"),
                "args": ["--local-timezone", "UTC"],
            },
        }
        try:
            yield Env(servers, f"http://127.0.0.1:{http_port}")
        finally:
            http.close()
            await http.wait_closed()
            listener.close()


async def run_mode(
    mode: str,
    env: Env,
    model: ModelConfig,
    suite: list[Question],
    report: Callable[[str], None],
    outcomes: dict[str, Outcome] | None = None,
    saved: Callable[[], None] = lambda: None,
) -> dict[str, Outcome]:
    """Every question of ``suite`` once, each in a fresh thread, in ``mode``; each
    outcome goes into ``outcomes`` as it comes, then ``saved`` is called."""
    from daemon.model import OpenAiCompatibleBackend

    inner = McpToolExecutor(env.servers, call_timeout=60.0)
    executor = inner if mode == "direct" else CodeModeToolExecutor(inner, limits_for(model))
    config = dataclasses.replace(model, tool_mode=mode)
    backend = OpenAiCompatibleBackend(config, executor, max_run_seconds=1800.0)
    outcomes = {} if outcomes is None else outcomes
    try:
        for q in suite:
            thread = f"bench-{mode}-{q.key}-{uuid.uuid4().hex[:6]}"
            request = RunRequest(
                run_id=uuid.uuid4().hex,
                channel="#bench",
                thread_id=thread,
                history=[],
                prompts=[Prompt(id=uuid.uuid4().hex, sender="bench", text=q.text)],
            )
            started = time.monotonic()
            result = await backend.run(request)
            m = result.metrics
            outcome = Outcome(
                ok=result.status == "done" and q.check(result.reply),
                rounds=m.rounds,
                tool_calls=m.run_code_calls,
                bytes_in=m.bytes_in,
                bytes_out=m.bytes_out,
                seconds=time.monotonic() - started,
                reply=result.reply,
                status=result.status,
                extra={
                    **m.extra(),
                    "prompt_tokens": m.prompt_tokens,
                    "completion_tokens": m.completion_tokens,
                    "code": _tool_inputs(result.records),
                },
            )
            outcomes[q.key] = outcome
            saved()
            mark = "ok  " if outcome.ok else "FAIL"
            report(
                f"[{mode:6}] {mark} {q.key:18} rounds={m.rounds} calls={m.run_code_calls} "
                f"{outcome.seconds:6.1f}s  {_short(result.reply)}"
            )
    finally:
        await backend.aclose()
        await executor.aclose()
    return outcomes


#: The startup phase: as ``asyncai up`` runs (the bundled http_get server only, code
#: mode, the configured temperature, the prompt cache warmed before "asyncai is up"),
#: the seconds to each reply. Arithmetic, so that the time is the model's and the
#: sandbox's, not a tool's.
STARTUP = (
    ("first reply", "What is 12 times 34?", r"(?<![\d.,])408(?![\d])"),
    ("the banner's example", BANNER_QUESTION, r"(?<![\d.,])76,?127(?![\d])"),
    ("a later reply", "What is 2 to the power of 20?", r"(?<![\d.,])1,?048,?576(?![\d])"),
)


async def startup(
    model: ModelConfig, report: Callable[[str], None]
) -> list[tuple[str, float, bool | None, str]]:
    """The startup phase (:data:`STARTUP`): rows of (what, seconds, right, reply)."""
    from daemon.model import OpenAiCompatibleBackend

    inner = McpToolExecutor({"simple": SIMPLE_SERVER})
    executor = CodeModeToolExecutor(inner, limits_for(model))
    config = dataclasses.replace(model, tool_mode="code", temperature=None)
    backend = OpenAiCompatibleBackend(config, executor, max_run_seconds=1800.0)
    rows: list[tuple[str, float, bool | None, str]] = []
    try:
        started = time.monotonic()
        await backend.warm_up()
        rows.append(
            ("prompt-cache warm-up (before `asyncai is up`)", time.monotonic() - started, None, "")
        )
        for label, text, pattern in STARTUP:
            request = RunRequest(
                run_id=uuid.uuid4().hex,
                channel="#bench",
                thread_id=f"bench-startup-{uuid.uuid4().hex[:6]}",
                history=[],
                prompts=[Prompt(id=uuid.uuid4().hex, sender="bench", text=text)],
            )
            started = time.monotonic()
            result = await backend.run(request)
            seconds = time.monotonic() - started
            ok = result.status == "done" and re.search(pattern, result.reply) is not None
            rows.append((f"{label}: {text}", seconds, ok, result.reply))
            report(
                f"[startup] {'ok  ' if ok else 'FAIL'} {label:22} {seconds:6.1f}s  "
                + _short(result.reply)
            )
    finally:
        await backend.aclose()
        await executor.aclose()
    return rows


def startup_table(rows: list[tuple[str, float, bool | None, str]]) -> str:
    """The startup phase as a Markdown table."""
    lines = ["| step | seconds | right |", "|---|---|---|"]
    for what, seconds, ok, _ in rows:
        right = "–" if ok is None else ("yes" if ok else "**no**")
        lines.append(f"| {what} | {seconds:.1f} | {right} |")
    return "\n".join(lines)


def limits_for(model: ModelConfig) -> CodeModeLimits:
    """Code mode's limits as the daemon sets them for ``model`` (the harness's own
    catalog budget when it is on)."""
    return code_mode_limits(Config(model=model))


def _tool_inputs(records: list) -> list:
    """The tool calls and results of a run, in order, for the JSON report."""
    out = []
    for r in records:
        content = r.message.get("content") if isinstance(r.message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                out.append({"call": block.get("name"), "input": block.get("input")})
            elif block.get("type") == "tool_result":
                out.append({"result": str(block.get("content"))[:1500]})
    return out


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def table(suite: list[Question], results: dict[str, dict[str, Outcome]]) -> str:
    """The Markdown table: per question, each mode's outcome side by side, then totals."""
    modes = list(results)
    head = "| question | " + " | ".join(
        f"{m}: ok | rounds | calls | bytes_in | bytes_out | s" for m in modes
    )
    lines = [head + " |", "|---|" + "---|---|---|---|---|---|" * len(modes)]
    for q in suite:
        cells = []
        for m in modes:
            o = results[m].get(q.key)
            if o is None:
                cells.append("– | – | – | – | – | –")
                continue
            cells.append(
                f"{'yes' if o.ok else '**no**'} | {o.rounds} | {o.tool_calls} | "
                f"{o.bytes_in:,} | {o.bytes_out:,} | {o.seconds:.0f}"
            )
        lines.append(f"| {q.key} | " + " | ".join(cells) + " |")
    totals = []
    for m in modes:
        done = list(results[m].values())
        ok = sum(o.ok for o in done)
        rate = 100 * ok / len(done) if done else 0.0
        totals.append(
            f"**{ok}/{len(done)} ({rate:.0f}%)** | {sum(o.rounds for o in done)} | "
            f"{sum(o.tool_calls for o in done)} | {sum(o.bytes_in for o in done):,} | "
            f"{sum(o.bytes_out for o in done):,} | {sum(o.seconds for o in done):.0f}"
        )
    lines.append("| **total** | " + " | ".join(totals) + " |")
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    """Parse flags, start what is needed, run the modes, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base-url", help="an OpenAI-compatible endpoint (default: start the local model)"
    )
    parser.add_argument("--model", help="model name at --base-url")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or "local")
    parser.add_argument("--modes", default="code,direct", help="comma-separated: code, direct")
    parser.add_argument("--only", help="comma-separated question numbers (1-based) or keys")
    parser.add_argument(
        "--harness",
        choices=("auto", "on", "off"),
        default="auto",
        help="the small-model harness (auto: on for the local model)",
    )
    parser.add_argument("--json", type=Path, help="write every answer and metric here")
    parser.add_argument("--python", default=sys.executable, help="Python with llama-cpp-python")
    parser.add_argument("--log", type=Path, help="the daemon's verbose NDJSON log goes here")
    parser.add_argument(
        "--answer-samples",
        type=int,
        choices=(1, 2, 3),
        help="[model] answer_samples: the harness's vote (1: off; default: the config's)",
    )
    parser.add_argument(
        "--no-startup",
        action="store_true",
        help="skip the startup phase (first reply after the warm-up, the banner's example)",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=HTTP_PORT,
        help=f"the loopback HTTP server's port, in six questions' text (default {HTTP_PORT}; "
        "0: any free port)",
    )
    args = parser.parse_args(argv)
    log_file = args.log.open("a") if args.log else None
    configure_logging(bool(log_file), log_file)

    async with contextlib.AsyncExitStack() as stack:
        base_url, model_name = args.base_url, args.model
        server = None
        server_seconds = None
        if base_url is None:
            from daemon.local_model import LocalModelError, LocalModelServer

            try:
                server = LocalModelServer.default(python=args.python)
                print("starting the local model…", file=sys.stderr)
                loading = time.monotonic()
                await stack.enter_async_context(server)
                server_seconds = time.monotonic() - loading
            except LocalModelError as exc:
                print(f"bench/small_model.py: skipped: {exc}", file=sys.stderr)
                return 0
            base_url, model_name = server.base_url, server.model
        if not model_name:
            parser.error("--model is required with --base-url")
        try:
            env = await stack.enter_async_context(environment(args.http_port))
        except OSError as exc:
            parser.error(f"--http-port {args.http_port}: {exc.strerror}; pass another, or 0")
        suite = questions(env.http_base)
        if args.only:
            wanted = set(args.only.split(","))
            suite = [q for i, q in enumerate(suite, 1) if str(i) in wanted or q.key in wanted]
        model = ModelConfig(
            base_url=base_url,
            api_key=args.api_key,
            model=model_name,
            temperature=0.0,
            request_timeout=900.0,
            retries=0,
        )
        if args.harness != "auto":
            model.harness = args.harness == "on"
        if args.answer_samples is not None:
            model.answer_samples = args.answer_samples
        started = datetime.datetime.now(datetime.UTC)
        results: dict[str, dict[str, Outcome]] = {}

        def save() -> None:  # after every question, so a long run can be read as it goes
            if args.json:
                args.json.write_text(
                    json.dumps(
                        {
                            "date": started.isoformat(),
                            "model": model_name,
                            "harness": args.harness,
                            "answer_samples": model.answer_samples,
                            "results": {
                                m: {k: o.__dict__ for k, o in r.items()} for m, r in results.items()
                            },
                            "startup": [
                                {"step": w, "seconds": t, "ok": ok, "reply": reply}
                                for w, t, ok, reply in boot
                            ],
                            "memory": memory,
                        },
                        indent=2,
                        default=str,
                    )
                )

        def rss() -> str:
            size = server.rss() if server is not None else None
            return "unknown (not started here)" if size is None else f"{size / 2**30:.2f} GiB"

        memory = [("start", rss())]
        say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        boot: list[tuple[str, float, bool | None, str]] = []
        if server_seconds is not None:
            boot.append(("model server start (load)", server_seconds, None, ""))
        if not args.no_startup:
            boot += await startup(model, say)
            memory.append(("after the startup phase", rss()))
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            results[mode] = {}
            await run_mode(
                mode,
                env,
                model,
                suite,
                lambda s: print(s, file=sys.stderr, flush=True),
                results[mode],
                save,
            )
            memory.append((f"after {mode} mode", rss()))
        print(
            f"\nSmall-model benchmark, {started:%Y-%m-%d %H:%M} UTC, model {model_name} at "
            f"{base_url}, harness {args.harness}, answer_samples {model.answer_samples}, "
            f"{len(suite)} questions\n"
        )
        if results:
            print(table(suite, results))
        if boot:
            print("\nStartup, as `asyncai up` runs (code mode, the bundled http_get only):\n")
            print(startup_table(boot))
        print("\nThe model server's resident memory: " + ", ".join(f"{w} {m}" for w, m in memory))
        save()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
