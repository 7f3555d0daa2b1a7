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

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from bench.questions.core import SERVERS, SHAPES, SPLITS, Case, Template, World, split_of
from bench.questions.run import (
    Outcome,
    invented,
    joined_runs,
    list_templates,
    reached_table,
    report,
    right,
    scores,
    stopped_by_sigterm,
)
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


def test_a_failure_that_the_check_happens_to_pass_is_not_right() -> None:
    """Every snippet failed: the harness's reply says so, and a "none" check (it hears
    "none of the code") or a number check (the 3 of the error) does not make it right;
    only an unanswerable question is answered by it. One result that ran is enough."""
    from bench.questions.core import says_cannot, says_none

    failure = (
        "I could not answer this: none of the code I ran returned a result. "
        "The last attempt ended with: KeyError: 3"
    )
    none = Template("web.x", "none", ("simple",), lambda w: Case("q", "None.", says_none, True))
    count = Template("web.y", "count", ("simple",), lambda w: Case("q", "3", lambda r: "3" in r))
    cannot = Template(
        "web.z", "unanswerable", ("simple",), lambda w: Case("q", "-", says_cannot, True)
    )
    failed, ran = _result(failure, direct_error=True), _result(failure, direct_error=False)
    for template in (none, count):
        case = template.make(None)  # type: ignore[arg-type]
        assert case.check(failure)  # the check alone would count it
        assert not right(template, case, failed)
        assert right(template, case, ran)
    assert right(cannot, cannot.make(None), failed)  # type: ignore[arg-type]
    assert right(none, none.make(None), _result("None are open."))  # type: ignore[arg-type]
    assert not right(none, none.make(None), _result("Two are open."))  # type: ignore[arg-type]


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


def test_the_report_says_where_each_rule_was_reached_and_which_never_were() -> None:
    """Per split, the questions whose run reached a rule and the right ones among them,
    the most reached first; every rule of RULES no question reached is named; direct
    mode and B's outcomes are not counted; without recorded rules there is no table."""
    from daemon.model.harness import RULES

    def run(tid: str, split: str, ok: bool, reached: list[str], **other: Any) -> Outcome:
        return dataclasses.replace(_outcome(tid, split, 0, ok), reached=reached, **other)

    outcomes = [
        run("kcp.a", "dev", True, ["examples", "look"]),
        run("kcp.b", "dev", False, ["examples"]),
        run("kcp.c", "held-out", False, ["examples", "look", "key-hint"]),
        run("kcp.d", "held-out", True, ["examples"]),
        run("kcp.d", "held-out", False, ["dict-loop"], arm="B"),
        run("kcp.e", "held-out", False, ["dict-loop"], mode="direct"),
    ]
    table = reached_table(outcomes[:4])
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `examples` | 2 | 1 | 2 | 1 |",
        "| `look` | 1 | 1 | 1 | 0 |",
        "| `key-hint` | 0 | 0 | 1 | 0 |",
    ]
    assert "dev: reached (of 2) | right | held-out: reached (of 2) | right" in table
    never = table.splitlines()[-1]
    assert "`dict-loop`" in never
    assert "`look`" not in never
    assert never.count("`") == 2 * (len(RULES) - 3)
    assert table in report(outcomes, {"code": 1, "direct": 1}, show_held_out=False)
    assert "dict-loop` |" not in report(outcomes, {"code": 1, "direct": 1}, show_held_out=False)
    assert reached_table([_outcome("kcp.a", "dev", 0, True)]) == ""
    assert "Where the harness's rules" not in report(outcomes[:0], {}, show_held_out=False)


def _run_file(path: Path, outcomes: list[Outcome], arm: str = "A", **config: Any) -> Path:
    """A --json file as the bench writes it: held-out rows without their ids."""
    data = {"model": "m", "harness": "auto", "harness_off": None, "harness_on": None}
    data |= {"answer_samples": 1, "examples": "x.toml", "arms": {"A": "server args (none)"}}
    data |= config
    data["outcomes"] = [o.public(show_held_out=False) | {"arm": arm} for o in outcomes]
    path.write_text(json.dumps(data))
    return path


