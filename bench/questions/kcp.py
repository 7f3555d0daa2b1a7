"""A generated Kubernetes-like world for the bundled kcp server, and its questions.

``build`` makes, per seed, a few namespaces of deployments with their pods,
standalone job pods, services, events, configmaps and nodes in the workspace
``root:shop``, and writes them as the fixture files the fake kubectl reads
(``<resource>.json`` lists, ``logs.txt``, ``api-resources.txt``, the
workspaces list). Names, counts, values and order all come from
``random.Random(f"kcp:{seed}")``.

Every expected answer is computed from the ``Cluster`` kept in
``world.data["kcp"]``, the same objects the files hold.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.questions.core import (
    Case,
    Template,
    World,
    exactly,
    has_number,
    has_words,
    lacks_words,
    number_case,
    says_none,
)

__all__ = ["TEMPLATES", "Cluster", "build", "generate", "write_fixtures"]

#: The workspace the framework's kubeconfig serves; every prompt names it.
WS = "root:shop"

_FAKES = Path(__file__).resolve().parents[2] / "tests" / "fakes" / "kcp_fixtures"

_NAMESPACES = (
    "storefront", "payments", "search", "identity", "media", "billing",
    "catalog", "ingest", "analytics", "mail", "inventory", "shipping",
)  # fmt: skip
_APPS = (
    "web", "api", "worker", "cart", "checkout", "indexer", "gateway", "mailer",
    "scheduler", "cache", "ledger", "thumbnailer", "notifier", "recommender",
    "session", "reporter", "uploader", "pricing", "tracker", "resizer",
)  # fmt: skip
_NODE_POOLS = ("pool-a", "pool-b", "general", "highmem", "spot")
_CONFIG_KEYS = ("LOG_LEVEL", "MAX_CONNECTIONS", "CACHE_TTL", "REGION", "FEATURE_FLAGS")
_LEVELS = ("debug", "info", "warn", "error")
_REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "ap-south-1")
_JOBS = ("migrate-db", "reindex", "backfill", "export-report", "rotate-keys", "purge-cache")
_ALPHA = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class Container:
    name: str
    image: str
    restarts: int = 0
    waiting: str | None = None  # e.g. CrashLoopBackOff


@dataclass
class Pod:
    name: str
    namespace: str
    phase: str  # Running, Pending, Failed, Succeeded
    node: str | None
    labels: dict[str, str]
    containers: list[Container]
    start: datetime | None  # None while Pending
    app: str | None  # the deployment it belongs to, None for a job pod

    @property
    def restarts(self) -> int:
        return sum(c.restarts for c in self.containers)

    @property
    def ready(self) -> bool:
        return self.phase == "Running" and all(c.waiting is None for c in self.containers)


@dataclass
class Deployment:
    name: str
    namespace: str
    replicas: int
    image: str
    ready: int = 0


@dataclass
class Service:
    name: str
    namespace: str
    type: str
    port: int
    selector: dict[str, str]


@dataclass
class Event:
    name: str
    namespace: str
    type: str  # Normal, Warning
    reason: str
    message: str
    kind: str  # the involved object's kind
    object: str  # the involved object's name
    count: int
    first: datetime
    last: datetime


@dataclass
class ConfigMap:
    name: str
    namespace: str
    data: dict[str, str]


@dataclass
class Node:
    name: str
    ready: bool
    unschedulable: bool
    cpu: int
    memory_gi: int


@dataclass
class Cluster:
    """One seed's cluster: what the fixture files hold, as Python objects."""

    namespaces: list[str]
    nodes: list[Node]
    deployments: list[Deployment]
    pods: list[Pod]
    services: list[Service]
    events: list[Event]
    configmaps: list[ConfigMap]
    quiet: str  # the namespace with no Pending or Failed pod
    logs_pod: Pod  # the pod whose logs `logs.txt` holds
    logs: list[str] = field(default_factory=list)

    def pod(self, name: str) -> Pod:
        return next(p for p in self.pods if p.name == name)

    def deployment(self, name: str) -> Deployment:
        return next(d for d in self.deployments if d.name == name)


