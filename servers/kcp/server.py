"""The ``asyncai-mcp-kcp`` MCP server: kcp workspaces through ``kubectl -o json``.

Read tools (annotated read-only): ``list_kcps``, ``list_workspaces``,
``get_api_resources``, ``list_objects``, ``get_object``, ``get_events``,
``get_logs``. Unless ``--readonly``: ``apply_object``, ``patch_object``,
``scale_object`` (non-read-only, non-destructive) and ``delete_object``
(destructive), spec A6.

Object tools return kubectl's JSON whole, as structured content with an output
schema and as compact JSON text; ``get_logs`` and ``delete_object`` return
plain text without a schema (spec A1). Every tool takes an optional ``kcp``:
with exactly one kcp discovered it is used, otherwise the error lists the ids
(spec A8). kubectl's own failures come back as error results carrying its
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from servers.kcp import schemas
from servers.kcp.discovery import (
    KCP_DIR_ENV,
    DiscoveryError,
    KcpRef,
    find_kubeconfigs,
    probe,
    resolve_kcp,
    workspace_url,
)
from servers.kcp.kubectl import Kubectl, KubectlError, check_positional, parse_api_resources

__all__ = ["KcpTools", "build_server", "main", "server_from_argv"]

DEFAULT_TIMEOUT = 60.0

READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DELETE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

Kcp = Annotated[
    str | None,
    Field(description="kcp id from list_kcps; may be omitted when exactly one kcp exists"),
]
Workspace = Annotated[str, Field(description="workspace path, e.g. root:app")]
Resource = Annotated[
    str, Field(description="resource type, e.g. pods, configmaps, deployments.apps")
]
Name = Annotated[str, Field(description="object name")]
Namespace = Annotated[str | None, Field(description="namespace")]


#: The one-line Python example every description ends with (spec A1).
EXAMPLES = {
    "list_kcps": 'ids = [k["id"] for k in (await list_kcps())["kcps"] if k["running"]]',
    "list_workspaces": (
        'paths = [w["path"] for w in (await list_workspaces(workspace="root"))["workspaces"]]'
    ),
    "get_api_resources": (
        'kinds = sorted({r["kind"] for r in '
        '(await get_api_resources(workspace="root:app"))["resources"]})'
    ),
    "list_objects": 'pods = await list_objects(workspace="root:app", resource="pods")',
    "get_object": (
        'cm = await get_object(workspace="root:app", resource="configmaps", '
        'name="settings", namespace="default")'
    ),
    "get_events": (
        'warnings = [e for e in (await get_events(workspace="root:app"))["items"] '
        'if e["type"] == "Warning"]'
    ),
    "get_logs": (
        'errors = [l for l in (await get_logs(workspace="root:app", '
        'pod="web-1")).splitlines() if "ERROR" in l]'
    ),
    "apply_object": (
        'cm = await apply_object(workspace="root:app", manifest={"apiVersion": "v1", '
        '"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, '
        '"data": {"k": "v"}})'
    ),
    "patch_object": (
        'cm = await patch_object(workspace="root:app", resource="configmaps", '
        'name="x", namespace="default", patch={"data": {"k": "v2"}})'
    ),
    "scale_object": (
        'd = await scale_object(workspace="root:app", resource="deployments", '
        'name="web", namespace="default", replicas=3)'
    ),
    "delete_object": (
        'msg = await delete_object(workspace="root:app", resource="configmaps", '
        'name="x", namespace="default")'
    ),
}


@contextmanager
def _tool_errors() -> Iterator[None]:
    """Failures the model can act on become error results with the full text."""
    try:
        yield
    except (DiscoveryError, KubectlError) as exc:
        raise ToolError(str(exc)) from exc


def _structured(data: Any) -> CallToolResult:
    """kubectl's JSON as structured content plus the same JSON, compact, as text."""
    if not isinstance(data, dict):
        raise ToolError(f"kubectl printed {type(data).__name__} JSON, expected an object")
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _namespace_args(namespace: str | None, *, all_when_none: bool) -> list[str]:
    if namespace is not None:
        return [f"--namespace={check_positional('namespace', namespace)}"]
    return ["--all-namespaces"] if all_when_none else []