def test_scores_joins_the_parts_of_a_standard_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 0 in one file and seeds 1 and 2 in another are one run: pass^3 over the
    three, held-out questions matched by their place in the templates' order (their
    ids are not in the files). Parts of different runs, a question in two files or a
    held-out seed asked in part are refused, naming the file."""
    held = [t.id for t in TEMPLATES if t.split == "held-out"]

    def seed(s: int) -> list[Outcome]:
        # held-out: the first template right on every seed, the second on seeds 0 and 2
        rows = [_outcome(tid, "held-out", s, k == 0 or (k == 1 and s != 1)) for k, tid in
                enumerate(held)]  # fmt: skip
        return [*rows, _outcome("kcp.a", "dev", s, True), _outcome("kcp.b", "dev", s, s != 2)]

    first = _run_file(tmp_path / "s0.json", seed(0))
    rest = _run_file(tmp_path / "s12.json", seed(1) + seed(2))
    outcomes, seeds = joined_runs([first, rest])
    assert seeds == {"code": 3}
    assert "kcp." not in json.dumps([o.id for o in outcomes if o.split == "held-out"])
    held_out = scores([o for o in outcomes if o.split == "held-out"], 3)
    assert (held_out["right"], held_out["asked"]) == (5, 3 * len(held))
    assert (held_out["pass^3"], held_out["templates"]) == (1, len(held))
    dev = scores([o for o in outcomes if o.split == "dev"], 3)
    assert (dev["right"], dev["pass^3"], dev["templates"]) == (5, 1, 2)

    from bench.questions import run as bench_run

    assert asyncio.run(bench_run.main(["--scores", str(first), str(rest)])) == 0
    out = capsys.readouterr().out
    assert f"| code | held-out | **5/{3 * len(held)} " in out
    assert f"| 1/{len(held)} |" in out
    assert "seeds code 0, 1, 2" in out

    other = _run_file(tmp_path / "other.json", seed(1), examples="y.toml")
    with pytest.raises(ValueError, match=r"other\.json: not the run of .*s0\.json: its examples"):
        joined_runs([first, other])
    with pytest.raises(ValueError, match=r"s12\.json: code mode, seed 1, held-out #1 is in"):
        joined_runs([rest, rest])
    part = _run_file(tmp_path / "part.json", seed(1)[1:])
    with pytest.raises(ValueError, match=rf"part\.json: code mode, seed 1 asked {len(held) - 1} "):
        joined_runs([first, part])
    # a part written with --show-held-out names its held-out questions: matched by id
    shown = tmp_path / "shown.json"
    data = json.loads(_run_file(shown, []).read_text())
    data["outcomes"] = [o.public(show_held_out=True) | {"arm": "A"} for o in seed(2)[::-1]]
    shown.write_text(json.dumps(data))
    outcomes, _ = joined_runs([first, _run_file(tmp_path / "s1.json", seed(1)), shown])
    assert scores([o for o in outcomes if o.split == "held-out"], 3)["pass^3"] == 1
    data["outcomes"][-1] |= {"id": "kcp.no-such-template"}  # a held-out row
    shown.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"kcp\.no-such-template is not a held-out template"):
        joined_runs([shown])
    data["outcomes"] = [{"split": "dev", "id": "kcp.a", "arm": "A"}]
    shown.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"shown\.json: an outcome this bench did not write"):
        joined_runs([shown])
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"junk\.json: not a run file"):
        joined_runs([tmp_path / "junk.json"])
    with pytest.raises(SystemExit):
        asyncio.run(bench_run.main(["--scores", str(tmp_path / "missing.json")]))
    assert "missing.json: not a run file" in capsys.readouterr().err


def test_scores_joins_the_parts_of_a_b_run_by_their_b_arm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A B run stopped after seed 0 and asked again from seed 1 is one run of its B arm
    (``--scores-arm B``): its A rows are left out; parts whose B switched off another
    rule are refused; the arm alone, without files, is a usage error."""
    held = [t.id for t in TEMPLATES if t.split == "held-out"]

    def seed(s: int, right: bool) -> list[Outcome]:
        return [_outcome(tid, "held-out", s, right and k == 0) for k, tid in enumerate(held)]

    b_arm = {"A": "server args (none)", "B": "harness_off=look"}

    def part(name: str, seeds: range, b: dict[str, str] = b_arm) -> Path:
        path = _run_file(tmp_path / name, [o for s in seeds for o in seed(s, True)], "B", arms=b)
        data = json.loads(path.read_text())
        data["outcomes"] += [  # A's rows, every one wrong: not B's
            o.public(show_held_out=False) | {"arm": "A"} for s in seeds for o in seed(s, False)
        ]
        path.write_text(json.dumps(data))
        return path

    first, rest = part("b0.json", range(1)), part("b12.json", range(1, 3))
    outcomes, seeds = joined_runs([first, rest], "B")
    assert seeds == {"code": 3}
    held_out = scores(outcomes, 3)
    assert (held_out["right"], held_out["pass^3"]) == (3, 1)
    assert scores(joined_runs([first, rest])[0], 3)["right"] == 0  # the A arm's rows
    other = part("other.json", range(1, 3), {"A": "server args (none)", "B": "harness_off=vote"})
    with pytest.raises(ValueError, match=r"other\.json: not the run of .*b0\.json: its B differ"):
        joined_runs([first, other], "B")

    from bench.questions import run as bench_run

    argv = ["--scores", str(first), str(rest), "--scores-arm", "B"]
    assert asyncio.run(bench_run.main(argv)) == 0
    assert f"| code | held-out | **3/{3 * len(held)} " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        asyncio.run(bench_run.main(["--scores-arm", "B"]))
    assert "--scores-arm names the arm of the --scores files" in capsys.readouterr().err


