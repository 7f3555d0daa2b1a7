"""The bundled MCP servers over stdio, through McpToolExecutor.

``asyncai-mcp-kcp`` runs against the fake ``kubectl`` in tests/fakes (first on
the server's PATH), which records every argv in a log and serves fixture
JSON. ``asyncai-mcp-simple`` runs with ``--deny-private``. The read-only kcp
server's listing is checked in process (tests/test_servers_kcp.py), which
saves a spawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.mcp.executor import McpToolExecutor
from tests.fakes.loopback_http import Handler, serving

FAKES = Path(__file__).parent / "fakes"
FIXTURES = FAKES / "kcp_fixtures"
READ_TOOLS = {
    "list_kcps",
    "list_workspaces",
    "get_api_resources",
    "list_objects",
    "get_object",
    "get_events",
    "get_logs",
}
WRITE_TOOLS = {"apply_object", "patch_object", "scale_object"}


def kubeconfig(server: str, *, context: str | None = "root") -> str:
    """A kubeconfig (JSON is YAML) whose current context points at ``server``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "clusters": [{"name": "kcp", "cluster": {"server": server}}],
            "contexts": [{"name": "root", "context": {"cluster": "kcp", "user": "admin"}}],
            "users": [{"name": "admin", "user": {"token": "t"}}],
        }
    )


@dataclass
class Kcp:
    """The kcp directory, the fake kubectl's argv log, and the servers' URLs."""

    directory: Path
    log: Path
    up_server: str  # something listens there
    down_server: str  # nothing listens there

    def calls(self) -> list[dict[str, Any]]:
        """Every kubectl call so far: ``{"argv": [...], "stdin": ...}``."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def calls_since(self, mark: int) -> list[dict[str, Any]]:
        """The calls after the first ``mark`` ones."""
        return self.calls()[mark:]


@pytest.fixture(scope="module")
def kcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kcp]:
    """One kubeconfig ``dev`` whose server accepts TCP connections."""
    root = tmp_path_factory.mktemp("kcp")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down_port = closed.getsockname()[1]
    closed.close()
    up = f"https://127.0.0.1:{listener.getsockname()[1]}/clusters/root"
    directory = root / "kcps"
    directory.mkdir()
    (directory / "dev.kubeconfig").write_text(kubeconfig(up))
    yield Kcp(directory, root / "kubectl.log", up, f"https://127.0.0.1:{down_port}/clusters/root")
    listener.close()


def kcp_entry(kcp: Kcp, *flags: str) -> dict[str, Any]:
    """An mcpServers entry for asyncai-mcp-kcp with the fake kubectl first on PATH."""
    path = os.pathsep.join([str(FAKES), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    return {
        "command": sys.executable,
        "args": ["-m", "servers.kcp", *flags],
        "env": {
            "PATH": path,
            "ASYNCAI_KCP_DIR": str(kcp.directory),
            "FAKE_KUBECTL_LOG": str(kcp.log),
        },
    }


@pytest.fixture(scope="module")
async def ex(kcp: Kcp) -> AsyncIterator[McpToolExecutor]:
    """The read-write kcp server and the simple server with --deny-private."""
    executor = McpToolExecutor(
        {
            "kcp": kcp_entry(kcp),
            "simple": {
                "command": sys.executable,
                "args": ["-m", "servers.simple", "--deny-private"],
            },
        },
        call_timeout=30.0,
    )
    await executor.start()
    assert executor.failed_servers == {}
    yield executor
    await executor.aclose()


async def test_kcp_annotations_schemas_and_examples(ex: McpToolExecutor) -> None:
    """Reads are read-only, apply/patch/scale mutate without destroying,
    delete is destructive (A6); logs and delete have no output schema, the
    array results are wrapped (A1); every description ends with an example."""
    defs = {d.name: d for d in ex.definitions() if ex.routes[d.name] == "kcp"}
    assert set(defs) == READ_TOOLS | WRITE_TOOLS | {"delete_object"}
    for name in READ_TOOLS:
        assert (defs[name].read_only, defs[name].destructive) == (True, False), name
        assert not defs[name].mutating
    for name in WRITE_TOOLS:
        assert (defs[name].read_only, defs[name].destructive) == (False, False), name
    assert defs["delete_object"].destructive is True
    for name, d in defs.items():
        last = d.description.splitlines()[-1]
        assert last.startswith("Example: "), name
        assert f"await {name}(" in last, name
        assert (d.output_schema is None) == (name in {"get_logs", "delete_object"}), name
    assert defs["list_workspaces"].output_schema["required"] == ["workspaces"]
    assert defs["get_api_resources"].output_schema["required"] == ["resources"]
    assert defs["list_kcps"].output_schema["required"] == ["kcps", "errors"]
    # The kcp argument is optional everywhere (A8).
    for d in defs.values():
        assert "kcp" not in d.input_schema.get("required", [])


async def test_every_object_call_carries_o_json(ex: McpToolExecutor, kcp: Kcp) -> None:
    """get/apply/patch/scale calls carry -o json, the kubeconfig, and the
    workspace as --server=<base>/clusters/<workspace>."""
    mark = len(kcp.calls())
    ws = {"workspace": "root:app"}
    calls = [
        ("list_workspaces", {}),
        ("list_objects", {**ws, "resource": "pods", "selector": "app=web"}),
        (
            "get_object",
            {**ws, "resource": "configmaps", "name": "settings", "namespace": "default"},
        ),
        ("get_events", {**ws, "field_selector": "type=Warning"}),
        ("apply_object", {**ws, "manifest": {"apiVersion": "v1", "kind": "ConfigMap"}}),
        ("patch_object", {**ws, "resource": "configmaps", "name": "settings", "patch": {"a": 1}}),
        ("scale_object", {**ws, "resource": "deployments", "name": "web", "replicas": 3}),
    ]
    for name, args in calls:
        out = await ex.call_tool(name, args)
        assert out.is_error is False, (name, out.content)
        assert isinstance(out.structured, dict), name
    # Calls into a workspace; `config view` (reading the kubeconfig) is not one.
    object_calls = [
        c["argv"] for c in kcp.calls_since(mark) if c["argv"][1].startswith("--server=")
    ]
    verbs = [next(a for a in argv if not a.startswith("-")) for argv in object_calls]
    assert sorted(set(verbs)) == ["apply", "get", "patch", "scale"]
    for argv in object_calls:
        assert argv[argv.index("-o") + 1] == "json", argv
        assert argv[0] == f"--kubeconfig={(kcp.directory / 'dev.kubeconfig').resolve()}"
    base = kcp.up_server.removesuffix("/clusters/root")
    assert f"--server={base}/clusters/root" in object_calls[0]  # list_workspaces' default
    assert all(f"--server={base}/clusters/root:app" in argv for argv in object_calls[1:])
    assert "--selector=app=web" in object_calls[1]
    assert "--all-namespaces" in object_calls[1]


async def test_get_api_resources_returns_wrapped_resources(ex: McpToolExecutor) -> None:
    """api-resources -o wide is parsed into {"resources": [...]}, empty
    columns included, so the spec's example program works on it."""
    out = await ex.call_tool("get_api_resources", {"workspace": "root:app"})
    resources = out.structured["resources"]
    assert json.loads(out.content) == out.structured
    social = sorted(
        {r["kind"] for r in resources if r["api_version"].startswith("socialweb.computer/")}
    )
    assert social == ["Actor", "Inbox"]
    by_name = {r["name"]: r for r in resources}
    assert by_name["actors"]["short_names"] == ["act"]
    assert by_name["actors"]["categories"] == ["all", "social"]
    assert by_name["inboxes"]["short_names"] == []
    assert by_name["workspaces"]["namespaced"] is False
    assert by_name["bindings"]["verbs"] == ["create"]
    assert "watch" in by_name["pods"]["verbs"]


