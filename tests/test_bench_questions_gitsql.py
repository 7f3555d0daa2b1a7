"""The git and SQLite question modules: their worlds build fast and alike, their checkers hold.

The repository and the database are read back with git and sqlite3 themselves;
one slow test serves seed 1 and solves questions from the real servers' output.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench.questions import git as gitq
from bench.questions import sql as sqlq
from bench.questions.core import SHAPES, Template, World
from bench.questions.servers import installed
from bench.questions.world import open_world
from daemon.code_mode.convert import nested_value
from daemon.mcp.executor import McpToolExecutor

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


def _top(values: Any) -> str:
    top: str = Counter(values).most_common(1)[0][0]
    return top


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_answers_are_what_the_real_servers_show() -> None:
    """Seed 1 served: solving questions from git_log / git_show / git_branch text and
    read_query rows (Python literal text, arriving as a list) gives the expected answers."""
    missing = [name for name in ("git", "sqlite") if not installed(name)]
    assert not missing, "run `python -m bench.questions --install-servers`"
    async with open_world(1, http_port=0) as served:
        world, repo = served.world, str(served.world.repo)
        cases = {t.id: t.make(world) for t in TEMPLATES}
        executor = McpToolExecutor(served.servers, call_timeout=60.0)
        try:
            await executor.start()

            async def call(tool: str, **args: object) -> Any:
                output = await executor.call_tool(tool, args)
                assert not output.is_error, (tool, output.content)
                return nested_value(output)

            async def rows(query: str) -> list[dict[str, Any]]:
                got = await call("read_query", query=query)  # str(rows): Python literal text
                assert isinstance(got, list), got
                return got

            log = await call("git_log", repo_path=repo, max_count=1000)
            entries = re.findall(r"Commit: (\w+)\nAuthor: (.*)\nDate: (.*)\nMessage: (.*)", log)
            dates = [datetime.fromisoformat(d) for _, _, d, _ in entries]
            team = {r["name"]: r["team"] for r in await rows("select name, team from employees")}
            authors = [a for _, a, _, _ in entries]
            replies = {
                "git.total-commits": str(len(entries)),
                "git.count-fix-commits": str(sum(m.startswith("fix") for *_, m in entries)),
                "git.top-author": _top(authors),
                "git.weekday-most-commits": _top(d.strftime("%A") for d in dates),
                "git.team-most-commits": _top(team[a] for a in authors),
                "git.weekend-commits": "none" if all(d.weekday() < 5 for d in dates) else "some",
            }
            first, last = re.findall(r"\d{4}-\d\d-\d\d", cases["git.commits-in-date-range"].text)
            ranged = await call(
                "git_log",
                repo_path=repo,
                max_count=1000,
                start_timestamp=first,
                end_timestamp=f"{last}T23:59:59",
            )
            replies["git.commits-in-date-range"] = str(ranged.count("Commit:"))
            shows = [await call("git_show", repo_path=repo, revision=e[0]) for e in entries[:5]]
            added = [
                sum(line[:1] == "+" and line[:3] != "+++" for line in s.splitlines()) for s in shows
            ]
            replies["git.biggest-recent-commit"] = entries[added.index(max(added))][0]
            branches = await call("git_branch", repo_path=repo, branch_type="local")
            replies["git.feature-branches"] = branches
            top = replies["git.top-author"]
            replies["sql.top-committer-salary"] = str(
                (await rows(f"select salary from employees where name = '{top}'"))[0]["salary"]
            )
            day = re.findall(r"\d{4}-\d\d-\d\d", cases["sql.orders-on-tokyo-day"].text)[0]
            tokyo = "select count(*) n from orders where date(ordered_at, '+9 hours') = ?"
            replies["sql.orders-on-tokyo-day"] = str(
                (await rows(tokyo.replace("?", f"'{day}'")))[0]["n"]
            )
            limit = re.findall(r"more than (\d+)", cases["sql.big-cancelled-orders"].text)[0]
            over = await rows(
                "select o.id from orders o join order_items i on i.order_id = o.id "
                "where o.status = 'cancelled' group by o.id "
                f"having sum(i.quantity * i.unit_price) > {limit}"
            )
            replies["sql.big-cancelled-orders"] = "none" if not over else str(over)
            spent = await rows(
                "select c.name, sum(i.quantity * i.unit_price) t from customers c "
                "join orders o on o.customer_id = c.id join order_items i on i.order_id = o.id "
                "where o.status = 'delivered' group by c.id order by t desc limit 1"
            )
            replies["sql.top-spending-customer"] = spent[0]["name"]
        finally:
            await executor.aclose()
    wrong = {tid: r for tid, r in replies.items() if not cases[tid].check(r)}
    assert not wrong, {tid: (r[:200], cases[tid].answer) for tid, r in wrong.items()}