def test_list_prints_id_split_shape_and_servers() -> None:
    """--list: one line per template, its id, split, shape and servers."""
    lines = list_templates()
    assert len(lines) == len(TEMPLATES)
    first = TEMPLATES[0]
    assert lines[0].split() == [first.id, first.split, first.shape, ",".join(first.servers) or "-"]


def _timed(tid: str, split: str, ok: bool, arm: str, seconds: float) -> Outcome:
    o = _outcome(tid, split, 0, ok)
    o.arm, o.seconds, o.prompt_tokens, o.completion_tokens = arm, seconds, 1000, 50
    o.timing = {"total": seconds, "prompt_eval": seconds / 2, "generation": seconds / 4}
    return o


def test_the_seconds_report_has_every_part_and_keeps_held_out_ids_out() -> None:
    """Issue 31: the split's medians per mode and split and one row per question with the
    machine's limit; a held-out question is a number unless shown."""
    from bench.questions.run import seconds_report
    from bench.questions.speed import Speeds, limit_seconds

    speeds = Speeds(prompt=100.0, generation=10.0, prompt_tokens=1200, generated=48)
    assert limit_seconds(1000, 50, speeds) == 15.0
    runs = [
        _timed("kcp.a", "dev", True, "A", 8.0),
        _timed("kcp.secret", "held-out", False, "A", 4.0),
    ]
    text = seconds_report(runs, ["code"], speeds, show_held_out=False)
    head = (
        "| questions | wall s | slot | prompt | generation | sandbox | tools | approvals | daemon"
    )
    assert text.startswith(head)
    assert "| code dev | 8.0 | 0.00 | 4.00 | 2.00 |" in text
    assert "| code s0 kcp.a ✓ | 8.0 |" in text
    assert "| code s0 held-out 1 ✗ | 4.0 |" in text
    assert "secret" not in text
    assert text.count("| 15.0 |") == 4  # the limit, each row (nothing cached counted)
    assert "kcp.secret" in seconds_report(runs, ["code"], None, show_held_out=True)


# two requests as llama-cpp-python's verbose server logs them (2026-12-02), with the
# lines around them that are not counters
_LOGGED = """INFO:     127.0.0.1:58366 - "POST /v1/chat/completions HTTP/1.1" 200 OK
Llama.generate: 4 prefix-match hit, remaining 4334 prompt tokens to eval
llama_perf_context_print:        load time =   32535.73 ms
llama_perf_context_print: prompt eval time =   32534.37 ms /  1019 tokens (   31.93 ms per token)
llama_perf_context_print:        eval time =    3438.74 ms /    47 runs   (   73.16 ms per token)
llama_perf_context_print:       total time =   36099.28 ms /  1066 tokens
llama_perf_context_print: prompt eval time =     500.00 ms /    21 tokens (   23.81 ms per token)
llama_perf_context_print:        eval time =    1000.00 ms /    10 runs   (  100.00 ms per token)
"""