async def test_list_objects_passes_kubectl_json_whole(ex: McpToolExecutor) -> None:
    """The list kubectl printed arrives unchanged, structured and as text."""
    out = await ex.call_tool("list_objects", {"workspace": "root:app", "resource": "pods"})
    expected = json.loads((FIXTURES / "pods.json").read_text())
    assert out.structured == expected
    assert json.loads(out.content) == expected


async def test_kcp_argument_resolution_with_one_and_two_kcps(ex: McpToolExecutor, kcp: Kcp) -> None:
    """One kcp is used without naming it; with two, omitting kcp is an error
    that lists the ids, and naming one picks its kubeconfig (A8)."""
    args = {"workspace": "root", "resource": "pods"}
    assert (await ex.call_tool("list_objects", args)).is_error is False
    prod = kcp.directory / "prod.kubeconfig"
    prod.write_text(kubeconfig(kcp.down_server))
    try:
        ambiguous = await ex.call_tool("list_objects", args)
        assert ambiguous.is_error
        assert "2 kcps found, pass kcp= one of: dev, prod" in ambiguous.content
        mark = len(kcp.calls())
        picked = await ex.call_tool("list_objects", {**args, "kcp": "prod"})
        assert picked.is_error is False
        [call] = [c for c in kcp.calls_since(mark) if "get" in c["argv"]]
        assert call["argv"][0] == f"--kubeconfig={prod.resolve()}"
        unknown = await ex.call_tool("list_objects", {**args, "kcp": "staging"})
        assert unknown.is_error
        assert "unknown kcp 'staging'; known kcps: dev, prod" in unknown.content
    finally:
        prod.unlink()


