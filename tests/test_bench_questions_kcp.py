"""The kcp and tool-less question templates hold against their own expected answers.

For each of three seeds: the expected answer passes the checker, "I do not know."
fails it unless the case expects no data, a number one off fails, and the seeds
differ in prompt or answer. The kcp world's fixture files are written in the fake
kubectl's layout, and every kcp answer is recomputed from those files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from bench.questions import kcp, tooless
from bench.questions.core import SHAPES, Case, Template, World

SEEDS = (1, 2, 3)
TEMPLATES = [*kcp.TEMPLATES, *tooless.TEMPLATES]


def _world(seed: int, root: Path) -> World:
    world = World(
        seed=seed,
        root=root,
        base_url="http://127.0.0.1:9",
        kcp_fixtures=root / "fixtures",
        repo=root / "repo",
        db=root / "shop.db",
    )
    kcp.build(world)
    tooless.build(world)
    return world


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[int, World]:
    return {s: _world(s, tmp_path_factory.mktemp(f"seed{s}")) for s in SEEDS}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_expected_answer_passes_and_ignorance_fails(
    template: Template, worlds: dict[int, World]
) -> None:
    """Each seed's expected answer passes; "I do not know." fails, unless no data is right."""
    cases: list[Case] = [template.make(worlds[s]) for s in SEEDS]
    for case in cases:
        assert case.check(case.answer), (template.id, case.text, case.answer)
        if not case.no_data:
            assert not case.check("I do not know."), (template.id, case.text)
        if re.fullmatch(r"-?\d+(\.\d+)?", case.answer):  # a number: one off is wrong
            off = f"{float(case.answer) + 1:.{len(case.answer.partition('.')[2])}f}"
            assert not case.check(off), (template.id, case.text, off)
    assert len({(c.text, c.answer) for c in cases}) > 1, template.id


def test_ids_unique_and_shapes_known() -> None:
    """Template ids are unique and name their domain; shapes are the core's."""
    ids = [t.id for t in TEMPLATES]
    assert len(ids) == len(set(ids))
    assert all(t.shape in SHAPES for t in TEMPLATES)
    assert all(t.id.split(".")[0] in ("kcp", "tooless") for t in TEMPLATES)


def test_kcp_world_changes_with_seed_and_is_written_as_lists(worlds: dict[int, World]) -> None:
    """Each seed writes List JSON files the fake kubectl reads, with different pods."""
    names = []
    for world in worlds.values():
        for resource in ("pods", "deployments", "events", "configmaps", "services", "nodes"):
            data = json.loads((world.kcp_fixtures / f"{resource}.json").read_text())
            assert data["kind"] == "List", resource
            assert data["items"], resource
        pods = json.loads((world.kcp_fixtures / "pods.json").read_text())["items"]
        names.append(sorted(p["metadata"]["name"] for p in pods))
        assert (world.kcp_fixtures / "logs.txt").read_text().strip()
    assert names[0] != names[1] != names[2]


def test_kcp_world_is_deterministic(tmp_path: Path) -> None:
    """The same seed writes the same files."""
    a, b = _world(7, tmp_path / "a"), _world(7, tmp_path / "b")
    for path in sorted(a.kcp_fixtures.iterdir()):
        assert path.read_text() == (b.kcp_fixtures / path.name).read_text(), path.name


# ---- the answers are in the files the tools serve ---------------------------------------------
#
# The checkers compute from the generated Cluster; these recompute every answer the way a
# model would, from the fixture JSON the kcp tools return, with the prompt's parameters:


def _items(world: World, resource: str) -> list[dict]:
    return json.loads((world.kcp_fixtures / f"{resource}.json").read_text())["items"]


def _restarts(pod: dict) -> int:
    return sum(s["restartCount"] for s in pod["status"].get("containerStatuses", []))


def _params(pattern: str, text: str) -> tuple[str, ...]:
    """The prompt's parameters (a namespace, a threshold) that ``pattern`` captures."""
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return match.groups()


