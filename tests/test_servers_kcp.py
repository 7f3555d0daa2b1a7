"""asyncai-mcp-kcp's pure parts and its kubectl runner, in process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servers.kcp.discovery import (
    DiscoveryError,
    KcpRef,
    find_kubeconfigs,
    resolve_kcp,
    server_base,
    workspace_url,
)
from servers.kcp.kubectl import Kubectl, KubectlError, check_positional, parse_api_resources
from servers.kcp.server import server_from_argv

READ_TOOLS = {
    "list_kcps",
    "list_workspaces",
    "get_api_resources",
    "list_objects",
    "get_object",
    "get_events",
    "get_logs",
}

OLD_STYLE_TABLE = """\
NAME          SHORTNAMES   APIVERSION   NAMESPACED   KIND        VERBS
configmaps    cm           v1           true         ConfigMap   [create delete get list]
namespaces    ns           v1           false        Namespace   [get list]
"""


def test_api_resources_table_with_bracketed_verbs() -> None:
    """Older kubectl prints verbs as [a b]; a missing CATEGORIES column is empty."""
    rows = parse_api_resources(OLD_STYLE_TABLE)
    assert rows[0] == {
        "name": "configmaps",
        "short_names": ["cm"],
        "api_version": "v1",
        "namespaced": True,
        "kind": "ConfigMap",
        "verbs": ["create", "delete", "get", "list"],
        "categories": [],
    }
    assert rows[1]["namespaced"] is False
    assert parse_api_resources("") == []


@pytest.mark.parametrize(
    ("server", "base"),
    [
        ("https://kcp:6443/clusters/root:org", "https://kcp:6443"),
        ("https://kcp:6443/clusters/root", "https://kcp:6443"),
        ("https://proxy/kcp/clusters/root", "https://proxy/kcp"),
        ("https://kcp:6443", "https://kcp:6443"),
        ("https://kcp:6443/", "https://kcp:6443"),
    ],
)
def test_server_base_strips_the_workspace(server: str, base: str) -> None:
    """The part before /clusters/ addresses the kcp; workspaces hang off it."""
    assert server_base(server) == base
    assert workspace_url(server, "root:app") == f"{base}/clusters/root:app"


@pytest.mark.parametrize("workspace", ["root/../x", "Root", "root:", ":root", "root app", ""])
def test_workspace_must_be_a_kcp_path(workspace: str) -> None:
    """Anything but a kcp path is refused before it becomes part of a URL."""
    with pytest.raises(DiscoveryError, match="invalid workspace"):
        workspace_url("https://kcp:6443", workspace)


def test_find_kubeconfigs_layouts(tmp_path: Path) -> None:
    """<id>.kubeconfig/.yaml/.yml/.json and <id>/admin.kubeconfig are found,
    sorted; other files are ignored."""
    (tmp_path / "dev.kubeconfig").write_text("{}")
    (tmp_path / "prod.yaml").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "admin.kubeconfig").write_text("{}")
    (tmp_path / "empty").mkdir()
    refs, errors = find_kubeconfigs(str(tmp_path))
    assert [r.id for r in refs] == ["dev", "lab", "prod"]
    assert refs[1].kubeconfig == str((tmp_path / "lab" / "admin.kubeconfig").resolve())
    assert errors == []


def test_find_kubeconfigs_without_a_directory() -> None:
    """No directory configured, or one that does not exist, is an error entry."""
    assert find_kubeconfigs(None) == (
        [],
        ["no kcp directory configured: pass --kcp-dir or set ASYNCAI_KCP_DIR"],
    )
    refs, [error] = find_kubeconfigs("/nonexistent/kcps")
    assert refs == []
    assert "cannot read kcp directory /nonexistent/kcps" in error


def test_resolve_kcp() -> None:
    """Named → that one; omitted with one → it; otherwise errors listing ids (A8)."""
    dev, prod = KcpRef("dev", "/d"), KcpRef("prod", "/p")
    assert resolve_kcp(None, [dev], []) is dev
    assert resolve_kcp("prod", [dev, prod], []) is prod
    with pytest.raises(DiscoveryError, match="2 kcps found, pass kcp= one of: dev, prod"):
        resolve_kcp(None, [dev, prod], [])
    with pytest.raises(DiscoveryError, match="no kcp found \\(no kcp directory configured"):
        resolve_kcp(None, [], ["no kcp directory configured"])


@pytest.mark.parametrize("value", ["-o", "--raw=/", "a b", ""])
def test_positionals_cannot_be_flags(value: str) -> None:
    """A positional argument may not start with '-' or hold whitespace."""
    with pytest.raises(KubectlError, match="invalid name"):
        check_positional("name", value)


async def test_kubectl_timeout_kills_it_and_says_so(tmp_path: Path) -> None:
    """A kubectl that hangs is killed at the timeout, with a clear error."""
    hanging = tmp_path / "kubectl"
    hanging.write_text(f"#!{sys.executable}\nimport signal\nsignal.pause()\n")
    hanging.chmod(0o755)
    kubectl = Kubectl(str(hanging), timeout=0.3)
    with pytest.raises(KubectlError, match=r"did not finish within 0\.3s: get pods"):
        await kubectl.run("/kc", None, ["get", "pods"])


async def test_kubectl_errors_carry_stderr_in_full(tmp_path: Path) -> None:
    """A non-zero exit becomes a KubectlError with the exit status and all of stderr."""
    failing = tmp_path / "kubectl"
    long_line = "x" * 100_000
    failing.write_text(
        f"#!{sys.executable}\nimport sys\nprint('boom', {long_line!r}, file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    failing.chmod(0o755)
    with pytest.raises(KubectlError) as error:
        await Kubectl(str(failing)).run("/kc", "https://kcp/clusters/root", ["get", "pods"])
    assert str(error.value) == f"kubectl exited with 2: boom {long_line}"


async def test_readonly_server_lists_no_mutating_tool(tmp_path: Path) -> None:
    """With --readonly the server lists only the seven read tools, all
    annotated read-only; without it, the four writes are there too."""
    readonly = await server_from_argv(["--readonly", "--kcp-dir", str(tmp_path)]).list_tools()
    assert {t.name for t in readonly} == READ_TOOLS
    assert all(t.annotations.read_only_hint is True for t in readonly)
    assert all(t.annotations.destructive_hint is False for t in readonly)
    full = await server_from_argv(["--kcp-dir", str(tmp_path)]).list_tools()
    assert {t.name for t in full} - READ_TOOLS == {
        "apply_object",
        "patch_object",
        "scale_object",
        "delete_object",
    }


def test_object_schemas_name_the_fields_people_ask_about() -> None:
    """Object and list schemas declare where a pod's phase, node and restarts, a
    deployment's replicas and image, an event's type and reason, and a configmap's data
    live, so code mode's stubs show them instead of a bare ``metadata: dict``."""
    from daemon.code_mode.catalog.schema import return_sketch
    from servers.kcp import schemas

    props = schemas.OBJECT["properties"]
    assert set(props["metadata"]["properties"]) >= {"name", "namespace", "labels"}
    assert set(props["spec"]["properties"]) >= {"nodeName", "replicas", "containers"}
    status = props["status"]["properties"]
    assert set(status) >= {"phase", "replicas", "readyReplicas", "containerStatuses"}
    assert "restartCount" in status["containerStatuses"]["items"]["properties"]
    assert {"data", "type", "reason", "message", "involvedObject"} <= set(props)
    assert "required" not in schemas.OBJECT  # each field belongs to some kinds only
    assert schemas.OBJECT_LIST["properties"]["items"]["items"] is schemas.OBJECT
    sketch = return_sketch(schemas.OBJECT_LIST)
    assert '"status": {"phase": str, "containerStatuses": [...], "replicas": int' in sketch
    assert '"readyReplicas": int' in sketch
