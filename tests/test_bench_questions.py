"""The question set as a whole (bench/questions), without a model.

The set is large and spread enough (templates, shapes, servers), its split
is fixed by the ids and about half, and every template holds over real built
worlds (the git repository and the SQLite database really written): its
expected answer passes its checker, "I do not know." fails it unless the case
expects no data, and its prompt or answer changes with the seed. One test
starts all six servers over seed 0's world and calls a tool of each. The
runner's scoring is pure: "invented" answers, pass^3, and a report and JSON
that keep held-out questions to their scores.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from bench.questions.core import SERVERS, SHAPES, SPLITS, Case, Template, World, split_of
from bench.questions.run import Outcome, invented, list_templates, report, scores
from bench.questions.servers import PACKAGES, installed
from bench.questions.world import build_world, open_world, templates
from daemon.code_mode.convert import nested_value
from daemon.mcp.executor import McpToolExecutor
from daemon.runtime.runs import RunResult
from sessions.model import Record

SEEDS = (0, 1, 2)
TEMPLATES = templates()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[int, World]:
    """Seeds 0, 1 and 2, built by every data module."""
    base = tmp_path_factory.mktemp("worlds")
    return {s: build_world(s, base / f"seed-{s}", "http://127.0.0.1:8000") for s in SEEDS}


def test_the_set_has_sixty_templates_with_unique_ids() -> None:
    """At least 60 templates (issue 28), no id twice, each id named for its module."""
    ids = [t.id for t in TEMPLATES]
    assert len(ids) >= 60, f"only {len(ids)} templates"
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    domains = {"kcp", "web", "git", "sql", "tooless"}
    assert all(i.split(".", 1)[0] in domains for i in ids), ids


def test_every_shape_and_every_server_is_asked() -> None:
    """Each shape of SHAPES has a template; each of the six servers is some template's,
    and no template names a shape or server outside the lists."""
    assert {t.shape for t in TEMPLATES} == set(SHAPES)
    used = {s for t in TEMPLATES for s in t.servers}
    assert used == set(SERVERS)
    assert len(used) >= 6


def test_the_split_is_fixed_by_the_id_and_about_half() -> None:
    """split_of is the sha256's low bit (two known values pin it), and dev is 35-65 %."""
    assert split_of("kcp.example") == "held-out"
    assert split_of("tooless.example") == split_of("tooless.example")
    assert {split_of(t.id) for t in TEMPLATES} <= set(SPLITS)
    assert all(t.split == split_of(t.id) for t in TEMPLATES)
    dev = sum(t.split == "dev" for t in TEMPLATES) / len(TEMPLATES)
    assert 0.35 <= dev <= 0.65, f"dev is {dev:.0%}"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.id)
def test_each_template_holds_over_three_built_worlds(
    template: Template, worlds: dict[int, World]
) -> None:
    """Per seed: the expected answer is right, "I do not know." is wrong unless no data
    is the answer; over the seeds the prompt or the answer changes."""
    cases = [template.make(worlds[s]) for s in SEEDS]
    for seed, case in zip(SEEDS, cases, strict=True):
        assert case.check(case.answer), (seed, case.text, case.answer)
        if not case.no_data:
            assert not case.check("I do not know."), (seed, case.text)
    assert len({(c.text, c.answer) for c in cases}) > 1, cases[0].text


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_all_six_servers_answer_over_a_built_world() -> None:
    """Seed 0's world, served: one call to each of the six servers returns its data
    (needs the bench venvs: `python -m bench.questions --install-servers`)."""
    missing = [name for name in PACKAGES if not installed(name)]
    assert not missing, (
        f"the bench servers' venvs are missing ({', '.join(missing)}): "
        "run `python -m bench.questions --install-servers`"
    )
    async with open_world(0, http_port=0) as served:
        world = served.world
        executor = McpToolExecutor(served.servers, call_timeout=60.0)
        try:
            await executor.start()
            assert executor.failed_servers == {}
            assert set(executor.routes.values()) == set(SERVERS)

            async def value(tool: str, **args: object) -> object:
                output = await executor.call_tool(tool, args)
                assert not output.is_error, (tool, output.content)
                return nested_value(output)

            pods = await value("list_objects", workspace="root:shop", resource="pods")
            assert isinstance(pods, dict)
            names = {p["metadata"]["name"] for p in pods["items"]}
            assert names == {p.name for p in world.data["kcp"].pods}

            path, (_ctype, body) = next(
                (p, f) for p, f in world.http_files.items() if f[0].startswith("application/json")
            )
            got = await value("http_get", url=world.base_url + path)
            assert isinstance(got, dict)
            assert got["status"] == 200
            assert json.loads(got["body"]) == json.loads(body)

            page = next(p for p, f in world.http_files.items() if f[0].startswith("text/html"))
            text = await value("fetch", url=world.base_url + page)
            assert isinstance(text, str)
            assert text.startswith(f"Contents of {world.base_url}")

            converted = await value(
                "convert_time",
                source_timezone="Europe/Berlin",
                time="09:30",
                target_timezone="Asia/Tokyo",
            )
            assert isinstance(converted, dict)
            assert converted["target"]["datetime"][11:16] in ("16:30", "17:30")

            head = _git_head(world.repo)
            log = await value("git_log", repo_path=str(world.repo), max_count=1)
            assert isinstance(log, str)
            assert head in log

            with sqlite3.connect(world.db) as db:
                tables = {
                    r[0] for r in db.execute("select name from sqlite_master where type='table'")
                }
            # str() of its rows, Python literal text: it arrives as the rows
            listed = await value("list_tables")
            assert tables
            assert {row["name"] for row in listed} == tables
        finally:
            await executor.aclose()


