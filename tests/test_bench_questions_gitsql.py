"""The git and SQLite question modules: their worlds build fast and alike, their checkers hold.

No server runs here: the repository and the database are read back with git and
sqlite3 themselves, the way mcp-server-git and mcp-server-sqlite would read them.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from bench.questions import git as gitq
from bench.questions import sql as sqlq
from bench.questions.core import SHAPES, Template, World

SEEDS = (0, 1, 2)
TEMPLATES = gitq.TEMPLATES + sqlq.TEMPLATES


def _world(root: Path, seed: int) -> World:
    root.mkdir(parents=True, exist_ok=True)
    world = World(
        seed, root, "http://127.0.0.1:9", root / "fixtures", root / "repo", root / "shop.db"
    )
    gitq.build(world)
    sqlq.build(world)
    return world


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[int, World]:
    return {s: _world(tmp_path_factory.mktemp(f"seed{s}"), s) for s in SEEDS}


def test_ids_are_unique_and_shapes_known() -> None:
    """Every template has its own id, in its module's domain, and a known shape."""
    ids = [t.id for t in TEMPLATES]
    assert len(ids) == len(set(ids))
    assert all(t.shape in SHAPES for t in TEMPLATES)
    assert all(t.id.startswith("git.") for t in gitq.TEMPLATES)
    assert all(t.id.startswith("sql.") for t in sqlq.TEMPLATES)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_expected_answer_passes_and_a_shrug_does_not(
    template: Template, worlds: dict[int, World]
) -> None:
    """Over each seed, the expected answer passes; "I do not know." passes only a no-data case."""
    for world in worlds.values():
        case = template.make(world)
        assert case.check(case.answer), (world.seed, case.answer)
        if not case.no_data:
            assert not case.check("I do not know."), world.seed


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_seeds_differ(template: Template, worlds: dict[int, World]) -> None:
    """The prompt or the answer changes with the seed."""
    cases = [template.make(w) for w in worlds.values()]
    assert len({(c.text, c.answer) for c in cases}) == len(cases)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_a_wrong_number_fails(template: Template, worlds: dict[int, World]) -> None:
    """Where the answer is a number, the number plus one fails the checker."""
    for world in worlds.values():
        case = template.make(world)
        head = case.answer.split(" (")[0]
        if re.fullmatch(r"\d+(\.\d+)?", head):
            wrong = f"{float(head) + 1:.2f}" if "." in head else str(int(head) + 1)
            assert not case.check(wrong), (world.seed, case.answer, wrong)


@pytest.mark.parametrize(
    "template", [t for t in TEMPLATES if t.shape in ("none", "unanswerable")], ids=lambda t: t.id
)
def test_invented_data_fails_a_no_data_case(template: Template, worlds: dict[int, World]) -> None:
    """A reply that invents an answer fails where the right reply is "none" or "cannot"."""
    for world in worlds.values():
        case = template.make(world)
        assert case.no_data
        assert not case.check("It was Jane Doe, with 3 orders worth 1234.50.")


def test_worlds_build_fast_and_reproducibly(tmp_path: Path) -> None:
    """A seed builds in well under 2 s, and twice gives the same commits and rows."""
    start = time.monotonic()
    a = _world(tmp_path / "a", 7)
    assert time.monotonic() - start < 2
    b = _world(tmp_path / "b", 7)
    assert [c.sha for c in a.data["git"].main] == [c.sha for c in b.data["git"].main]
    assert a.data["sql"].orders == b.data["sql"].orders


def test_repository_is_what_the_data_says(worlds: dict[int, World]) -> None:
    """The repository is clean on main, its log matches the data, tags and branches exist."""
    for world in worlds.values():
        g = world.data["git"]

        def git(*args: str, repo: Path = world.repo) -> str:
            return subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
            ).stdout

        assert git("status", "--porcelain") == ""
        assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
        log = git("log", "--format=%H|%an|%aI|%s").splitlines()
        assert [line.split("|")[0] for line in log] == [c.sha for c in g.main]
        assert [line.split("|")[1] for line in log] == [c.author.name for c in g.main]
        assert [line.split("|")[2] for line in log] == [c.when.isoformat() for c in g.main]
        assert set(git("tag").split()) == set(g.tags)
        assert set(git("branch", "--format=%(refname:short)").split()) == {"main", *g.branches}
        assert 20 <= len(g.main) <= 60


def test_database_is_what_the_data_says(worlds: dict[int, World]) -> None:
    """Each table holds the data's rows; employees include every commit author."""
    for world in worlds.values():
        d = world.data["sql"]
        with sqlite3.connect(world.db) as conn:
            counts = {
                t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("customers", "products", "orders", "order_items", "employees")
            }
            names = {r[0] for r in conn.execute("SELECT name FROM employees")}
        conn.close()
        assert counts == {
            "customers": len(d.customers),
            "products": len(d.products),
            "orders": len(d.orders),
            "order_items": len(d.items),
            "employees": len(d.employees),
        }
        assert {c.author.name for c in world.data["git"].main} <= names


def test_has_pairs_reads_lines_inline_lists_and_tables() -> None:
    """A key's own number must follow it: swapped numbers fail, layouts do not matter."""
    wanted = {"parser": 3, "cli": 12}
    assert gitq.has_pairs("parser: 3\ncli: 12", wanted)
    assert gitq.has_pairs("cli has 12 commits, parser has 3.", wanted)
    assert gitq.has_pairs("| scope | n |\n|---|---|\n| parser | 3 |\n| cli | 12 |", wanted)
    assert not gitq.has_pairs("parser: 12, cli: 3", wanted)
    assert not gitq.has_pairs("parser: 3", wanted)
    assert gitq.has_pairs("office: 1,234.50", {"office": 1234.5}, 2)


def test_no_data_replies_are_heard_in_their_usual_words() -> None:
    """ "None" with a longer subject, and "not recorded", pass; a listed answer does not."""
    assert gitq.says_none_of("No cancelled orders were worth more than 830.")
    assert gitq.says_none_of("There are none.")
    assert not gitq.says_none_of("Orders 12 and 31 were worth more than 830.")
    assert gitq.says_not_held("There is no campaign information in the database.")
    assert gitq.says_not_held("I can't tell: the repository does not record reviews.")
    assert not gitq.says_not_held("It was the Spring Sale campaign.")
