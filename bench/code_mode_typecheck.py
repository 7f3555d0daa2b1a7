"""Monty's type checker against the catalog's stubs: false positives on valid snippets.

Spec issue 3 ("Also"): check snippets with Monty's bundled checker (``ty``,
notes/monty.md §11) before running them, on by default only if a corpus of
valid snippets shows no false positives. This prints the measurement.

Every snippet below is what a model writes against the bundled servers' real
tools (``asyncai-mcp-kcp`` and ``asyncai-mcp-simple``, listed in-process), and
every one runs to completion on fake tool results (checked here too, without
type checking): any type error is a false positive. Sequences share one
scope, as a conversation does.

Run: ``.venv/bin/python bench/code_mode_typecheck.py``
"""

# The corpus keeps each statement on one line, as a model writes it.
# ruff: noqa: E501

from __future__ import annotations

import asyncio
import datetime
import sys
import time
from typing import Any

from pydantic_monty import (
    AsyncFunctionSnapshot,
    AsyncFutureSnapshot,
    AsyncMonty,
    AsyncMontySession,
    MontyComplete,
    MontyError,
    MontyRuntimeError,
    MontyTypingError,
)

from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.helpers import HELPERS_SOURCE
from daemon.tools import ToolDefinition

# Builtins that exist at runtime but not in the bundled checker's typeshed
# (notes/monty.md §11); declared so they are not flagged.
MISSING_BUILTINS = """
class PermissionError(OSError): ...
class FileNotFoundError(OSError): ...
class ImportError(Exception): ...
class ModuleNotFoundError(ImportError): ...
def getattr(o: object, name: str, default: Any = ..., /) -> Any: ...
def setattr(o: object, name: str, value: Any, /) -> None: ...
def hasattr(o: object, name: str, /) -> bool: ...
def map(f: Any, *its: Any) -> Any: ...
def filter(f: Any, it: Any) -> Any: ...
def format(value: Any, spec: str = "", /) -> str: ...
"""

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "default",
        "creationTimestamp": "2026-11-01T10:00:00Z",
        "labels": {"app": "web", "app.kubernetes.io/name": "web"},
    },
    "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
    "status": {
        "phase": "Running",
        "containerStatuses": [{"name": "app", "restartCount": 3, "ready": True}],
    },
}
FAKE: dict[str, Any] = {
    "list_kcps": {
        "kcps": [{"id": "k1", "kubeconfig": "/k/k1", "server": "https://k1", "running": True}],
        "errors": [],
    },
    "list_workspaces": {
        "workspaces": [
            {"name": "app", "path": "root:app", "type": "universal", "phase": "Ready", "url": None},
            {"name": "ops", "path": "root:ops", "type": None, "phase": None, "url": None},
        ]
    },
    "get_api_resources": {
        "resources": [
            {
                "name": "things",
                "short_names": [],
                "api_version": "socialweb.computer/v1",
                "namespaced": True,
                "kind": "Thing",
                "verbs": ["get", "list"],
                "categories": [],
            },
            {
                "name": "pods",
                "short_names": ["po"],
                "api_version": "v1",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get"],
                "categories": ["all"],
            },
        ]
    },
    "list_objects": {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [POD, POD]},
    "get_object": POD,
    "get_events": {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {},
        "items": [
            {
                "type": "Warning",
                "reason": "BackOff",
                "message": "restarting",
                "count": 4,
                "involvedObject": {"kind": "Pod", "name": "web-1"},
            },
            {
                "type": "Normal",
                "reason": "Pulled",
                "message": "ok",
                "count": 1,
                "involvedObject": {"kind": "Pod", "name": "web-1"},
            },
        ],
    },
    "get_logs": "INFO start\nERROR boom\nWARN slow\nINFO done",
    "apply_object": POD,
    "patch_object": POD,
    "scale_object": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 3},
    },
    "delete_object": 'configmap "x" deleted',
    "http_get": {
        "status": 200,
        "content_type": "application/json",
        "body": '{"items": [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": []}]}',
    },
}