def _git_head(repo: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _tables(db: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}


def test_the_world_paths_are_the_ones_prompts_name(tmp_path: Path) -> None:
    """build_world puts the repository and database where World says, under its root."""
    world = build_world(0, tmp_path / "seed-0", "http://127.0.0.1:8000/")
    assert world.base_url == "http://127.0.0.1:8000"
    assert (world.repo / ".git").exists() or (world.repo / "HEAD").exists()
    assert world.db.is_file()
    assert world.kcp_fixtures.is_dir()
    assert world.http_files
    assert all(p.startswith("/") for p in world.http_files)


def _result(
    reply: str, *, nested: list[dict] | None = None, direct_error: bool | None = None
) -> RunResult:
    """A finished run whose records hold code mode's nested calls or one direct result."""
    records: list[Record] = []
    if nested is not None:
        result = {"type": "tool_result", "tool_use_id": "c1", "content": "x", "is_error": False}
        message = {"role": "user", "content": [result]}
        records.append(Record("u1", "user", "t", message, {"nested_calls": nested}))
    if direct_error is not None:
        result = {"type": "tool_result", "tool_use_id": "c1", "content": "x"}
        result["is_error"] = direct_error
        records.append(Record("u1", "user", "t", {"role": "user", "content": [result]}))
    return RunResult(reply=reply, records=records)


def test_an_answer_is_invented_when_no_call_returned_data() -> None:
    """Invented: data stated though every call failed or none was made; not when a
    call returned data, the reply says it cannot, no data is the answer, or no server
    is needed."""
    needs = Template("kcp.x", "count", ("kcp",), lambda w: Case("q", "3", lambda r: False))
    tooless = Template("tooless.x", "arithmetic", (), needs.make)
    case, none_case = Case("q", "3", lambda r: False), Case("q", "", lambda r: True, True)
    failed = [{"tool": "list_objects", "is_error": True, "outcome": "error"}]
    ok = [{"tool": "list_objects", "is_error": False, "outcome": "ok"}]
    assert invented(needs, case, _result("There are 3 pods."), "code")
    assert invented(needs, case, _result("There are 3 pods.", nested=failed), "code")
    assert invented(needs, case, _result("There are 3.", direct_error=True), "direct")
    assert not invented(needs, case, _result("There are 3 pods.", nested=ok), "code")
    assert not invented(needs, case, _result("There are 3.", direct_error=False), "direct")
    assert not invented(needs, case, _result("I cannot reach the cluster."), "code")
    # the daemon's own honest reply, and the model's usual wording of it
    for admission in (
        "I could not find this out: no tool call returned any data.",
        "I couldn't read the CSV, so I can't say.",
        "I could not find out, and why.",
    ):
        assert not invented(needs, case, _result(admission, nested=failed), "code"), admission
    assert not invented(needs, none_case, _result("There are 3 pods."), "code")
    assert not invented(tooless, case, _result("3"), "code")


def _outcome(tid: str, split: str, seed: int, ok: bool, mode: str = "code") -> Outcome:
    return Outcome(
        id=tid, split=split, shape="count", mode=mode, seed=seed, ok=ok, invented=not ok,
        rounds=2, tool_calls=1, nested_calls=1, bytes_in=10, bytes_out=5, seconds=1.0,
        status="done", prompt_tokens=1, completion_tokens=1, question=f"ask {tid}",
        answer="3", reply=f"reply {tid}", code=[{"call": "run_code"}],
    )  # fmt: skip


def test_scores_and_a_report_that_keeps_held_out_to_its_scores() -> None:
    """pass@1 counts questions, pass^3 templates right on every seed; held-out ids,
    questions and replies appear nowhere unless shown."""
    runs = [_outcome("kcp.a", "dev", s, True) for s in SEEDS]
    runs += [_outcome("kcp.b", "dev", s, s != 1) for s in SEEDS]
    runs += [_outcome("kcp.secret", "held-out", s, True) for s in SEEDS]
    dev = scores([o for o in runs if o.split == "dev"], 3)
    assert (dev["right"], dev["asked"], dev["pass^3"], dev["templates"]) == (5, 6, 1, 2)
    assert dev["invented"] == 1
    assert "pass^3" not in scores(runs[:1], 1)
    hidden = report(runs, {"code": 3}, show_held_out=False)
    assert "kcp.a" in hidden
    assert "secret" not in hidden
    assert "| code | held-out | **3/3 (100%)** | 1/1 |" in hidden
    assert "kcp.secret" in report(runs, {"code": 3}, show_held_out=True)
    saved = json.dumps([o.public(show_held_out=False) for o in runs])
    assert "secret" not in saved
    assert "reply kcp.a" in saved
    assert "secret" in json.dumps([o.public(show_held_out=True) for o in runs])


def test_list_prints_id_split_shape_and_servers() -> None:
    """--list: one line per template, its id, split, shape and servers."""
    lines = list_templates()
    assert len(lines) == len(TEMPLATES)
    first = TEMPLATES[0]
    assert lines[0].split() == [first.id, first.split, first.shape, ",".join(first.servers) or "-"]
