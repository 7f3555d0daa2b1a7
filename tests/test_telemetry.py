"""Traces and metrics of a real daemon (issue 30): a hub, the store, the MCP test server over
stdio, a Monty pool and a scripted model, with a small OTLP/HTTP receiver on loopback (written
here: it decodes the JSON export) and ``/metrics`` scraped over HTTP on ``metrics_listen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.hub import Hub
from daemon.app import Daemon
from daemon.config import load_config
from daemon.errors import ConfigError
from daemon.logging import redact
from daemon.runtime import RunTimeline
from daemon.runtime.timing import SPLIT_PARTS
from daemon.telemetry.export import OtlpExporter, parse_headers
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import Person, run_of, settled, until, write_config
from tests.test_web_daemon import web_config

WAIT = 20.0


class OtlpReceiver:
    """An OTLP/HTTP collector on loopback: keeps each ``POST /v1/traces`` body, decoded."""

    def __init__(self) -> None:
        self.exports: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.arrived = asyncio.Event()
        self._server: asyncio.Server | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> OtlpReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:  # keep-alive: the exporter posts every trace on one connection
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                request_line, *lines = head.split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in lines if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.paths.append(request_line.split()[1])
                self.headers.append(headers)
                assert headers["content-type"] == "application/json"
                self.exports.append(json.loads(body))
                self.arrived.set()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                await writer.drain()
        writer.close()

    def spans(self) -> list[dict[str, Any]]:
        """Every span received, from every export."""
        return [
            span
            for export in self.exports
            for resource in export["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes as plain values."""
    out = {}
    for a in span["attributes"]:
        ((kind, value),) = a["value"].items()
        out[a["key"]] = int(value) if kind == "intValue" else value
    return out


async def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    """GET ``path`` on 127.0.0.1:``port``; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(WAIT):
        raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of Prometheus' text format (None: not there); labels in
    any order."""
    for line in text.splitlines():
        found, _, value = line.rpartition(" ")
        metric, _, rest = found.partition("{")
        if metric != name:
            continue
        pairs = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if p)
        if {k: v.strip('"') for k, v in pairs.items()} == labels:
            return float(value)
    return None


@pytest.fixture(scope="module")
async def env(tmp_path_factory) -> AsyncIterator[tuple[Daemon, FakeOpenAI, Person, OtlpReceiver]]:
    """A daemon exporting to a receiver and serving /metrics on a port of its own."""
    tmp = tmp_path_factory.mktemp("telemetry")
    async with (
        Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub,
        FakeOpenAI() as fake,
        OtlpReceiver() as receiver,
    ):
        path = write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        path.write_text(
            path.read_text()
            + f'\n[telemetry]\notlp_endpoint = "{receiver.endpoint}"\n'
            + 'metrics_listen = "127.0.0.1:0"\n'
        )
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Person(hub.url)
        try:
            await alice.start()
            yield daemon, fake, alice, receiver
        finally:
            await alice.close()
            await daemon.aclose()


GATHER = (
    "a, b, c = await asyncio.gather(echo(text='one'), echo(text='two'), echo(text='three'))\n"
    "[a, b, c]"
)