# Single snippets, each in a fresh scope.
SNIPPETS: list[str] = [
    # spec example 1 (A1 shapes)
    'resources = await get_api_resources(workspace="root:app")\n'
    'sorted({r["kind"] for r in resources["resources"] '
    'if r["api_version"].startswith("socialweb.computer/")})',
    # spec example 2
    "pods, events = await asyncio.gather(\n"
    '    list_objects(workspace="root:app", resource="pods"),\n'
    '    get_events(workspace="root:app"),\n'
    ")\n"
    'bad = [p["metadata"]["name"] for p in pods["items"] if p["status"].get("phase") != "Running"]\n'
    '{"not_running": bad, "warnings": sum(1 for e in events["items"] if e["type"] == "Warning")}',
    'ids = [k["id"] for k in (await list_kcps())["kcps"] if k["running"]]\nids',
    'paths = [w["path"] for w in (await list_workspaces(workspace="root"))["workspaces"]]\npaths',
    'cms = await list_objects(workspace="root:app", resource="configmaps")\nnames(cms)',
    'count_by(await list_objects(workspace="root:app", resource="pods"), "status.phase")',
    'pod = await get_object(workspace="root:app", resource="pods", name="web-1", namespace="default")\n'
    '(dig(pod, "status.containerStatuses", 0, "restartCount"), '
    'dig(pod, "metadata.labels", "app.kubernetes.io/name"))',
    'r = await http_get(url="http://127.0.0.1:8080/api")\n'
    'data = json.loads(r["body"]) if r["status"] == 200 else {}\n'
    '[i["id"] for i in data.get("items", [])][:3]',
    'logs = await get_logs(workspace="root:app", pod="web-1", tail_lines=200)\n'
    '[line for line in logs.splitlines() if re.search(r"ERROR|WARN", line)][:20]',
    'ws = (await list_workspaces(workspace="root"))["workspaces"]\n'
    'res = await asyncio.gather(*[list_objects(workspace=w["path"], resource="pods") for w in ws])\n'
    '{w["name"]: len(r["items"]) for w, r in zip(ws, res)}',
    "try:\n"
    '    cm = await get_object(workspace="root:app", resource="configmaps", name="settings")\n'
    '    found = cm.get("data", {})\n'
    "except RuntimeError as e:\n"
    '    found = f"missing: {e}"\n'
    "found",
    'manifest = {"apiVersion": "v1", "kind": "ConfigMap", '
    '"metadata": {"name": "x", "namespace": "default"}, "data": {"k": "v"}}\n'
    'applied = await apply_object(workspace="root:app", manifest=manifest)\n'
    'patched = await patch_object(workspace="root:app", resource="configmaps", name="x", '
    'namespace="default", patch={"data": {"k": "v2"}})\n'
    '(applied["metadata"]["name"], patched["kind"])',
    'd = await scale_object(workspace="root:app", resource="deployments", name="web", '
    'namespace="default", replicas=3)\nd["spec"]["replicas"]',
    'msg = await delete_object(workspace="root:app", resource="configmaps", name="x", '
    'namespace="default")\nmsg',
    "async def pods_in(path):\n"
    '    r = await list_objects(workspace=path, resource="pods")\n'
    '    return path, len(r["items"])\n'
    'dict(await asyncio.gather(pods_in("root:app"), pods_in("root:ops")))',
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    "lines = [f\"{p['metadata']['name']:<20} {p['status']['phase']}\" for p in pods[\"items\"]]\n"
    '"\\n".join(lines)',
    'pods = (await list_objects(workspace="root:app", resource="pods"))["items"]\n'
    'newest = sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)\n'
    '[p["metadata"]["name"] for p in newest[:5]]',
    "import datetime\n"
    'pod = await get_object(workspace="root:app", resource="pods", name="web-1")\n'
    'ts = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))\n'
    "ts.year",
    "from collections import Counter\n"
    'evs = await get_events(workspace="root:app")\n'
    'Counter(e["reason"] for e in evs["items"]).most_common(3)',
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    '{p["metadata"]["name"]: p["metadata"].get("labels", {}).get("app", "-") for p in pods["items"]}',
    'evs = await get_events(workspace="root:app", field_selector="type=Warning")\n'
    'to_json([{"obj": dig(e, "involvedObject.name"), "msg": e["message"]} for e in items(evs)])',
    'a, b = await asyncio.gather(list_objects(workspace="root:app", resource="configmaps", '
    'namespace="default"), list_objects(workspace="root:ops", resource="configmaps", '
    'namespace="default"))\n'
    "sorted(set(names(a)) - set(names(b)))",
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    'oldest = min(pods["items"], key=lambda p: p["metadata"]["creationTimestamp"])\n'
    'oldest["metadata"]["name"]',
    'evs = await get_events(workspace="root:app")\ncount_by(evs, "reason")',
    'r = await http_get(url="http://127.0.0.1:8080/")\n'
    'print(r["status"], r["content_type"])\n'
    'json.dumps(json.loads(r["body"]), indent=2)[:500]',
    'r = await http_get(url="http://127.0.0.1:8080/")\n'
    'ok = r["status"] == 200 and "json" in (r["content_type"] or "")\nok',
    'pods = items(await list_objects(workspace="root:app", resource="pods"))\n'
    "for i, p in enumerate(pods):\n"
    '    if dig(p, "status.phase") != "Running":\n'
    '        print(i, p["metadata"]["name"])\n'
    "        break\n"
    "else:\n"
    '    print("all running")\n'
    "len(pods)",
    "import math\n"
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    'math.ceil(len(pods["items"]) / 3)',
    'ws = (await list_workspaces(workspace="root"))["workspaces"]\n'
    '[w["path"].split(":")[-1] for w in ws if (w["phase"] or "?") == "Ready"]',
    'evs = await get_events(workspace="root:app")\n'
    '[m for e in evs["items"] if (m := e.get("message")) and e["type"] == "Warning"]',
    "from dataclasses import dataclass\n"
    "@dataclass\n"
    "class Row:\n"
    "    name: str\n"
    "    restarts: int\n"
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    'rows = [Row(p["metadata"]["name"], dig(p, "status.containerStatuses", 0, "restartCount", default=0)) '
    'for p in pods["items"]]\n'
    "[r.name for r in rows if r.restarts > 2]",
    'obj = await get_object(workspace="root:app", resource="pods", name="web-1")\n'
    'match obj["kind"]:\n'
    '    case "Pod":\n'
    '        kind = "pod"\n'
    "    case _:\n"
    '        kind = "other"\n'
    "kind",
    "async def safe(path):\n"
    "    try:\n"
    '        return await list_objects(workspace=path, resource="pods")\n'
    "    except RuntimeError as e:\n"
    '        return {"error": str(e), "items": []}\n'
    'results = await asyncio.gather(*[safe(p) for p in ["root:app", "root:ops"]])\n'
    '[len(r["items"]) for r in results]',
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    "total = 0\n"
    'for p in pods["items"]:\n'
    '    for c in p["status"].get("containerStatuses", []):\n'
    '        total += c["restartCount"]\n'
    "total",
    'rs = (await get_api_resources(workspace="root:app"))["resources"]\n'
    "by_group = {}\n"
    "for r in rs:\n"
    '    by_group.setdefault(r["api_version"].split("/")[0], []).append(r["name"])\n'
    "by_group",
    'kc = await list_kcps()\nif kc["errors"]:\n    print("; ".join(kc["errors"]))\nlen(kc["kcps"])',
    'pods = await list_objects(workspace="root:app", resource="pods", selector="app=web")\n'
    'images = {c["image"] for p in pods["items"] for c in p["spec"]["containers"]}\n'
    "sorted(images)",
    'tasks = [get_logs(workspace="root:app", pod=n) for n in ["web-1", "web-2"]]\n'
    "logs = await asyncio.gather(*tasks)\n"
    '[sum(1 for l in t.splitlines() if "ERROR" in l) for t in logs]',
    'm = re.match(r"web-(\\d+)", "web-12")\nint(m.group(1))',
    'r = await http_get(url="http://127.0.0.1:8080/")\n'
    'body = json.loads(r["body"])\n'
    'first = body["items"][0] if body.get("items") else None\n'
    'first["id"] if first else None',
    "try:\n"
    '    await delete_object(workspace="root:app", resource="configmaps", name="x")\n'
    '    outcome = "deleted"\n'
    "except PermissionError:\n"
    '    outcome = "denied"\n'
    "except RuntimeError as e:\n"
    "    outcome = str(e)\n"
    "outcome",
    'pod = await get_object(workspace="root:app", resource="pods", name="web-1")\n'
    'getattr(pod, "keys", None) is not None and hasattr(pod, "get")',
    'evs = await get_events(workspace="root:app")\n'
    'top = max(evs["items"], key=lambda e: e.get("count", 0), default=None)\n'
    'top["reason"] if top else None',
    'counts = count_by(await get_events(workspace="root:app"), "type")\n'
    "sorted(counts.items(), key=lambda kv: -kv[1])[0][0]",
    'pods = await list_objects(workspace="root:app", resource="pods")\n'
    'list(map(lambda p: p["metadata"]["name"], filter(lambda p: p["kind"] == "Pod", pods["items"])))',
    "import time\nstart = time.time()\n"
    'r = await http_get(url="http://127.0.0.1:8080/")\n'
    'isinstance(r["body"], str) and time.time() >= start',
]