async def test_the_server_log_counts_each_questions_evaluated_tokens(tmp_path: Path) -> None:
    """ServerLog sums llama.cpp's per-request counters written since its last take (not
    the load or total lines, not a line still being written), and waits for a question's
    requests; the limit then counts the tokens evaluated, and the footnote says so."""
    from bench.questions.run import seconds_report
    from bench.questions.speed import Evaluated, ServerLog, Speeds

    path = tmp_path / "llama.log"
    path.write_text("llama_perf_context_print: prompt eval time = 1.00 ms / 999 tokens\n")
    log = ServerLog(path)  # what the file held before is not counted
    assert log.take() == Evaluated()
    with path.open("a") as f:
        f.write(_LOGGED + "llama_perf_context_print: prompt eval time =   9.00 ms /  7")
    taken = log.take()
    assert (taken.prompt_tokens, taken.generated, taken.requests) == (1040, 57, 2)
    assert (taken.prompt_seconds, taken.generation_seconds) == pytest.approx((33.03437, 4.43874))
    assert log.take() == Evaluated()
    with path.open("a") as f:
        f.write(" tokens\n")  # the partial line, finished: the next take has it
    assert (await log.take_requests(1, wait=0.1)) == Evaluated(7, 9 / 1000, 0, 0.0, 1)
    assert await log.take_requests(1, wait=0.1) is None  # nothing came
    missing = ServerLog(tmp_path / "absent.log")
    assert missing.take() == Evaluated()

    speeds = Speeds(prompt=100.0, generation=10.0, prompt_tokens=1200, generated=48)
    runs = [_timed("kcp.a", "dev", True, "A", 8.0)]
    runs[0].evaluated_tokens = 200  # of its 1000 prompt tokens: the cache held 800
    text = seconds_report(runs, ["code"], speeds, show_held_out=False)
    assert text.count("| 7.0 |") == 2  # 200/100 + 50/10, the median row and its own
    assert "It counts the prompt tokens the server evaluated" in text
    runs[0].evaluated_tokens = None
    text = seconds_report(runs, ["code"], speeds, show_held_out=False)
    assert text.count("| 15.0 |") == 2
    assert "It counts every prompt token where no server log was read" in text


def test_compare_pairs_each_question_across_the_arms() -> None:
    """--compare: the arms side by side over the questions both answered; the median of
    B's wall time over A's per question, and which answers moved."""
    from bench.questions.speed import compare_table

    runs = [
        _timed("kcp.a", "dev", True, "A", 10.0),
        _timed("kcp.a", "dev", True, "B", 4.0),
        _timed("kcp.b", "dev", False, "A", 20.0),
        _timed("kcp.b", "dev", True, "B", 12.0),
        _timed("kcp.c", "dev", True, "A", 9.0),  # B never answered it: left out
    ]
    text = compare_table(runs)
    assert "| A | 1/2 | 15.0 | 7.5 | 3.8 | 2 | 1,000 / 50 |" in text
    assert "| B | 2/2 | 8.0 |" in text
    assert "median 0.50x over 2 questions; right in both 1, only in A 0, only in B 1" in text


def test_compare_set_reads_a_model_key_and_refuses_another() -> None:
    import argparse

    from bench.questions.run import _model_key

    assert _model_key("max_tokens=512") == ("max_tokens", 512)
    assert _model_key("stream=false") == ("stream", False)
    assert _model_key("harness=on") == ("harness", "on")  # a bare word stays a string
    with pytest.raises(argparse.ArgumentTypeError, match="one of"):
        _model_key("no_such_key=1")


def _fake_suite(n: int) -> list[Template]:
    """``n`` templates (``web.t0``...) for a run whose asking is faked (``_ask``)."""
    make = lambda w: Case("q", "3", lambda r: True)  # noqa: E731
    return [Template(f"web.t{k}", "count", ("simple",), make) for k in range(n)]


def _served(seed: int) -> Any:
    """What run_mode reads of open_world's servers: their world's seed."""
    return cast(Any, type("S", (), {"world": type("W", (), {"seed": seed})()})())