async def test_a_gather_of_three_calls_is_three_spans_under_its_run_code(env) -> None:
    """One trace per run: ``run`` (channel, thread, sender, prompt id) over the model's
    requests (model, tokens) and the ``run_code`` span (snippet size, outcome, the
    snippet), under which the gather's three calls are three spans (server, tool,
    mutating, outcome, bytes), all within the run's time."""
    daemon, fake, alice, receiver = env
    fake.add(ToolCalls(("run_code", {"code": GATHER})), Reply("three echoes"))
    mid, reply = await alice.ask("echo three things")
    assert reply.text == "three echoes"
    await settled(daemon, mid)
    run_id = await run_of(daemon, mid)
    assert daemon.telemetry.exporter is not None
    async with asyncio.timeout(WAIT):
        await daemon.telemetry.exporter.flush()
    assert receiver.paths
    assert set(receiver.paths) == {"/v1/traces"}
    spans = [s for s in receiver.spans() if attrs(s).get("asyncai.run_id") == run_id]
    assert len(spans) == 1  # only the run span carries the run id
    (run,) = spans
    tree = [s for s in receiver.spans() if s["traceId"] == run["traceId"]]
    children = [s for s in tree if s.get("parentSpanId") == run["spanId"]]
    assert sorted(s["name"] for s in children) == ["model.request", "model.request", "run_code"]
    run_attrs = attrs(run)
    assert run_attrs["asyncai.channel"] == "#ops"
    assert run_attrs["asyncai.thread"] == mid
    assert run_attrs["asyncai.sender"] == "alice"
    assert run_attrs["asyncai.prompt_id"] == mid
    assert run_attrs["asyncai.status"] == "done"
    (code,) = [s for s in children if s["name"] == "run_code"]
    code_attrs = attrs(code)
    assert code_attrs["asyncai.snippet_chars"] == len(GATHER)
    assert code_attrs["asyncai.snippet"] == GATHER
    assert code_attrs["asyncai.outcome"] == "ok"
    calls = [s for s in tree if s.get("parentSpanId") == code["spanId"]]
    assert [s["name"] for s in calls] == ["tool_call test.echo"] * 3
    for call in calls:
        a = attrs(call)
        assert (a["asyncai.server"], a["asyncai.tool"]) == ("test", "echo")
        assert a["asyncai.mutating"] is False
        assert a["asyncai.outcome"] == "ok"
        assert a["asyncai.bytes"] > 0
        assert int(code["startTimeUnixNano"]) <= int(call["startTimeUnixNano"])
        assert int(call["endTimeUnixNano"]) <= int(code["endTimeUnixNano"])
    model = [attrs(s) for s in children if s["name"] == "model.request"]
    assert all(m["gen_ai.request.model"] == "fake-model" for m in model)
    assert all(m["gen_ai.usage.input_tokens"] > 0 for m in model)


async def test_a_run_paused_for_approval_is_one_trace_with_its_wait_between_its_legs(
    env, tmp_path
) -> None:
    """A mutating call waits for !approve: nothing is exported while the run is paused;
    once it ends, one trace holds both legs under one ``run`` span: the first run_code
    (outcome ``paused``) with the read-only call, the ``approval.wait`` (approved, by
    alice), and the resumed run_code with the approved call under it."""
    daemon, fake, alice, receiver = env
    target = tmp_path / "approved.txt"
    code = f"a = await echo(text='x')\nb = await append_line(path={str(target)!r}, line='y')\nb"
    fake.add(ToolCalls(("run_code", {"code": code})), Reply("appended"))
    mid, asked = await alice.ask("append after an echo")
    rid = asked.text.splitlines()[-2].split()[1]
    assert daemon.telemetry.exporter is not None
    async with asyncio.timeout(WAIT):
        await daemon.telemetry.exporter.flush()
    traces_before = len(receiver.exports)
    _, reply = await alice.ask(f"!approve {rid}", thread=mid)
    assert reply.text == "appended"
    await settled(daemon, mid)
    run_id = await run_of(daemon, mid)
    async with asyncio.timeout(WAIT):
        await daemon.telemetry.exporter.flush()
    assert len(receiver.exports) == traces_before + 1  # the paused leg was not exported alone
    (run,) = [s for s in receiver.spans() if attrs(s).get("asyncai.run_id") == run_id]
    tree = [s for s in receiver.spans() if s["traceId"] == run["traceId"]]
    children = [s for s in tree if s.get("parentSpanId") == run["spanId"]]
    names = sorted(s["name"] for s in children)
    assert names == ["approval.wait", "model.request", "model.request", "run_code", "run_code"]
    (wait,) = [attrs(s) for s in children if s["name"] == "approval.wait"]
    assert wait["asyncai.approved"] is True
    assert wait["asyncai.decided_by"] == "alice"
    first, resumed = sorted(
        (s for s in children if s["name"] == "run_code"), key=lambda s: int(s["startTimeUnixNano"])
    )
    assert attrs(first)["asyncai.outcome"] == "paused"
    assert attrs(resumed)["asyncai.resumed"] is True
    under_first = [s["name"] for s in tree if s.get("parentSpanId") == first["spanId"]]
    under_resumed = [s["name"] for s in tree if s.get("parentSpanId") == resumed["spanId"]]
    assert under_first == ["tool_call test.echo"]
    assert under_resumed == ["tool_call test.append_line"]
    assert attrs(run)["asyncai.status"] == "done"
    assert int(run["startTimeUnixNano"]) <= int(first["startTimeUnixNano"])