# Conversations: snippets run in order in one scope.
SEQUENCES: list[list[str]] = [
    [
        'pods = await list_objects(workspace="root:app", resource="pods")',
        'len(pods["items"])',
        "names(pods)[:10]",
    ],
    [
        'cms = await list_objects(workspace="root:app", resource="configmaps")\ncms["itms"]',
        # the first snippet failed at runtime after binding cms
        'len(cms["items"])',
    ],
    [
        "def summary(p):\n    return f\"{p['metadata']['name']}={dig(p, 'status.phase')}\"",
        'pods = await list_objects(workspace="root:app", resource="pods")\n'
        '[summary(p) for p in pods["items"]]',
    ],
]


async def tool_definitions() -> list[ToolDefinition]:
    """The bundled servers' tools, listed in-process exactly as MCP clients see them."""
    from servers.kcp.server import build_server as build_kcp
    from servers.simple.server import build_server as build_simple

    out = []
    for server in (build_kcp(kcp_dir=None), build_simple()):
        for t in await server.list_tools():
            out.append(ToolDefinition(t.name, t.description or "", t.input_schema, t.output_schema))
    return out


async def drive(session: AsyncMontySession, code: str, catalog: Catalog) -> Any:
    """Run ``code`` to completion, answering tool calls with FAKE results."""
    snap = await session.feed_start(code, print_callback=lambda _stream, _text: None)
    calls: dict[int, str] = {}
    while not isinstance(snap, MontyComplete):
        if isinstance(snap, AsyncFunctionSnapshot):
            if snap.is_os_function:
                snap = await snap.resume_auto()
            else:
                calls[snap.call_id] = str(snap.function_name)
                snap = await snap.resume({"future": ...})
        elif isinstance(snap, AsyncFutureSnapshot):
            snap = await snap.resume(
                {cid: {"return_value": FAKE[calls[cid]]} for cid in snap.pending_call_ids}
            )
        else:
            name = snap.variable_name
            if catalog.lookup(name) is not None:

                async def fn(**_kw: Any) -> None:  # never called: calls arrive as snapshots
                    return None

                snap = await snap.resume(value=fn)
            else:
                snap = await snap.resume()
    return snap.output