def _suffix(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_ALPHA) for _ in range(n))


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(seed: int) -> Cluster:
    """The cluster of ``seed``: pure, no files."""
    rng = random.Random(f"kcp:{seed}")
    namespaces = rng.sample(_NAMESPACES, rng.randint(3, 4))
    # The cluster's "now": a day in November, so start times and events differ per seed.
    now = datetime(2026, 11, rng.randint(3, 27), rng.randint(8, 20), rng.randint(0, 59), tzinfo=UTC)

    pools = rng.sample(_NODE_POOLS, 2)
    nodes = [
        Node(
            name=f"{rng.choice(pools)}-{_suffix(rng, 4)}",
            ready=True,
            unschedulable=False,
            cpu=rng.choice((4, 8, 16)),
            memory_gi=rng.choice((16, 32, 64)),
        )
        for _ in range(rng.randint(4, 6))
    ]
    # One node is cordoned and drained: it holds no pods (the "none" questions rely on it).
    cordoned = rng.choice(nodes)
    cordoned.unschedulable = True
    schedulable = [n.name for n in nodes if not n.unschedulable]
    # One namespace is healthy: no Pending or Failed pod, no job (for the "none" questions).
    quiet = rng.choice(namespaces)

    apps = rng.sample(_APPS, len(namespaces) * 3)
    deployments: list[Deployment] = []
    pods: list[Pod] = []
    for i, ns in enumerate(namespaces):
        for app in apps[i * 3 : i * 3 + rng.randint(2, 3)]:
            version = f"{rng.randint(1, 3)}.{rng.randint(0, 14)}.{rng.randint(0, 9)}"
            image = f"registry.shop.example/{ns}/{app}:{version}"
            dep = Deployment(app, ns, rng.randint(1, 4), image)
            deployments.append(dep)
            template = _suffix(rng, 5 + rng.randint(0, 4))
            sidecar = rng.random() < 0.3
            for _ in range(dep.replicas):
                phase = rng.choices(("Running", "Pending", "Failed"), (8, 1, 1))[0]
                if ns == quiet:
                    phase = "Running"
                containers = [Container(app, image)]
                if sidecar:
                    containers.append(Container("log-shipper", "fluent/fluent-bit:3.1"))
                if phase != "Pending":
                    for c in containers:
                        c.restarts = rng.choices(
                            (0, rng.randint(1, 6), rng.randint(7, 40)), (6, 3, 1)
                        )[0]
                    if phase == "Running" and containers[0].restarts > 6:
                        containers[0].waiting = "CrashLoopBackOff"
                start = (
                    None
                    if phase == "Pending"
                    else now - timedelta(minutes=rng.randint(20, 60 * 24 * 9))
                )
                pods.append(
                    Pod(
                        name=f"{app}-{template}-{_suffix(rng, 5)}",
                        namespace=ns,
                        phase=phase,
                        node=None if phase == "Pending" else rng.choice(schedulable),
                        labels={"app": app, "pod-template-hash": template},
                        containers=containers,
                        start=start,
                        app=app,
                    )
                )
    for job in rng.sample(_JOBS, rng.randint(2, 3)):
        ns = rng.choice([n for n in namespaces if n != quiet])
        phase = rng.choice(("Succeeded", "Failed"))
        name = f"{job}-{rng.randint(28000000, 29999999)}-{_suffix(rng, 5)}"
        pods.append(
            Pod(
                name=name,
                namespace=ns,
                phase=phase,
                node=rng.choice(schedulable),
                labels={"job-name": name.rsplit("-", 1)[0]},
                containers=[
                    Container(job, f"registry.shop.example/ops/{job}:1.0.{rng.randint(0, 9)}")
                ],
                start=now - timedelta(minutes=rng.randint(60, 60 * 24 * 3)),
                app=None,
            )
        )
    _unique_max(pods, rng)
    for dep in deployments:
        dep.ready = sum(1 for p in pods if p.app == dep.name and p.ready)
    rng.shuffle(pods)
    rng.shuffle(deployments)

    services: list[Service] = []
    for dep in deployments:
        if rng.random() < 0.75:
            services.append(
                Service(
                    dep.name,
                    dep.namespace,
                    rng.choice(("ClusterIP", "ClusterIP", "NodePort", "LoadBalancer")),
                    rng.choice((80, 8080, 9000, 3000)),
                    {"app": dep.name},
                )
            )
    # An orphan service: its selector matches no pod (its deployment was removed).
    gone = rng.choice([a for a in _APPS if a not in apps])
    services.append(
        Service(f"{gone}-legacy", rng.choice(namespaces), "ClusterIP", 8080, {"app": gone})
    )
    rng.shuffle(services)

    events = _events(rng, pods, deployments, now)
    configmaps = _configmaps(rng, namespaces, deployments)
    logs_pod = rng.choice([p for p in pods if p.phase == "Running" and p.app])
    return Cluster(
        namespaces=namespaces,
        nodes=nodes,
        deployments=deployments,
        pods=pods,
        services=services,
        events=events,
        configmaps=configmaps,
        quiet=quiet,
        logs_pod=logs_pod,
        logs=_logs(rng, logs_pod, now),
    )


