"""The kcp and tool-less question templates hold against their own expected answers.

For each of three seeds: the expected answer passes the checker, "I do not know."
fails it unless the case expects no data, and the seeds differ in prompt or answer.
The kcp world's fixture files are written in the fake kubectl's layout.
"""

from __future__ import annotations

import json
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