async def test_metrics_are_scraped_without_a_session_and_agree_with_the_runs(env) -> None:
    """``/metrics`` on metrics_listen: runs by status, the run's duration, tokens, nested
    calls by server, tool and outcome with their latency, and the live gauges."""
    daemon, fake, alice, _ = env
    assert daemon.telemetry.server is not None
    assert daemon.telemetry.server.port
    port = daemon.telemetry.server.port
    _, before = await scrape(port)
    calls_before = (
        sample(before, "asyncai_nested_calls_total", server="test", tool="echo", outcome="ok") or 0
    )
    done_before = sample(before, "asyncai_runs_total", status="done") or 0
    parts_before = {
        part: sample(before, "asyncai_run_part_seconds_total", part=part) or 0.0
        for part in SPLIT_PARTS[1:]
    }
    fake.add(ToolCalls(("run_code", {"code": GATHER})), Reply("again"))
    mid, _ = await alice.ask("once more")
    await settled(daemon, mid)
    # the run leaves the runtime's count a moment after its prompts are stored done
    assert daemon.runtime is not None
    await until(lambda: daemon.runtime.counts().active_runs == 0, "the run ended")
    status, text = await scrape(port)
    assert status == 200
    assert sample(text, "asyncai_runs_total", status="done") == done_before + 1
    # the run's time split (issue 31), from the same timeline as its row's extra.split
    [prompt] = await daemon.store.queries.get_prompts([mid])
    _, metrics, _ = await daemon.store.queries.run_metrics(prompt.run_id)
    for part in SPLIT_PARTS[1:]:
        after = sample(text, "asyncai_run_part_seconds_total", part=part) or 0.0
        added = after - parts_before[part]
        assert abs(added - metrics.split[part]) < 0.05, part
    assert metrics.split["tools"] > 0
    assert (
        sample(text, "asyncai_nested_calls_total", server="test", tool="echo", outcome="ok")
        == calls_before + 3
    )
    assert (
        sample(text, "asyncai_tool_call_duration_seconds_count", server="test", tool="echo") or 0
    ) >= 3
    assert (sample(text, "asyncai_run_duration_seconds_count", status="done") or 0) >= 1
    assert (sample(text, "asyncai_model_tokens_total", kind="prompt") or 0) > 0
    assert sample(text, "asyncai_queued_prompts") == 0
    assert sample(text, "asyncai_active_runs") == 0
    assert sample(text, "asyncai_approvals_pending") == 0
    assert sample(text, "asyncai_repl_scopes", state="live") is not None
    assert sample(text, "asyncai_repl_scopes", state="saved") is not None
    assert sample(text, "asyncai_channel_reconnects_total") == 0
    assert "echo three things" not in text
    assert "three echoes" not in text
    missing, _ = await scrape(port, "/")
    assert missing == 404


async def test_a_metrics_address_that_cannot_be_bound_fails_the_start_naming_the_key(
    tmp_path,
) -> None:
    """An address in use stops the daemon at start with a config error naming the key;
    one that is not HOST:PORT is refused when the file is read."""
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, servers=False
        )
        text = path.read_text()
        path.write_text(text + '\n[telemetry]\nmetrics_listen = "nonsense"\n')
        with pytest.raises(ConfigError, match=r"telemetry\.metrics_listen"):
            load_config(path, environ={})
        path.write_text(text + f'\n[telemetry]\nmetrics_listen = "127.0.0.1:{port}"\n')
        daemon = Daemon(load_config(path, environ={}), env={})
        try:
            with pytest.raises(ConfigError, match=r"\[telemetry\] metrics_listen '127.0.0.1:"):
                await daemon.start()
        finally:
            await daemon.aclose()
            taken.close()