def _unique_max(pods: list[Pod], rng: random.Random) -> None:
    """Give one running pod strictly the most restarts, crash-looping, so "which pod" has one
    answer and every seed has a crash loop."""
    top = max(p.restarts for p in pods)
    pod = rng.choice([p for p in pods if p.phase == "Running" and p.app])
    pod.containers[0].restarts += top - pod.restarts + rng.randint(1, 5)
    pod.containers[0].waiting = "CrashLoopBackOff"


def _events(
    rng: random.Random, pods: list[Pod], deployments: list[Deployment], now: datetime
) -> list[Event]:
    events: list[Event] = []

    def add(pod_or_dep: Any, kind: str, etype: str, reason: str, message: str, count: int) -> None:
        last = now - timedelta(minutes=rng.randint(1, 600))
        # A repeated event spans some minutes per occurrence (back-offs grow to 5 minutes).
        first = last - timedelta(minutes=rng.randint(count, count * 6) if count > 1 else 0)
        name = f"{pod_or_dep.name}.{rng.getrandbits(48):012x}"
        events.append(
            Event(
                name,
                pod_or_dep.namespace,
                etype,
                reason,
                message,
                kind,
                pod_or_dep.name,
                count,
                first,
                last,
            )
        )

    for pod in pods:
        if pod.phase == "Pending":
            add(
                pod,
                "Pod",
                "Warning",
                "FailedScheduling",
                "0/5 nodes are available: insufficient cpu.",
                rng.randint(1, 30),
            )
            continue
        if rng.random() < 0.4:
            add(
                pod,
                "Pod",
                "Normal",
                "Pulled",
                f'Successfully pulled image "{pod.containers[0].image}"',
                1,
            )
        if pod.containers[0].waiting:
            add(
                pod,
                "Pod",
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {pod.containers[0].name}",
                pod.containers[0].restarts + rng.randint(0, 10),
            )
        if pod.phase == "Running" and rng.random() < 0.25:
            add(
                pod,
                "Pod",
                "Warning",
                "Unhealthy",
                "Readiness probe failed: HTTP probe failed with statuscode: 503",
                rng.randint(1, 25),
            )
        if pod.phase == "Failed" and pod.app:
            add(
                pod,
                "Pod",
                "Warning",
                "Failed",
                f'Failed to pull image "{pod.containers[0].image}": not found',
                rng.randint(1, 8),
            )
    for dep in deployments:
        if rng.random() < 0.5:
            add(
                dep,
                "Deployment",
                "Normal",
                "ScalingReplicaSet",
                f"Scaled up replica set to {dep.replicas}",
                1,
            )
    rng.shuffle(events)
    return events