async def test_list_kcps_reports_server_running_and_errors(ex: McpToolExecutor, kcp: Kcp) -> None:
    """Each kubeconfig is listed with its server and whether it accepts TCP;
    a kubeconfig kubectl cannot read is listed with an error."""
    (kcp.directory / "down.yaml").write_text(kubeconfig(kcp.down_server))
    (kcp.directory / "bad.json").write_text(kubeconfig(kcp.up_server, context=None))
    try:
        out = await ex.call_tool("list_kcps", {})
    finally:
        (kcp.directory / "down.yaml").unlink()
        (kcp.directory / "bad.json").unlink()
    kcps = {k["id"]: k for k in out.structured["kcps"]}
    assert sorted(kcps) == ["bad", "dev", "down"]
    assert (kcps["dev"]["server"], kcps["dev"]["running"]) == (kcp.up_server, True)
    assert (kcps["down"]["server"], kcps["down"]["running"]) == (kcp.down_server, False)
    assert kcps["bad"]["server"] is None
    [error] = out.structured["errors"]
    assert "kcp 'bad'" in error
    assert "current-context must exist" in error


async def test_kubectl_failure_is_an_error_result_with_its_stderr(ex: McpToolExecutor) -> None:
    """kubectl's own error reaches the caller as an is_error result."""
    out = await ex.call_tool(
        "get_object", {"workspace": "root:app", "resource": "configmaps", "name": "missing"}
    )
    assert out.is_error
    assert 'Error from server (NotFound): configmaps "missing" not found' in out.content


async def test_arguments_never_become_flags(ex: McpToolExecutor, kcp: Kcp) -> None:
    """A value shaped like a flag, or a workspace that is not a kcp path, is
    refused before kubectl runs."""
    mark = len(kcp.calls())
    flag = await ex.call_tool("list_objects", {"workspace": "root", "resource": "--raw=/x"})
    assert flag.is_error
    assert "invalid resource '--raw=/x'" in flag.content
    path = await ex.call_tool("list_objects", {"workspace": "root/../x", "resource": "pods"})
    assert path.is_error
    assert "invalid workspace" in path.content
    assert not [c for c in kcp.calls_since(mark) if "--raw=/x" in c["argv"]]
    assert not [c for c in kcp.calls_since(mark) if any("root/../x" in a for a in c["argv"])]


async def test_logs_and_delete_are_plain_text(ex: McpToolExecutor, kcp: Kcp) -> None:
    """get_logs and delete_object return text without structured content."""
    logs = await ex.call_tool(
        "get_logs", {"workspace": "root:app", "pod": "web-1", "tail_lines": 3}
    )
    assert logs.structured is None
    assert logs.content == (FIXTURES / "logs.txt").read_text()
    mark = len(kcp.calls())
    deleted = await ex.call_tool(
        "delete_object", {"workspace": "root:app", "resource": "configmaps", "name": "settings"}
    )
    assert (deleted.is_error, deleted.structured) == (False, None)
    assert deleted.content.strip() == 'configmap "settings" deleted'
    [call] = kcp.calls_since(mark)
    assert "--wait=false" in call["argv"]
    assert "-o" not in call["argv"]


async def test_apply_sends_the_manifest_on_stdin(ex: McpToolExecutor, kcp: Kcp) -> None:
    """apply_object pipes the manifest to `kubectl apply -f -`."""
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    mark = len(kcp.calls())
    out = await ex.call_tool("apply_object", {"workspace": "root:app", "manifest": manifest})
    assert out.structured["metadata"] == {"name": "x", "resourceVersion": "1"}
    [call] = kcp.calls_since(mark)
    assert json.loads(call["stdin"]) == manifest
    assert call["argv"][-5:] == ["apply", "-f", "-", "-o", "json"]


async def test_http_get_schema_and_deny_private(ex: McpToolExecutor) -> None:
    """http_get is read-only with an output schema; --deny-private refuses
    loopback, and the metadata address is refused with its own reason."""
    [http_get] = [d for d in ex.definitions() if d.name == "http_get"]
    assert http_get.read_only is True
    assert http_get.output_schema["required"] == ["status", "content_type", "body"]
    assert http_get.description.splitlines()[-1].startswith("Example: r = await http_get(")
    loopback = await ex.call_tool("http_get", {"url": "http://127.0.0.1:9/"})
    assert loopback.is_error
    assert "not a public address (the server runs with --deny-private)" in loopback.content
    metadata = await ex.call_tool("http_get", {"url": "http://169.254.169.254/latest/meta-data/"})
    assert metadata.is_error
    assert "link-local or cloud metadata address" in metadata.content
    nat64 = await ex.call_tool("http_get", {"url": "http://[64:ff9b:1::a00:1]/"})
    assert nat64.is_error
    assert "64:ff9b:1::a00:1 is not a public address" in nat64.content