def _from_files(template_id: str, text: str, world: World) -> str:
    """The reply a careful model would give from the fixture JSON: one branch per template."""
    pods = _items(world, "pods")
    events = _items(world, "events")
    if template_id == "kcp.count-pods-in-phase":
        ns, phase = _params(r"namespace (\S+) are in phase (\w+)", text)
        hits = [p for p in pods if p["metadata"]["namespace"] == ns]
        return str(sum(p["status"]["phase"] == phase for p in hits))
    if template_id == "kcp.count-restarted-pods":
        k = int(_params(r"more than (\d+)", text)[0])
        return str(sum(_restarts(p) > k for p in pods))
    if template_id == "kcp.pods-per-node":
        nodes = Counter(p["spec"]["nodeName"] for p in pods if "nodeName" in p["spec"])
        return "\n".join(f"{n}: {c}" for n, c in nodes.items())
    if template_id == "kcp.deployments-not-ready":
        names = [
            d["metadata"]["name"]
            for d in _items(world, "deployments")
            if d["status"].get("readyReplicas", 0) < d["spec"]["replicas"]
        ]
        return ", ".join(names) or "none"
    if template_id == "kcp.backoff-by-deployment":
        app = {p["metadata"]["name"]: p["metadata"]["labels"].get("app") for p in pods}
        totals: Counter[str] = Counter()
        for e in events:
            if e["reason"] == "BackOff":
                totals[app[e["involvedObject"]["name"]]] += e["count"]
        return totals.most_common(1)[0][0]
    if template_id == "kcp.event-span-minutes":
        reason, pod = _params(r"the (\w+) event about the pod (\S+) ", text)
        e = next(e for e in events if e["reason"] == reason and e["involvedObject"]["name"] == pod)
        first, last = (
            datetime.fromisoformat(e[k].replace("Z", "+00:00"))
            for k in ("firstTimestamp", "lastTimestamp")
        )
        return str(int((last - first).total_seconds() // 60))
    if template_id == "kcp.log-error-lines":
        lines = (world.kcp_fixtures / "logs.txt").read_text().splitlines()
        return str(sum(" ERROR " in line for line in lines))
    node = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    if template_id == "kcp.node-most-restarts":
        totals: Counter[str] = Counter()
        for p in pods:
            if "nodeName" in p["spec"]:
                totals[p["spec"]["nodeName"]] += _restarts(p)
        name, total = totals.most_common(1)[0]
        return f"{name} with {total} restarts"
    if template_id == "kcp.longest-running-pod":
        (ns,) = _params(r"in the namespace (\S+) of", text)
        running = [
            p
            for p in pods
            if p["metadata"]["namespace"] == ns and p["status"]["phase"] == "Running"
        ]
        return min(running, key=lambda p: p["status"]["startTime"])["metadata"]["name"]
    if template_id == "kcp.warning-reasons":
        (ns,) = _params(r"In the namespace (\S+) of", text)
        reasons: Counter[str] = Counter()
        for e in events:
            if e["metadata"]["namespace"] == ns and e["type"] == "Warning":
                reasons[e["reason"]] += e["count"]
        return "\n".join(f"{r}: {n}" for r, n in reasons.items())
    if template_id == "kcp.backoff-pod-node":
        top = max((e for e in events if e["reason"] == "BackOff"), key=lambda e: e["count"])
        return str(node[top["involvedObject"]["name"]])
    if template_id == "kcp.orphan-services":
        orphans = [
            s["metadata"]["name"]
            for s in _items(world, "services")
            if not any(
                p["metadata"]["namespace"] == s["metadata"]["namespace"]
                and s["spec"]["selector"].items() <= p["metadata"]["labels"].items()
                for p in pods
            )
        ]
        return ", ".join(orphans)
    if template_id == "kcp.deployments-without-config":
        maps = {
            (m["metadata"]["namespace"], m["metadata"]["name"]) for m in _items(world, "configmaps")
        }
        missing = [
            d["metadata"]["name"]
            for d in _items(world, "deployments")
            if (d["metadata"]["namespace"], d["metadata"]["name"] + "-config") not in maps
        ]
        return ", ".join(missing) or "none"
    if template_id == "kcp.pods-on-cordoned-node":
        (name,) = _params(r"the node (\S+) in", text)
        on_it = [p for p, n in node.items() if n == name]
        return ", ".join(on_it) or "There are none."
    if template_id == "kcp.unhealthy-pods-in-quiet-namespace":
        (ns,) = _params(r"in the namespace (\S+) of", text)
        bad = [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["namespace"] == ns and p["status"]["phase"] in ("Pending", "Failed")
        ]
        return ", ".join(bad) or "There are none."
    if template_id == "kcp.pods-started-on-day":
        (day,) = _params(r"start time on (\S+) ", text)
        return str(sum(p["status"].get("startTime", "").startswith(day) for p in pods))
    raise KeyError(template_id)


RECOMPUTED = [t.id for t in kcp.TEMPLATES]


@pytest.mark.parametrize("template_id", RECOMPUTED)
def test_answers_follow_from_the_fixture_files(template_id: str, worlds: dict[int, World]) -> None:
    """An answer computed from the JSON the tools serve passes the checker."""
    template = next(t for t in kcp.TEMPLATES if t.id == template_id)
    for world in worlds.values():
        case = template.make(world)
        reply = _from_files(template_id, case.text, world)
        assert case.check(reply), (case.text, reply, case.answer)