def _configmaps(
    rng: random.Random, namespaces: list[str], deployments: list[Deployment]
) -> list[ConfigMap]:
    maps = []
    for dep in deployments:
        if rng.random() < 0.6:
            keys = rng.sample(_CONFIG_KEYS, rng.randint(2, 4))
            data = {}
            for key in keys:
                if key == "LOG_LEVEL":
                    data[key] = rng.choice(_LEVELS)
                elif key == "MAX_CONNECTIONS":
                    data[key] = str(rng.choice((50, 100, 200, 250, 500)))
                elif key == "CACHE_TTL":
                    data[key] = f"{rng.choice((30, 60, 300, 900))}s"
                elif key == "REGION":
                    data[key] = rng.choice(_REGIONS)
                else:
                    data[key] = ",".join(
                        rng.sample(("new-checkout", "dark-mode", "beta-search", "fast-pay"), 2)
                    )
            maps.append(ConfigMap(f"{dep.name}-config", dep.namespace, data))
    for ns in namespaces:
        maps.append(
            ConfigMap(
                "kube-root-ca.crt",
                ns,
                {"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
            )
        )
    rng.shuffle(maps)
    return maps


def _logs(rng: random.Random, pod: Pod, now: datetime) -> list[str]:
    lines = []
    t = now - timedelta(minutes=90)
    paths = ("/healthz", f"/api/{pod.app}", "/metrics", f"/api/{pod.app}/items")
    for _ in range(rng.randint(25, 45)):
        t += timedelta(seconds=rng.randint(5, 200))
        level = rng.choices(("INFO", "WARN", "ERROR"), (12, 3, 2))[0]
        if level == "INFO":
            msg = f"GET {rng.choice(paths)} 200 {rng.randint(2, 90)}ms"
        elif level == "WARN":
            msg = f"slow request GET {rng.choice(paths)} took {rng.randint(900, 4000)}ms"
        else:
            msg = rng.choice(
                (
                    "upstream connect error: connection refused",
                    "database timeout after 5000ms",
                    "payment provider returned 502",
                )
            )
        lines.append(f"{_ts(t)} {level} {msg}")
    if not any(" ERROR " in line for line in lines):
        at = rng.randrange(len(lines))
        lines[at] = f"{lines[at].split()[0]} ERROR database timeout after 5000ms"
    return lines


# ---- the fixture files ------------------------------------------------------------------------


def _meta(name: str, namespace: str | None, created: datetime, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(
        uid=f"uid-{name}",
        resourceVersion="100",
        creationTimestamp=_ts(created),
        annotations={"kcp.io/cluster": "2abc"},
    )
    meta.update(extra)
    return meta


def _list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def _pod_json(pod: Pod, created: datetime) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": c.name, "image": c.image} for c in pod.containers]
    }
    if pod.node:
        spec["nodeName"] = pod.node
    status: dict[str, Any] = {"phase": pod.phase}
    if pod.start is not None:
        status["startTime"] = _ts(pod.start)
        statuses = []
        for c in pod.containers:
            state: dict[str, Any]
            if c.waiting:
                state = {"waiting": {"reason": c.waiting}}
            elif pod.phase == "Running":
                state = {"running": {"startedAt": _ts(pod.start)}}
            else:
                state = {"terminated": {"exitCode": 0 if pod.phase == "Succeeded" else 1}}
            statuses.append(
                {
                    "name": c.name,
                    "image": c.image,
                    "ready": pod.ready,
                    "restartCount": c.restarts,
                    "state": state,
                }
            )
        status["containerStatuses"] = statuses
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(pod.name, pod.namespace, pod.start or created, labels=pod.labels),
        "spec": spec,
        "status": status,
    }