@pytest.fixture(scope="module")
async def simple_open() -> AsyncIterator[McpToolExecutor]:
    """The simple server without --deny-private (loopback allowed), with a
    short --timeout and a small --max-bytes."""
    executor = McpToolExecutor(
        {
            "simple": {
                "command": sys.executable,
                "args": ["-m", "servers.simple", "--timeout", "2", "--max-bytes", "1000"],
            },
        },
        call_timeout=30.0,
    )
    await executor.start()
    assert executor.failed_servers == {}
    yield executor
    await executor.aclose()


@contextlib.asynccontextmanager
async def http_on_loopback(handle: Handler) -> AsyncIterator[str]:
    """:func:`tests.fakes.loopback_http.serving`, yielding its URL."""
    async with serving(handle) as port:
        yield f"http://127.0.0.1:{port}/"


async def test_http_get_dripping_calls_end_at_the_deadline_and_do_not_starve_others(
    simple_open: McpToolExecutor,
) -> None:
    """60 gathered http_get calls to a server that drips its body are all in
    flight at once; a call to a fast host answers while they wait; each slow
    call ends at --timeout with a timeout error and closes its connection."""
    accepted = 0
    all_in, all_closed = asyncio.Event(), asyncio.Event()
    closed = 0

    async def drip(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted, closed
        accepted += 1
        if accepted == 60:
            all_in.set()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n")
        try:
            while True:  # a byte every 0.1 s: each read is quick, the body never ends
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.1)
        except OSError:  # the client went away
            closed += 1
            if closed == 60:
                all_closed.set()

    async def fast(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nfast"
        )
        await writer.drain()

    async with http_on_loopback(drip) as slow_url, http_on_loopback(fast) as fast_url:
        slow = [
            asyncio.create_task(simple_open.call_tool("http_get", {"url": f"{slow_url}{i}"}))
            for i in range(60)
        ]
        async with asyncio.timeout(10):
            await all_in.wait()
        quick = await simple_open.call_tool("http_get", {"url": fast_url})
        assert quick.structured == {"status": 200, "content_type": "text/plain", "body": "fast"}
        assert not any(task.done() for task in slow)
        for out in await asyncio.gather(*slow):
            assert out.is_error
            assert "timed out after 2s fetching http://127.0.0.1" in out.content
        async with asyncio.timeout(10):
            await all_closed.wait()


async def test_http_get_body_over_max_bytes_is_an_error(simple_open: McpToolExecutor) -> None:
    """With --max-bytes 1000 a 5000-byte body (no length declared) is an
    error result that says so; a 1000-byte one comes back whole."""

    async def big(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000)
        await writer.drain()

    async def exact(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"y" * 1000)
        await writer.drain()

    async with http_on_loopback(big) as big_url, http_on_loopback(exact) as exact_url:
        over = await simple_open.call_tool("http_get", {"url": big_url})
        whole = await simple_open.call_tool("http_get", {"url": exact_url})
    assert over.is_error
    assert "more than the limit of 1000 bytes (the server's --max-bytes)" in over.content
    assert not whole.is_error
    assert whole.structured["body"] == "y" * 1000


#: Cloud metadata endpoints, spelled every way a URL may: plain, as one integer, in
#: hex, in octal, with short parts, and carried inside IPv6.
METADATA_URLS = (
    "http://169.254.169.254/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",  # Alibaba Cloud
    "http://192.0.0.192/opc/v2/instance/",  # Oracle Cloud
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS over IPv6
    "http://2852039166/",
    "http://0xA9FEA9FE/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://1684301000/",  # 100.100.100.200
    "http://3221225664/",  # 192.0.0.192
    "http://[::ffff:169.254.169.254]/",
    "http://[::169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[2001:0:a9fe:a9fe::1]/",
    "http://[::ffff:100.100.100.200]/",
    "http://[64:ff9b::c000:c0]/",
)


async def test_http_get_never_fetches_a_metadata_endpoint_with_or_without_deny_private(
    ex: McpToolExecutor, simple_open: McpToolExecutor
) -> None:
    """Through the real server over stdio, with --deny-private and without it: every
    cloud metadata endpoint in every spelling is an error naming it as metadata."""
    for executor in (ex, simple_open):
        for url in METADATA_URLS:
            out = await executor.call_tool("http_get", {"url": url})
            assert out.is_error, url
            assert "is a link-local or cloud metadata address, which is never fetched" in (
                out.content
            ), (url, out.content)