def test_the_endpoint_comes_from_the_environment_too(tmp_path: Path) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` sets ``[telemetry] otlp_endpoint``."""
    path = tmp_path / "asyncai.toml"
    path.write_text("")
    config = load_config(path, environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert config.telemetry.otlp_endpoint == "http://collector:4318"
    assert config.sources["telemetry.otlp_endpoint"] == (
        "environment variable OTEL_EXPORTER_OTLP_ENDPOINT"
    )


def test_without_the_settings_nothing_costly_is_imported() -> None:
    """A daemon without [telemetry] (and no console) loads neither the exporter nor
    prometheus-client: its telemetry is the timelines alone. (The OpenTelemetry API
    is loaded by the mcp SDK whatever the settings; asyncai never imports it.)"""
    code = (
        "import asyncio, sys\n"
        "from daemon.app import Daemon\n"
        "from daemon.config import Config\n"
        "d = Daemon(Config())\n"
        "asyncio.run(d.telemetry.start())\n"
        "assert d.telemetry.timelines.sinks == []\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client',"
        " 'daemon.telemetry.export', 'daemon.telemetry.metrics', 'daemon.telemetry.serve'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


async def test_the_console_serves_metrics_without_a_session_and_its_pages_still_need_one(
    tmp_path,
) -> None:
    """With [web] listen, ``/metrics`` on the console's address answers a scrape without a
    session (Prometheus has none), while the console's pages still refuse it."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = web_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        try:
            assert daemon.web_url is not None
            port = int(daemon.web_url.rstrip("/").rsplit(":", 1)[1])
            status, text = await scrape(port)
            assert status == 200
            assert "# TYPE asyncai_runs_total counter" in text
            assert sample(text, "asyncai_active_runs") == 0
            page, _ = await scrape(port, "/")
            assert page == 401
        finally:
            await daemon.aclose()


async def test_the_exporter_sends_the_collectors_credentials_and_never_logs_them() -> None:
    """OTEL_EXPORTER_OTLP_HEADERS' pairs go with every post (percent-decoded), and their
    values are secrets: a log line that would show one shows [REDACTED]."""
    async with OtlpReceiver() as receiver:
        headers = parse_headers(" Authorization=Basic%20c2VjcmV0LXZhbHVl , x-team=ops")
        exporter = OtlpExporter(receiver.endpoint, headers=headers)
        exporter.start()
        try:
            timeline = RunTimeline("r-headers")
            timeline.close(timeline.run, status="done")
            exporter.leg_ended(timeline, paused=False)
            async with asyncio.timeout(WAIT):
                await exporter.flush()
        finally:
            await exporter.aclose()
    assert receiver.headers[0]["authorization"] == "Basic c2VjcmV0LXZhbHVl"
    assert receiver.headers[0]["x-team"] == "ops"
    assert exporter.exported == 1
    assert "c2VjcmV0LXZhbHVl" not in json.dumps(
        redact(None, "info", {"h": "Basic c2VjcmV0LXZhbHVl"})
    )


@given(st.text(max_size=80))
@settings(max_examples=200, deadline=None)
def test_any_headers_text_gives_headers_or_a_clear_error(text: str) -> None:
    """Whatever OTEL_EXPORTER_OTLP_HEADERS holds: a dict of header names, or a ValueError
    naming the variable (never another exception)."""
    try:
        headers = parse_headers(text)
    except ValueError as exc:
        message = str(exc)
        headers = {}
    else:
        message = "OTEL_EXPORTER_OTLP_HEADERS"
    assert "OTEL_EXPORTER_OTLP_HEADERS" in message
    assert all(k and "=" not in k and "," not in k for k in headers)