def write_fixtures(cluster: Cluster, directory: Path) -> None:
    """The fake kubectl's fixture files (its layout: one ``<resource>.json`` List each)."""
    directory.mkdir(parents=True, exist_ok=True)
    created = min(p.start for p in cluster.pods if p.start) - timedelta(days=3)
    pods = [_pod_json(p, created) for p in cluster.pods]
    deployments = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(d.name, d.namespace, created, labels={"app": d.name}),
            "spec": {
                "replicas": d.replicas,
                "selector": {"matchLabels": {"app": d.name}},
                "template": {
                    "metadata": {"labels": {"app": d.name}},
                    "spec": {"containers": [{"name": d.name, "image": d.image}]},
                },
            },
            # Like the API server, the status leaves out counts that are zero.
            "status": {
                "replicas": d.replicas,
                **({"readyReplicas": d.ready, "availableReplicas": d.ready} if d.ready else {}),
                **({"unavailableReplicas": d.replicas - d.ready} if d.ready < d.replicas else {}),
            },
        }
        for d in cluster.deployments
    ]
    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(s.name, s.namespace, created),
            "spec": {
                "type": s.type,
                "selector": s.selector,
                "ports": [{"port": s.port, "targetPort": s.port, "protocol": "TCP"}],
            },
        }
        for s in cluster.services
    ]
    events = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": _meta(e.name, e.namespace, e.first),
            "type": e.type,
            "reason": e.reason,
            "message": e.message,
            "count": e.count,
            "firstTimestamp": _ts(e.first),
            "lastTimestamp": _ts(e.last),
            "involvedObject": {"kind": e.kind, "name": e.object, "namespace": e.namespace},
            "source": {"component": "kubelet" if e.kind == "Pod" else "deployment-controller"},
        }
        for e in cluster.events
    ]
    configmaps = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(c.name, c.namespace, created),
            "data": c.data,
        }
        for c in cluster.configmaps
    ]
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": _meta(
                n.name, None, created, labels={"node-pool": n.name.rsplit("-", 1)[0]}
            ),
            "spec": {"unschedulable": True} if n.unschedulable else {},
            "status": {
                "capacity": {"cpu": str(n.cpu), "memory": f"{n.memory_gi}Gi"},
                "conditions": [{"type": "Ready", "status": "True" if n.ready else "False"}],
            },
        }
        for n in cluster.nodes
    ]
    namespaces = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(ns, None, created),
            "status": {"phase": "Active"},
        }
        for ns in cluster.namespaces
    ]
    for resource, items in (
        ("pods", pods),
        ("deployments", deployments),
        ("deployments.apps", deployments),
        ("services", services),
        ("events", events),
        ("configmaps", configmaps),
        ("nodes", nodes),
        ("namespaces", namespaces),
    ):
        (directory / f"{resource}.json").write_text(json.dumps(_list(items), indent=1))
    (directory / "logs.txt").write_text("\n".join(cluster.logs) + "\n")
    resources = (_FAKES / "api-resources.txt").read_text().splitlines()
    verbs = "create,delete,deletecollection,get,list,patch,update,watch"
    extra = [
        f"{name:<30}{short:<13}{'v1':<34}{namespaced:<13}{kind:<29}{verbs:<61}{cats}".rstrip()
        for name, short, namespaced, kind, cats in (
            ("nodes", "no", "false", "Node", ""),
            ("namespaces", "ns", "false", "Namespace", ""),
            ("services", "svc", "true", "Service", "all"),
        )
    ]
    (directory / "api-resources.txt").write_text(
        "\n".join([*resources[:1], *extra, *resources[1:]]) + "\n"
    )
    # The fake's workspaces plus "shop", so list_workspaces under root shows the one asked about.
    workspaces = "workspaces.tenancy.kcp.io.json"
    listing = json.loads((_FAKES / workspaces).read_text())
    shop = json.loads(json.dumps(listing["items"][0]))
    shop["metadata"].update(name=WS.rsplit(":", 1)[1], uid="uid-shop")
    listing["items"].append(shop)
    (directory / workspaces).write_text(json.dumps(listing, indent=1))


def build(world: World) -> None:
    """Generate this seed's cluster, write its fixtures, keep it in ``world.data["kcp"]``."""
    cluster = generate(world.seed)
    write_fixtures(cluster, world.kcp_fixtures)
    world.data["kcp"] = cluster


# ---- questions --------------------------------------------------------------------------------


def _cluster(world: World) -> Cluster:
    cluster: Cluster = world.data["kcp"]
    return cluster