async def test_skip_unchanged_asks_b_where_a_trial_applied_and_checks_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--skip-unchanged: A first; B asked where one of its trials applied in A's run and
    every check-th other question (whose reply is compared with A's), else A's outcome
    copied; B starts each question from the shapes A started it from. Real code-mode
    executors hold the shapes; the model's answers are what is faked (_ask)."""
    from bench.questions import run as bench_run
    from daemon.code_mode import CodeModeToolExecutor
    from daemon.config import ModelConfig
    from tests.fakes.executor import FakeToolExecutor

    class _Arm(bench_run.Arm):
        async def open(self, mode: str, served: Any) -> None:
            self.executor = CodeModeToolExecutor(FakeToolExecutor())

    asked: list[tuple[str, str, int]] = []

    async def ask(arm: Any, mode: str, case: Case, template: Template, seed: int, _: Any):
        book = arm.executor.shapes
        asked.append((arm.label, template.id, len(book.snapshot())))
        if arm.label == "A":  # A's run teaches one shape per question
            book.restore({**book.snapshot(), ("#bench", "s", template.id): ("", {"t": "int"})})
        outcome = _outcome(template.id, "dev", seed, True)
        outcome.arm = arm.label
        outcome.noticed = ["unfetched-url"] if template.id == "web.t2" else []
        outcome.reply = "B's own words" if (arm.label, template.id) == ("B", "web.t3") else "r"
        outcome.reply_sha = bench_run.reply_sha(outcome.reply)
        return outcome

    monkeypatch.setattr(bench_run, "_ask", ask)
    suite, served = _fake_suite(5), _served(0)
    arms = [_Arm("A", ModelConfig(model="m")), _Arm("B", ModelConfig(model="m"))]
    outcomes: list[Outcome] = []
    skip = bench_run.Skip(frozenset({"unfetched-url"}), check=2)
    await bench_run.run_mode("code", served, arms, suite, lambda _: None, outcomes, skip=skip)

    # B starts from the shapes A started from: k before question k (A then has k + 1)
    assert asked == [
        ("A", "web.t0", 0), ("B", "web.t0", 0),  # unchanged no. 1: checked
        ("A", "web.t1", 1),  # unchanged no. 2: copied
        ("A", "web.t2", 2), ("B", "web.t2", 2),  # the trial applied
        ("A", "web.t3", 3), ("B", "web.t3", 3),  # unchanged no. 3: checked
        ("A", "web.t4", 4),  # unchanged no. 4: copied
    ]  # fmt: skip
    b = {o.id: o for o in outcomes if o.arm == "B"}
    assert [b[f"web.t{k}"].copied for k in range(5)] == [False, True, False, False, True]
    assert [b[f"web.t{k}"].same_as_a for k in range(5)] == [True, None, None, False, None]
    from bench.questions.speed import compare_table

    assert "B's outcome is A's on 2 questions" in compare_table(outcomes)
    assert "of 2 such questions asked in B anyway, 1 replied as A did" in compare_table(outcomes)


def test_skip_unchanged_refuses_arms_that_differ_by_more_than_trials_or_rules() -> None:
    """B must differ from A by harness_trials and harness_off alone, and switch on a
    trial A does not or off a rule A has on. B is asked where one of its trials applied
    in A's run or A's run reached one of its rules off, and nowhere else."""
    from bench.questions import run as bench_run
    from daemon.config import ModelConfig

    parser = bench_run._parser()

    def skip(*argv: str) -> Any:
        args = parser.parse_args(["--skip-unchanged", *argv])
        a = bench_run.Arm("A", ModelConfig(model="m"))
        b = ModelConfig(model="m")
        for key, value in args.compare_set:
            setattr(b, key, value)
        return bench_run._skip(parser, args, [a, bench_run.Arm("B", b)])

    assert skip("--compare-set", "harness_trials=unfetched-url").trials == {"unfetched-url"}
    assert skip("--compare", "", "--compare-set", "harness_trials=unfetched-url") is not None
    both = skip(
        "--compare-set", "harness_off=look,vote", "--compare-set", "harness_trials=unfetched-url"
    )
    assert (both.trials, both.rules) == ({"unfetched-url"}, {"look", "vote"})
    for argv in (
        ("--compare", "--cache true", "--compare-set", "harness_trials=unfetched-url"),
        ("--compare-set", "harness_trials=unfetched-url", "--compare-set", "max_tokens=9"),
        ("--compare-set", "harness_trials="),
        ("--compare-set", "harness_off="),
        ("--compare-set", "harness_trials=no-such-trial"),
        ("--compare-set", "harness_off=unfetched-url"),  # a trial, not a rule
    ):
        with pytest.raises(SystemExit):
            skip(*argv)

    def outcome(noticed: list[str], reached: list[str]) -> Any:
        return dataclasses.replace(
            _outcome("web.x", "dev", 0, True), noticed=noticed, reached=reached
        )

    assert both.asks(outcome(["unfetched-url"], []))
    assert both.asks(outcome([], ["examples", "look"]))
    assert not both.asks(outcome([], ["examples", "key-hint"]))


async def test_compare_python_without_compare_is_refused_before_any_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """B's server's Python means nothing without B's server: a usage error, exit 2.
    (``bench``, not ``main``: ``main`` points the process's logging at its ``--log``.)"""
    from bench.questions import run as bench_run

    parser = bench_run._parser()
    args = parser.parse_args(["--quick", "--compare-python", "/usr/bin/python3"])
    with pytest.raises(SystemExit) as exc:
        await bench_run.bench(parser, args)
    assert exc.value.code == 2
    assert "--compare-python names the Python of B's server" in capsys.readouterr().err


async def test_calibration_measures_through_the_endpoint_as_the_daemon_streams() -> None:
    """The speeds come from one streamed request, split at its first token; a server that
    streams no usage (llama-cpp-python) has its tokens counted as the daemon counts them."""
    from bench.questions.speed import calibrate
    from daemon.config import ModelConfig
    from tests.fakes.fake_openai import FakeOpenAI

    async with FakeOpenAI(fallback="one two three four five six", llama=True) as fake:
        speeds = await calibrate(ModelConfig(base_url=fake.base_url, model="m"), seed=1)
    assert speeds is not None
    assert speeds.generated == 6
    assert speeds.prompt_tokens > 300  # the random words, counted by the tokenizer route
    assert speeds.prompt > 0
    assert speeds.generation > 0


async def test_each_outcome_records_the_shapes_its_question_started_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Code mode: an outcome holds the learned shapes its question started from, as JSON
    rows, where they differ from its arm's previous question's (else None), so that a
    later run can start a question where this one did (--a-run); a held-out outcome
    keeps them and its reply's digest in the file, not its reply."""
    from bench.questions import run as bench_run
    from daemon.code_mode import CodeModeToolExecutor
    from daemon.config import ModelConfig
    from tests.fakes.executor import FakeToolExecutor

    class _Arm(bench_run.Arm):
        async def open(self, mode: str, served: Any) -> None:
            self.executor = CodeModeToolExecutor(FakeToolExecutor())

    async def ask(arm: Any, mode: str, case: Case, template: Template, seed: int, _: Any):
        book = arm.executor.shapes
        if template.id in ("web.t0", "web.t2"):  # these two runs teach a shape
            book.restore({**book.snapshot(), ("#bench", "s", template.id): ("1", {"t": "int"})})
        outcome = _outcome(template.id, "held-out", seed, True)
        outcome.reply_sha = bench_run.reply_sha(outcome.reply)
        return outcome

    monkeypatch.setattr(bench_run, "_ask", ask)
    suite, served = _fake_suite(5), _served(0)
    outcomes: list[Outcome] = []
    arms = [_Arm("A", ModelConfig(model="m"))]
    await bench_run.run_mode("code", served, arms, suite, lambda _: None, outcomes)
    t0 = ["#bench", "s", "web.t0", "1", {"t": "int"}]
    t2 = ["#bench", "s", "web.t2", "1", {"t": "int"}]
    assert [o.shapes for o in outcomes] == [[], [t0], None, [t0, t2], None]
    saved = outcomes[1].public(show_held_out=False)
    assert "reply" not in saved
    assert saved["shapes"] == [t0]
    assert saved["reply_sha"] == bench_run.reply_sha(outcomes[1].reply)
    assert len(saved["reply_sha"]) == 16


async def test_a_run_file_stands_for_a_so_b_is_asked_only_where_a_reached_its_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--a-run: A's outcomes come from its run file, A is neither opened nor asked; B is
    asked where A's run reached a rule B has off, and every check-th other question
    (its reply's digest compared with A's), each from the whole shapes A's question
    started from; elsewhere B's outcome is A's. A file of another configuration, one
    from before shapes were recorded, or one without the question is refused."""
    from bench.questions import run as bench_run
    from daemon.code_mode import CodeModeToolExecutor
    from daemon.config import ModelConfig
    from tests.fakes.executor import FakeToolExecutor

    class _Arm(bench_run.Arm):
        async def open(self, mode: str, served: Any) -> None:
            assert self.label == "B" or not replaying, "A is not opened when read from a file"
            self.executor = CodeModeToolExecutor(FakeToolExecutor())

    asked: list[tuple[str, str, list[str]]] = []

    async def ask(arm: Any, mode: str, case: Case, template: Template, seed: int, _: Any):
        book = arm.executor.shapes
        asked.append((arm.label, template.id, sorted(t for _, _, t in book.snapshot())))
        if arm.label == "A" and template.id in ("web.t0", "web.t2"):
            book.restore({**book.snapshot(), ("#bench", "s", template.id): ("1", {"t": "int"})})
        outcome = _outcome(template.id, "dev", seed, True)
        outcome.arm = arm.label
        outcome.reached = ["look"] if template.id in ("web.t1", "web.t3") else ["examples"]
        outcome.reply = "B's own words" if (arm.label, template.id) == ("B", "web.t4") else "r"
        outcome.reply_sha = bench_run.reply_sha(outcome.reply)
        return outcome

    monkeypatch.setattr(bench_run, "_ask", ask)
    suite, served = _fake_suite(5), _served(0)
    replaying = False
    a_outcomes: list[Outcome] = []
    a = _Arm("A", ModelConfig(model="m"))
    await bench_run.run_mode("code", served, [a], suite, lambda _: None, a_outcomes)
    path = _run_file(tmp_path / "a.json", a_outcomes)
    config = {"model": "m", "harness": "auto", "harness_off": None, "harness_on": None}
    config |= {"answer_samples": 1, "examples": "x.toml"}
    a_run = bench_run.a_run_outcomes(path, config)
    assert sorted(a_run) == [("code", 0, f"web.t{k}") for k in range(5)]
    t0 = ["#bench", "s", "web.t0", "1", {"t": "int"}]
    t2 = ["#bench", "s", "web.t2", "1", {"t": "int"}]
    assert [a_run[("code", 0, f"web.t{k}")].shapes for k in range(5)] == [
        [], [t0], [t0], [t0, t2], [t0, t2]
    ]  # fmt: skip

    asked.clear()
    replaying = True
    arms = [_Arm("A", ModelConfig(model="m")), _Arm("B", ModelConfig(model="m"))]
    skip = bench_run.Skip(frozenset(), check=2, rules=frozenset({"look"}))
    outcomes: list[Outcome] = []
    await bench_run.run_mode(
        "code", served, arms, suite, lambda _: None, outcomes, skip=skip, a_run=a_run
    )
    assert asked == [
        ("B", "web.t0", []),  # unchanged no. 1: checked
        ("B", "web.t1", ["web.t0"]),  # A reached look
        ("B", "web.t3", ["web.t0", "web.t2"]),  # A reached look
        ("B", "web.t4", ["web.t0", "web.t2"]),  # unchanged no. 3: checked (no. 2 copied)
    ]
    assert [o.arm for o in outcomes] == ["A", "B"] * 5
    b = {o.id: o for o in outcomes if o.arm == "B"}
    assert [b[f"web.t{k}"].copied for k in range(5)] == [False, False, True, False, False]
    assert [b[f"web.t{k}"].same_as_a for k in range(5)] == [True, None, None, None, False]

    # the B run's file: its B arm stands for A (B's reply where B was asked, A's copied
    # elsewhere), each question with the shapes A's started from (B's rows record them)
    both = tmp_path / "b.json"
    data = json.loads(_run_file(both, []).read_text())
    data["outcomes"] = [o.public(show_held_out=False) for o in outcomes]
    both.write_text(json.dumps(data))
    b_run = bench_run.a_run_outcomes(both, config, "B")
    assert b_run.keys() == a_run.keys()
    assert b_run[("code", 0, "web.t4")].reply_sha == bench_run.reply_sha("B's own words")
    assert a_run[("code", 0, "web.t4")].reply_sha == bench_run.reply_sha("r")
    assert [o.shapes for o in b_run.values()] == [o.shapes for o in a_run.values()]
    assert {(o.arm, o.copied, o.same_as_a) for o in b_run.values()} == {("A", False, None)}
    data["outcomes"] = [row for row in data["outcomes"] if row["arm"] == "A"]
    both.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"b\.json: no outcome of arm B"):
        bench_run.a_run_outcomes(both, config, "B")

    with pytest.raises(
        ValueError, match=r"a\.json: not a run of A's configuration: its harness_off"
    ):
        bench_run.a_run_outcomes(path, config | {"harness_off": "look"})
    old = json.loads(path.read_text())
    for row in old["outcomes"]:
        del row["shapes"], row["reply_sha"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"old\.json: its outcomes record no shapes"):
        bench_run.a_run_outcomes(tmp_path / "old.json", config)
    with pytest.raises(ValueError, match=r"A's file has no code-mode outcome of seed 0"):
        await bench_run.run_mode(
            "code", served, arms, [*suite, _fake_suite(10)[9]],
            lambda _: None, [], skip=skip, a_run=a_run,
        )  # fmt: skip

    # held-out rows have no ids in the file: each is its place's template again
    held = [t.id for t in TEMPLATES if t.split == "held-out"]
    rows = [_outcome(tid, "held-out", 1, True) for tid in held]
    for row in rows:
        row.shapes, row.reply_sha = [], bench_run.reply_sha(row.reply)
    hidden = bench_run.a_run_outcomes(_run_file(tmp_path / "h.json", rows), config)
    assert sorted(hidden) == sorted(("code", 1, tid) for tid in held)

    parser = bench_run._parser()
    for argv, error in (
        (["--a-run", str(path)], "--a-run gives A's outcomes to --skip-unchanged"),
        (["--skip-unchanged", "--a-run", str(tmp_path / "none.json")], "no such file"),
        (["--a-run-arm", "B"], "--a-run-arm names an arm of the --a-run file"),
    ):
        with pytest.raises(SystemExit):
            await bench_run.bench(parser, parser.parse_args(argv))
        assert error in capsys.readouterr().err


async def test_a_sigterm_cancels_the_bench_so_its_cleanup_stops_its_servers() -> None:
    """SIGTERM cancels the run as Ctrl-C does: its ``finally`` (where the bench stops the
    model servers it started) runs to its end, a second SIGTERM meanwhile
    notwithstanding, and the exit status is 143; other runs pass through."""
    cleaned: list[str] = []
    started, stopping = asyncio.Event(), asyncio.Event()

    async def bench() -> int:
        try:
            started.set()
            await asyncio.sleep(60)
            return 0
        finally:
            stopping.set()
            await asyncio.sleep(0.3)  # stopping the servers takes a while
            cleaned.append("servers stopped")

    guarded = asyncio.create_task(stopped_by_sigterm(bench()))
    await started.wait()
    os.kill(os.getpid(), signal.SIGTERM)
    await stopping.wait()
    os.kill(os.getpid(), signal.SIGTERM)  # impatient: it would cancel the cleanup
    assert await asyncio.wait_for(guarded, 5) == 143
    assert cleaned == ["servers stopped"]

    async def quick() -> int:
        return 3

    assert await stopped_by_sigterm(quick()) == 3
    # the handler is gone with the run: the default SIGTERM action is back
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_a_negative_first_seed_is_refused_before_any_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Seeds are counted from 0: ``--first-seed -1`` names no world, a usage error."""
    from bench.questions import run as bench_run

    parser = bench_run._parser()
    args = parser.parse_args(["--quick", "--first-seed", "-1"])
    assert parser.parse_args(["--first-seed", "1", "--seeds", "2"]).first_seed == 1
    with pytest.raises(SystemExit) as exc:
        await bench_run.bench(parser, args)
    assert exc.value.code == 2
    assert "--first-seed: a seed is 0 or more" in capsys.readouterr().err