class KcpTools:
    """The tools, bound to a kcp directory and a kubectl."""

    def __init__(self, kcp_dir: str | None, kubectl: Kubectl) -> None:
        self.kcp_dir = kcp_dir
        self.kubectl = kubectl
        # kubeconfig → ((mtime_ns, size), server URL): one `kubectl config
        # view` per kubeconfig version, not per call.
        self._servers: dict[str, tuple[tuple[int, int], str]] = {}

    async def server_of(self, ref: KcpRef) -> str:
        """The cluster URL of the kubeconfig's current context."""
        try:
            stat = os.stat(ref.kubeconfig)
        except OSError as exc:
            raise DiscoveryError(f"kcp {ref.id!r}: cannot read {ref.kubeconfig}: {exc}") from exc
        version = (stat.st_mtime_ns, stat.st_size)
        cached = self._servers.get(ref.kubeconfig)
        if cached is not None and cached[0] == version:
            return cached[1]
        config = await self.kubectl.json(
            ref.kubeconfig, None, ["config", "view", "--minify", "-o", "json"]
        )
        try:
            server = config["clusters"][0]["cluster"]["server"]
        except (KeyError, IndexError, TypeError) as exc:
            raise DiscoveryError(
                f"kcp {ref.id!r}: {ref.kubeconfig} has no cluster server in its current context"
            ) from exc
        self._servers[ref.kubeconfig] = (version, server)
        return server

    async def target(self, kcp: str | None, workspace: str) -> tuple[str, str]:
        """``(kubeconfig, workspace URL)`` for one call."""
        refs, errors = find_kubeconfigs(self.kcp_dir)
        ref = resolve_kcp(kcp, refs, errors)
        return ref.kubeconfig, workspace_url(await self.server_of(ref), workspace)

    async def get_json(self, kcp: str | None, workspace: str, args: list[str], **kw: Any) -> Any:
        """One object call (always ``-o json``) in a workspace."""
        kubeconfig, server = await self.target(kcp, workspace)
        return await self.kubectl.json(kubeconfig, server, [*args, "-o", "json"], **kw)

    # -- tools ------------------------------------------------------------

    async def list_kcps(self) -> CallToolResult:
        """
        List the kcp servers found in the kcp directory, and discovery errors.
        `running` means the server's host and port accept a TCP connection. Pass
        an id as kcp= to the other tools when more than one kcp exists.
        """
        refs, errors = find_kubeconfigs(self.kcp_dir)

        async def describe(ref: KcpRef) -> dict[str, Any]:
            try:
                server: str | None = await self.server_of(ref)
            except (DiscoveryError, KubectlError) as exc:
                errors.append(f"kcp {ref.id!r}: {exc}")
                server = None
            running = server is not None and await probe(server)
            return {
                "id": ref.id,
                "kubeconfig": ref.kubeconfig,
                "server": server,
                "running": running,
            }

        kcps = await asyncio.gather(*(describe(ref) for ref in refs))
        return _structured({"kcps": list(kcps), "errors": errors})

    async def list_workspaces(
        self, workspace: Workspace = "root", kcp: Kcp = None
    ) -> CallToolResult:
        """
        List the child workspaces of a workspace. Each one's `path` is what
        the other tools take as workspace=.
        """
        with _tool_errors():
            data = await self.get_json(kcp, workspace, ["get", "workspaces.tenancy.kcp.io"])
        workspaces = []
        for item in data.get("items", []):
            metadata = item.get("metadata") or {}
            spec = item.get("spec") or {}
            status = item.get("status") or {}
            kind = spec.get("type")
            name = metadata.get("name", "")
            workspaces.append(
                {
                    "name": name,
                    "path": f"{workspace}:{name}",
                    "type": kind.get("name") if isinstance(kind, dict) else kind,
                    "phase": status.get("phase"),
                    "url": spec.get("URL") or spec.get("url"),
                }
            )
        return _structured({"workspaces": workspaces})

    async def get_api_resources(self, workspace: Workspace, kcp: Kcp = None) -> CallToolResult:
        """
        List the resource types a workspace serves (`kubectl api-resources -o wide`).
        """
        with _tool_errors():
            kubeconfig, server = await self.target(kcp, workspace)
            table = await self.kubectl.run(kubeconfig, server, ["api-resources", "-o", "wide"])
        return _structured({"resources": parse_api_resources(table)})

    async def list_objects(
        self,
        workspace: Workspace,
        resource: Resource,
        namespace: Annotated[
            str | None, Field(description="namespace; omit for all namespaces")
        ] = None,
        selector: Annotated[str | None, Field(description="label selector, e.g. app=web")] = None,
        field_selector: Annotated[
            str | None, Field(description="field selector, e.g. status.phase=Running")
        ] = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        List objects of one resource type (`kubectl get -o json`): the list
        object, with the objects under "items". Without namespace, all namespaces.
        """
        with _tool_errors():
            args = ["get", check_positional("resource", resource)]
            args += _namespace_args(namespace, all_when_none=True)
            if selector is not None:
                args.append(f"--selector={selector}")
            if field_selector is not None:
                args.append(f"--field-selector={field_selector}")
            return _structured(await self.get_json(kcp, workspace, args))

    async def get_object(
        self,
        workspace: Workspace,
        resource: Resource,
        name: Name,
        namespace: Namespace = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        Get one object (`kubectl get -o json`).
        """
        with _tool_errors():
            args = ["get", check_positional("resource", resource), check_positional("name", name)]
            args += _namespace_args(namespace, all_when_none=False)
            return _structured(await self.get_json(kcp, workspace, args))

    async def get_events(
        self,
        workspace: Workspace,
        namespace: Annotated[
            str | None, Field(description="namespace; omit for all namespaces")
        ] = None,
        field_selector: Annotated[
            str | None,
            Field(description="field selector, e.g. involvedObject.name=web-1 or type=Warning"),
        ] = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        List events (`kubectl get events -o json`), the events under "items".
        """
        with _tool_errors():
            args = ["get", "events", *_namespace_args(namespace, all_when_none=True)]
            if field_selector is not None:
                args.append(f"--field-selector={field_selector}")
            return _structured(await self.get_json(kcp, workspace, args))

    async def get_logs(
        self,
        workspace: Workspace,
        pod: Annotated[str, Field(description="pod name")],
        namespace: Namespace = None,
        container: Annotated[str | None, Field(description="container name")] = None,
        tail_lines: Annotated[int | None, Field(description="only the last N lines")] = None,
        previous: Annotated[bool, Field(description="the previous container's logs")] = False,
        kcp: Kcp = None,
    ) -> str:
        """
        A pod's logs as plain text (`kubectl logs`).
        """
        with _tool_errors():
            args = ["logs", check_positional("pod", pod)]
            args += _namespace_args(namespace, all_when_none=False)
            if container is not None:
                args.append(f"--container={check_positional('container', container)}")
            if tail_lines is not None:
                args.append(f"--tail={int(tail_lines)}")
            if previous:
                args.append("--previous")
            kubeconfig, server = await self.target(kcp, workspace)
            return await self.kubectl.run(kubeconfig, server, args)

    async def apply_object(
        self,
        workspace: Workspace,
        manifest: Annotated[
            dict[str, Any] | str,
            Field(description="the object to apply, as a dict (or YAML/JSON text)"),
        ],
        namespace: Namespace = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        Create or update an object (`kubectl apply -f - -o json`); returns the applied object.
        """
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        with _tool_errors():
            args = ["apply", "-f", "-", *_namespace_args(namespace, all_when_none=False)]
            data = await self.get_json(kcp, workspace, args, stdin=text.encode())
            return _structured(data)

    async def patch_object(
        self,
        workspace: Workspace,
        resource: Resource,
        name: Name,
        patch: Annotated[
            dict[str, Any] | list[Any],
            Field(
                description="the patch: a dict (merge, strategic) or a list of operations (json)"
            ),
        ],
        patch_type: Literal["merge", "strategic", "json"] = "merge",
        namespace: Namespace = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        Patch an object (`kubectl patch -o json`); returns the patched object.
        """
        with _tool_errors():
            args = ["patch", check_positional("resource", resource), check_positional("name", name)]
            args += _namespace_args(namespace, all_when_none=False)
            args += [f"--type={patch_type}", f"--patch={json.dumps(patch)}"]
            return _structured(await self.get_json(kcp, workspace, args))

    async def scale_object(
        self,
        workspace: Workspace,
        resource: Resource,
        name: Name,
        replicas: Annotated[int, Field(ge=0, description="the new replica count")],
        namespace: Namespace = None,
        kcp: Kcp = None,
    ) -> CallToolResult:
        """
        Set the replica count of a scalable object (`kubectl scale -o json`).
        """
        with _tool_errors():
            args = ["scale", check_positional("resource", resource), check_positional("name", name)]
            args += _namespace_args(namespace, all_when_none=False)
            args.append(f"--replicas={int(replicas)}")
            return _structured(await self.get_json(kcp, workspace, args))

    async def delete_object(
        self,
        workspace: Workspace,
        resource: Resource,
        name: Name,
        namespace: Namespace = None,
        kcp: Kcp = None,
    ) -> str:
        """
        Delete an object (`kubectl delete --wait=false`); returns kubectl's
        message as plain text. Finalizers may keep the object a while longer.
        """
        with _tool_errors():
            args = [
                "delete",
                check_positional("resource", resource),
                check_positional("name", name),
            ]
            args += _namespace_args(namespace, all_when_none=False)
            args.append("--wait=false")
            kubeconfig, server = await self.target(kcp, workspace)
            return await self.kubectl.run(kubeconfig, server, args)


def _tool(
    fn: Callable[..., Any], annotations: ToolAnnotations, output_schema: dict[str, Any] | None
) -> Tool:
    """Register a bound method with a hand-written output schema (or none).

    The tools build their own ``CallToolResult`` (kubectl's JSON passes through
    without a validating model that could drop fields); the SDK then publishes
    the schema set here as the tool's ``outputSchema``.
    """
    tool = Tool.from_function(
        fn,
        description=f"{inspect.cleandoc(fn.__doc__ or '')}\nExample: {EXAMPLES[fn.__name__]}",
        annotations=annotations,
        structured_output=False if output_schema is None else None,
    )
    tool.fn_metadata.output_schema = output_schema
    return tool


def build_server(
    *, kcp_dir: str | None, readonly: bool = False, kubectl: Kubectl | None = None
) -> MCPServer:
    """The server; ``readonly`` leaves out the four mutating tools."""
    tools = KcpTools(kcp_dir, kubectl or Kubectl())
    registered = [
        _tool(tools.list_kcps, READ, schemas.KCPS),
        _tool(tools.list_workspaces, READ, schemas.WORKSPACES),
        _tool(tools.get_api_resources, READ, schemas.RESOURCES),
        _tool(tools.list_objects, READ, schemas.OBJECT_LIST),
        _tool(tools.get_object, READ, schemas.OBJECT),
        _tool(tools.get_events, READ, schemas.OBJECT_LIST),
        _tool(tools.get_logs, READ, None),
    ]
    if not readonly:
        registered += [
            _tool(tools.apply_object, WRITE, schemas.OBJECT),
            _tool(tools.patch_object, WRITE, schemas.OBJECT),
            _tool(tools.scale_object, WRITE, schemas.OBJECT),
            _tool(tools.delete_object, DELETE, None),
        ]
    return MCPServer("asyncai-mcp-kcp", log_level="WARNING", tools=registered)


def server_from_argv(argv: list[str] | None = None) -> MCPServer:
    """The server the command line asks for."""
    parser = argparse.ArgumentParser(
        prog="asyncai-mcp-kcp",
        description="An MCP server for kcp workspaces through kubectl -o json.",
    )
    parser.add_argument(
        "--kcp-dir",
        default=os.environ.get(KCP_DIR_ENV) or None,
        help=f"directory of kcp kubeconfigs (default: ${KCP_DIR_ENV})",
    )
    parser.add_argument("--readonly", action="store_true", help="offer only the read tools")
    parser.add_argument(
        "--kubectl", default="kubectl", help="the kubectl program (default: kubectl)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds per kubectl call (default {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(argv)
    return build_server(
        kcp_dir=args.kcp_dir,
        readonly=args.readonly,
        kubectl=Kubectl(args.kubectl, timeout=args.timeout),
    )


def main(argv: list[str] | None = None) -> None:
    """Console script ``asyncai-mcp-kcp``: serve on stdio."""
    server_from_argv(argv).run()