def _pick(template_id: str, world: World) -> random.Random:
    """The template's own choices for this seed (which namespace, which threshold)."""
    return random.Random(f"{template_id}:{world.seed}")


def _segments(reply: str) -> list[str]:
    return [s for s in re.split(r"[\n;]|,\s", reply) if s.strip()]


def _pairs(reply: str, wanted: dict[str, Any]) -> bool:
    """Every key of ``wanted`` is stated on a line (or list item) that also states its value."""
    segments = _segments(reply)
    for key, value in wanted.items():
        if not any(
            has_words(s, key)
            and (has_number(s, value) if isinstance(value, int | float) else has_words(s, value))
            for s in segments
        ):
            return False
    return True


def _one_of(reply: str, winners: set[str], candidates: set[str]) -> bool:
    """One of ``winners`` (tied answers) is named and none of the other candidates."""
    return any(has_words(reply, w) for w in winners) and lacks_words(reply, *(candidates - winners))


def _says_no_pods(reply: str) -> bool:
    """ "None", or the plain "it has no pods" the core's phrases leave out."""
    return says_none(reply) or re.search(r"\bno (?:[\w-]+ ){0,3}pods?\b", reply, re.I) is not None


def _names(names: list[str] | set[str], empty: str = "none") -> str:
    return ", ".join(sorted(names)) or empty


def _count_in_phase(world: World) -> Case:
    c = _cluster(world)
    counts = Counter((p.namespace, p.phase) for p in c.pods)
    ns, phase = _pick("kcp.count-pods-in-phase", world).choice(sorted(counts))
    n = counts[ns, phase]
    return number_case(
        f"In the kcp workspace {WS}, how many pods in the namespace {ns} are in phase {phase}? "
        "Reply with the number.",
        n,
    )


def _restarted_pods(world: World) -> Case:
    c = _cluster(world)
    totals = sorted({p.restarts for p in c.pods})
    # A threshold that leaves a few pods above it, not just the one crash-looping leader.
    below_top = totals[:-1]
    k = _pick("kcp.count-restarted-pods", world).choice(below_top[1:-1] or below_top)
    n = sum(1 for p in c.pods if p.restarts > k)
    return number_case(
        f"How many pods in the kcp workspace {WS} (all namespaces) have restarted more than {k} "
        f"time{'s' if k != 1 else ''}, adding up the restart counts of all their containers? "
        "Reply with the number.",
        n,
    )


def _node_restarts(world: World) -> Case:
    c = _cluster(world)
    per_node: Counter[str] = Counter()
    for p in c.pods:
        if p.node:
            per_node[p.node] += p.restarts
    top = max(per_node.values())
    winners = {n for n, v in per_node.items() if v == top}
    nodes = {n.name for n in c.nodes}
    return Case(
        f"In the kcp workspace {WS}, on which node have the pods restarted the most in total "
        "(the restarts of all containers of all pods assigned to it, any namespace)? Reply with "
        "the node name and that total.",
        f"{_names(winners)} ({top})",
        lambda r: _one_of(r, winners, nodes) and has_number(r, top),
    )


def _longest_running(world: World) -> Case:
    c = _cluster(world)
    spaces = sorted({p.namespace for p in c.pods if p.phase == "Running"})
    ns = _pick("kcp.longest-running-pod", world).choice(spaces)
    running = [p for p in c.pods if p.namespace == ns and p.phase == "Running" and p.start]
    first = min(running, key=lambda p: p.start or datetime.max.replace(tzinfo=UTC))
    others = {p.name for p in c.pods if p.namespace == ns} - {first.name}
    return Case(
        f"Which Running pod in the namespace {ns} of the kcp workspace {WS} has been up the "
        "longest, that is, has the earliest start time? Reply with the pod name.",
        first.name,
        lambda r: exactly(r, [first.name], others),
    )