async def measure(
    pool: AsyncMonty, catalog: Catalog, type_check: bool
) -> tuple[int, int, list[str], float]:
    """(snippets, type errors, their texts, ms spent in feed_start's check on average)."""
    stubs = catalog.type_stubs() + MISSING_BUILTINS
    flagged: list[str] = []
    count = 0
    elapsed = 0.0
    for seq in [[s] for s in SNIPPETS] + SEQUENCES:
        async with pool.checkout(
            type_check=type_check, type_check_stubs=stubs, type_check_format="concise"
        ) as session:
            await session.feed_run(HELPERS_SOURCE, print_callback=lambda _s, _t: None)
            for code in seq:
                count += 1
                t0 = time.perf_counter()
                try:
                    await drive(session, code, catalog)
                except MontyTypingError as exc:
                    flagged.append(f"{code.splitlines()[0][:60]!r}: {exc.display().strip()}")
                except MontyRuntimeError as exc:
                    # runtime errors are expected only where a sequence says so
                    if "itms" not in code:
                        flagged.append(f"RUNTIME {code[:60]!r}: {exc.display('type-msg')}")
                except MontyError as exc:
                    flagged.append(f"OTHER {code[:60]!r}: {exc}")
                elapsed += time.perf_counter() - t0
    return count, len(flagged), flagged, elapsed * 1000 / max(count, 1)


async def main() -> int:
    """Measure with and without type checking; print a table and the flagged snippets."""
    catalog = Catalog(await tool_definitions())
    async with AsyncMonty(max_processes=2, checkout_timeout=60) as pool:
        plain = await measure(pool, catalog, type_check=False)
        checked = await measure(pool, catalog, type_check=True)
    await asyncio.sleep(0.05)
    print(f"# Monty type checker vs. catalog stubs ({datetime.date.today()}, pydantic-monty 1.4)")
    print()
    print("| mode | snippets | flagged | mean ms/snippet |")
    print("|---|---|---|---|")
    print(f"| no type check (runtime validity) | {plain[0]} | {plain[1]} | {plain[3]:.1f} |")
    print(f"| type_check=True | {checked[0]} | {checked[1]} | {checked[3]:.1f} |")
    for title, result in (("runtime failures", plain), ("type-check false positives", checked)):
        if result[2]:
            print(f"\n{title}:")
            for line in result[2]:
                print("-", line.replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