def _not_ready(world: World) -> Case:
    c = _cluster(world)
    short = {d.name for d in c.deployments if d.ready < d.replicas}
    full = {d.name for d in c.deployments} - short
    text = (
        f"Which deployments in the kcp workspace {WS} have fewer ready replicas than the "
        "replicas they ask for? Look at every namespace. Reply with their names, or say none."
    )
    if not short:
        return Case(text, "none", lambda r: says_none(r) and lacks_words(r, *full), no_data=True)
    return Case(text, _names(short), lambda r: exactly(r, short, full))


def _pods_per_node(world: World) -> Case:
    c = _cluster(world)
    counts = Counter(p.node for p in c.pods if p.node)
    wanted = dict(counts)
    return Case(
        f"How many pods are assigned to each node in the kcp workspace {WS} (spec.nodeName, any "
        "phase, all namespaces)? Reply with one line per node: its name and the count. Leave out "
        "nodes with no pods.",
        "; ".join(f"{n}: {v}" for n, v in sorted(wanted.items())),
        lambda r: _pairs(r, wanted),
    )


def _warning_reasons(world: World) -> Case:
    c = _cluster(world)
    spaces = sorted({e.namespace for e in c.events if e.type == "Warning"})
    ns = _pick("kcp.warning-reasons", world).choice(spaces)
    totals: Counter[str] = Counter()
    for e in c.events:
        if e.namespace == ns and e.type == "Warning":
            totals[e.reason] += e.count
    wanted = dict(totals)
    return Case(
        f"In the namespace {ns} of the kcp workspace {WS}, add up the count field of the Warning "
        "events for each reason. Reply with one line per reason: the reason and its total.",
        "; ".join(f"{k}: {v}" for k, v in sorted(wanted.items())),
        lambda r: _pairs(r, wanted),
    )


def _backoff_by_deployment(world: World) -> Case:
    c = _cluster(world)
    totals: Counter[str] = Counter()
    for e in c.events:
        if e.reason == "BackOff" and e.kind == "Pod":
            app = c.pod(e.object).app
            if app:
                totals[app] += e.count
    top = max(totals.values())
    winners = {a for a, v in totals.items() if v == top}
    return Case(
        f"In the kcp workspace {WS}, which deployment's pods have the most BackOff events, adding "
        "up each event's count? Events name the pod; a pod's app label names its deployment. "
        "Reply with the deployment name.",
        _names(winners),
        lambda r: _one_of(r, winners, {d.name for d in c.deployments}),
    )


def _backoff_node(world: World) -> Case:
    c = _cluster(world)
    backoff = [e for e in c.events if e.reason == "BackOff"]
    top = max(e.count for e in backoff)
    winners = {c.pod(e.object).node or "" for e in backoff if e.count == top}
    return Case(
        f"In the kcp workspace {WS}, find the BackOff event with the highest count. Which node "
        "does the pod it is about run on? Reply with the node name.",
        _names(winners),
        lambda r: _one_of(r, winners, {n.name for n in c.nodes}),
    )


def _orphan_service(world: World) -> Case:
    c = _cluster(world)

    def selects(s: Service) -> bool:
        return any(
            p.namespace == s.namespace and all(p.labels.get(k) == v for k, v in s.selector.items())
            for p in c.pods
        )

    orphans = {s.name for s in c.services if not selects(s)}
    others = {s.name for s in c.services} - orphans
    return Case(
        f"In the kcp workspace {WS}, which services select no pod at all (no pod in the service's "
        "namespace carries all the labels of its selector)? Reply with the service names.",
        _names(orphans),
        lambda r: exactly(r, orphans, others),
    )


def _unconfigured(world: World) -> Case:
    c = _cluster(world)
    maps = {(m.namespace, m.name) for m in c.configmaps}
    missing = {d.name for d in c.deployments if (d.namespace, f"{d.name}-config") not in maps}
    others = {d.name for d in c.deployments} - missing
    text = (
        f"In the kcp workspace {WS}, each deployment should have a configmap named "
        "<deployment>-config in its own namespace. Which deployments have none? Reply with their "
        "names, or say none."
    )
    if not missing:
        return Case(text, "none", lambda r: says_none(r) and lacks_words(r, *others), no_data=True)
    return Case(text, _names(missing), lambda r: exactly(r, missing, others))


def _cordoned_node(world: World) -> Case:
    c = _cluster(world)
    node = next(n.name for n in c.nodes if n.unschedulable)
    on_it = {p.name for p in c.pods if p.node == node}
    text = (
        f"We cordoned and drained the node {node} in the kcp workspace {WS}. Which pods are still "
        "assigned to it? Reply with their names, or say there are none."
    )
    if on_it:  # the world promises none; keep the checker honest if that ever changes
        return Case(text, _names(on_it), lambda r: has_words(r, *on_it))
    pods = {p.name for p in c.pods}
    return Case(text, "none", lambda r: _says_no_pods(r) and lacks_words(r, *pods), no_data=True)


def _quiet_namespace(world: World) -> Case:
    c = _cluster(world)
    bad = {p.name for p in c.pods if p.namespace == c.quiet and p.phase in ("Pending", "Failed")}
    text = (
        f"Are any pods in the namespace {c.quiet} of the kcp workspace {WS} Pending or Failed? "
        "Reply with their names, or say there are none."
    )
    if bad:
        return Case(text, _names(bad), lambda r: has_words(r, *bad))
    pods = {p.name for p in c.pods}
    return Case(text, "none", lambda r: _says_no_pods(r) and lacks_words(r, *pods), no_data=True)


def _event_span(world: World) -> Case:
    c = _cluster(world)
    spans = [e for e in c.events if e.kind == "Pod" and e.last > e.first]
    e = _pick("kcp.event-span-minutes", world).choice(spans)
    minutes = int((e.last - e.first).total_seconds() // 60)
    return number_case(
        f"In the kcp workspace {WS}, the {e.reason} event about the pod {e.object} (namespace "
        f"{e.namespace}): how many minutes passed between its firstTimestamp and its "
        "lastTimestamp? Reply with the number of minutes.",
        minutes,
    )


def _started_on(world: World) -> Case:
    c = _cluster(world)
    days = Counter(p.start.date() for p in c.pods if p.start)
    day = _pick("kcp.pods-started-on-day", world).choice(sorted(days))
    n = days[day]
    return number_case(
        f"How many pods in the kcp workspace {WS} (all namespaces) have a start time on "
        f"{day.isoformat()} (UTC)? Reply with the number.",
        n,
    )


def _log_errors(world: World) -> Case:
    c = _cluster(world)
    pod = c.logs_pod
    n = sum(1 for line in c.logs if line.split()[1] == "ERROR")
    return number_case(
        f"How many ERROR lines are in the logs of the pod {pod.name} (namespace {pod.namespace}) "
        f"in the kcp workspace {WS}? Reply with the number.",
        n,
    )


_K = ("kcp",)

TEMPLATES: list[Template] = [
    Template("kcp.count-pods-in-phase", "count", _K, _count_in_phase),
    Template("kcp.count-restarted-pods", "count", _K, _restarted_pods),
    Template("kcp.node-most-restarts", "argmax", _K, _node_restarts),
    Template("kcp.longest-running-pod", "argmax", _K, _longest_running),
    Template("kcp.deployments-not-ready", "count", _K, _not_ready),
    Template("kcp.pods-per-node", "group", _K, _pods_per_node),
    Template("kcp.warning-reasons", "group", _K, _warning_reasons),
    Template("kcp.backoff-by-deployment", "join", _K, _backoff_by_deployment),
    Template("kcp.backoff-pod-node", "two-hop", _K, _backoff_node),
    Template("kcp.orphan-services", "join", _K, _orphan_service),
    Template("kcp.deployments-without-config", "join", _K, _unconfigured),
    Template("kcp.pods-on-cordoned-node", "none", _K, _cordoned_node),
    Template("kcp.unhealthy-pods-in-quiet-namespace", "none", _K, _quiet_namespace),
    Template("kcp.event-span-minutes", "time", _K, _event_span),
    Template("kcp.pods-started-on-day", "time", _K, _started_on),
    Template("kcp.log-error-lines", "text", _K, _log_errors),
]
