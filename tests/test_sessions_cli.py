"""`asyncai threads`, `asyncai audit` and `asyncai transcript` on a real database,
run in-process through `daemon.cli.main` and once as a real subprocess."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.cli.sessions import MAX_LIMIT
from sessions import NewRule, RunMetrics, Store
from sessions.connection import DEFAULT_DB_PATH
from sessions.ids import parse_since, thread_key
from sessions.testing import run_records, tool_call_row

ROOT = Path(__file__).resolve().parents[1]
ASYNCAI = Path(sys.executable).with_name("asyncai")

# (run, channel, thread, tool, mutating, is_error, started)
CALLS = [
    ("R1", "#ops", "T1", "list_objects", False, False, "2026-11-27T10:00:00Z"),
    ("R1", "#ops", "T1", "get_logs", False, True, "2026-11-28T10:00:00Z"),
    ("R2", "#ops", "T1", "delete_object", True, False, "2026-11-29T10:00:00Z"),
    ("R3", "#dev", "T1", "list_objects", False, False, "2026-11-29T12:00:00Z"),
    ("R4", "#dev", "T2", "apply_object", True, False, "2026-11-30T09:00:00Z"),
]


@pytest.fixture(scope="module")
async def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three threads (one id in two channels), four runs, five nested calls."""
    path = tmp_path_factory.mktemp("cli") / "asyncai.db"
    async with Store(path, cwd="/srv/asyncai", version="0.1.0") as store:
        runs = {c[0]: c[1:3] for c in CALLS}
        for n, (run, (channel, thread)) in enumerate(runs.items()):
            prompt = f"M{n}"
            await store.runs.record_prompt(
                channel, thread, prompt, "alice", f"question {n}", "2026-11-29T18:00:00Z"
            )
            await store.runs.start_run(run, channel, thread, [prompt])
            records = run_records(f"question {n}", answer=f"answer {n}")
            for r, _, t, tool, mutating, is_error, started in CALLS:
                if r == run:
                    await store.audit.add_tool_call(
                        tool_call_row(
                            run,
                            t,
                            tool=tool,
                            mutating=mutating,
                            is_error=is_error,
                            started=started,
                            record_uuid=records[1].uuid,
                            arguments={"name": f"{tool}-arg", "namespace": "default"},
                        )
                    )
            await store.runs.finish_run(
                run, "done", records, RunMetrics(rounds=2), [prompt], "done"
            )
    # last_active is the wall clock to the millisecond, and runs this short may end in
    # one: the order the threads were last active in is the order of CALLS, as written
    with closing(sqlite3.connect(path)) as conn, conn:
        for started, (channel, thread) in sorted((c[6], c[1:3]) for c in CALLS):
            at = parse_since(started)
            conn.execute(
                "UPDATE threads SET last_active = ? WHERE id = ?", (at, thread_key(channel, thread))
            )
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `asyncai ARGV` in-process; return (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def audit_tools(capsys: pytest.CaptureFixture[str], db: Path, *filters: str) -> list[str]:
    """The tools `asyncai audit --json` lists for these filters, in output order."""
    status, out, err = run_cli(capsys, "audit", "--db", str(db), "--json", *filters)
    assert (status, err) == (0, "")
    return [json.loads(line)["tool"] for line in out.splitlines()]


def test_default_db_path_is_the_daemons():
    """--db defaults to ./.asyncai/asyncai.db, the constant the daemon config reuses."""
    assert Path(".asyncai/asyncai.db") == DEFAULT_DB_PATH


def test_audit_without_filters_is_newest_first(capsys, db):
    """All calls, newest first."""
    assert audit_tools(capsys, db) == [
        "apply_object",
        "list_objects",
        "delete_object",
        "get_logs",
        "list_objects",
    ]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--thread", "T1"], ["list_objects", "delete_object", "get_logs", "list_objects"]),
        (["--thread", "T1", "--channel", "#ops"], ["delete_object", "get_logs", "list_objects"]),
        (["--channel", "#dev"], ["apply_object", "list_objects"]),
        (["--tool", "list_objects"], ["list_objects", "list_objects"]),
        (["--mutating"], ["apply_object", "delete_object"]),
        (["--since", "2026-11-29"], ["apply_object", "list_objects", "delete_object"]),
        (["--since", "2026-11-29T11:00:00Z"], ["apply_object", "list_objects"]),
        (["--since", "2026-11-29T13:00:00+02:00"], ["apply_object", "list_objects"]),
        (["--limit", "2"], ["apply_object", "list_objects"]),
        (["--thread", "T1", "--mutating", "--since", "2026-11-28"], ["delete_object"]),
        (["--tool", "list_objects", "--channel", "#ops", "--limit", "1"], ["list_objects"]),
        (["--thread", "nope"], []),
    ],
)
def test_audit_filters(capsys, db, filters, expected):
    """Each filter, alone and combined, selects exactly the matching calls."""
    assert audit_tools(capsys, db, *filters) == expected


@pytest.mark.parametrize(
    "evil",
    [
        "x' OR '1'='1",
        "T1'; DROP TABLE tool_calls; --",
        '" OR ""="',
        "%",
        "*",
        "T1) OR (1=1",
    ],
)
def test_audit_filters_that_look_like_sql_match_nothing(capsys, db, evil):
    """Injection-shaped values are plain values: no rows, and the table is still there."""
    for flag in ("--thread", "--tool", "--channel"):
        assert audit_tools(capsys, db, flag, evil) == []
    assert len(audit_tools(capsys, db)) == len(CALLS)


def test_audit_json_lines_carry_every_field(capsys, db):
    """--json prints one object per call with its thread, run and arguments."""
    status, out, _ = run_cli(
        capsys, "audit", "--db", str(db), "--json", "--mutating", "--limit", "1"
    )
    assert status == 0
    entry = json.loads(out)
    assert entry["tool"] == "apply_object"
    assert entry["mutating"] is True
    assert (entry["channel"], entry["thread_id"], entry["run_id"]) == ("#dev", "T2", "R4")
    assert entry["arguments"] == {"name": "apply_object-arg", "namespace": "default"}
    assert entry["started"] == "2026-11-30T09:00:00.000Z"
    assert set(entry) >= {"is_error", "bytes", "duration_ms", "record_uuid", "outcome"}
    assert (entry["outcome"], entry["decision"], entry["decided_by"]) == ("ok", None, None)


def test_audit_table_is_aligned(capsys, db):
    """The table has a header and one line per call, columns starting at the same offsets."""
    status, out, _ = run_cli(capsys, "audit", "--db", str(db))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "STARTED",
        "THREAD",
        "TOOL",
        "OUTCOME",
        "FLAGS",
        "BYTES",
        "MS",
        "QUEUE",
        "ARGUMENTS",
    ]
    assert len(lines) == 1 + len(CALLS)
    tool_column = lines[0].index("TOOL")
    assert all(line[tool_column:].split()[0] in {c[3] for c in CALLS} for line in lines[1:])
    assert "#ops/T1" in lines[3]
    assert " MUT " in lines[1]
    assert " ERR " in lines[4]


def test_audit_nothing_matches(capsys, db):
    """An empty result says so instead of printing a bare header."""
    assert run_cli(capsys, "audit", "--db", str(db), "--tool", "none") == (
        0,
        "no tool calls match\n",
        "",
    )


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "29/11/2026", "1' OR '1'='1"])
def test_bad_since_is_a_clear_error(capsys, db, since):
    """A --since that is not a date or ISO datetime: argparse's exit 2 and a message naming it."""
    with pytest.raises(SystemExit) as caught:
        main(["audit", "--db", str(db), "--since", since])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--since" in err
    assert "not a date or ISO datetime" in err


@pytest.mark.parametrize("limit", ["0", "-3", "ten"])
def test_bad_limit_is_a_clear_error(capsys, db, limit):
    """--limit must be a positive whole number."""
    with pytest.raises(SystemExit) as caught:
        main(["audit", "--db", str(db), "--limit", limit])
    assert caught.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_threads_table_and_json(capsys, db):
    """threads lists each thread once, most recently active first, with its counts."""
    status, out, _ = run_cli(capsys, "threads", "--db", str(db), "--json")
    assert status == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["channel"], r["thread_id"]) for r in rows] == [
        ("#dev", "T2"),
        ("#dev", "T1"),
        ("#ops", "T1"),
    ]
    ops = rows[2]
    assert (ops["prompts"], ops["runs"], ops["records"], ops["tool_calls"]) == (2, 2, 8, 3)
    assert ops["mutating_calls"] == 1
    assert ops["scope_bytes"] is None  # no scope stored
    status, out, _ = run_cli(capsys, "threads", "--db", str(db), "--limit", "1")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["LAST", "ACTIVE", "CHANNEL"]
    assert (lines[0].split()[-1], lines[1].split()[-1]) == ("SCOPE", "-")
    assert len(lines) == 2
    assert "#dev" in lines[1]


def test_transcript_text(capsys, db):
    """The text form shows who asked, the code the model ran, the result and the answer."""
    status, out, err = run_cli(capsys, "transcript", "--db", str(db), "T2")
    assert (status, err) == (0, "")
    assert out.startswith("thread #dev T2 · session ")
    assert "question 3" in out
    assert "assistant → run_code" in out
    assert "await list_objects(kind='pods')" in out
    assert "nested calls (1):" in out
    assert "answer 3" in out


def test_transcript_jsonl_is_one_envelope_per_line(capsys, db):
    """--jsonl prints the records as Claude Code JSONL."""
    status, out, _ = run_cli(
        capsys, "transcript", "--db", str(db), "T1", "--channel", "#ops", "--jsonl"
    )
    assert status == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 8
    assert lines[0]["parentUuid"] is None
    assert all(line["cwd"] == "/srv/asyncai" for line in lines)


def test_transcript_ambiguous_and_unknown_threads(capsys, db):
    """An id in two channels asks for --channel; an unknown id says so; both exit 1."""
    status, out, err = run_cli(capsys, "transcript", "--db", str(db), "T1")
    assert (status, out) == (1, "")
    assert "several channels (#dev, #ops)" in err
    status, _, err = run_cli(capsys, "transcript", "--db", str(db), "T1'; --")
    assert status == 1
    assert "no thread" in err


@pytest.mark.parametrize("command", [["threads"], ["audit"], ["transcript", "T1"]])
def test_missing_database_is_a_message_not_a_traceback(capsys, tmp_path, command):
    """Every command says which file is missing and exits 1, creating nothing."""
    path = tmp_path / "nowhere" / "asyncai.db"
    status, out, err = run_cli(capsys, *command, "--db", str(path))
    assert (status, out) == (1, "")
    assert f"no database at {path}" in err
    assert "Traceback" not in err
    assert not path.parent.exists()


def test_a_file_that_is_not_a_database(capsys, tmp_path):
    """A non-SQLite file is one line of error, not a traceback."""
    path = tmp_path / "asyncai.db"
    path.write_text("hello" * 1000)
    status, _, err = run_cli(capsys, "audit", "--db", str(path))
    assert status == 1
    assert err.startswith("asyncai: ")
    assert len(err.splitlines()) == 1


def test_the_real_console_script(db, tmp_path):
    """`asyncai audit` as a subprocess: JSON lines on stdout, and a clean error for a missing db."""
    done = subprocess.run(
        [str(ASYNCAI), "audit", "--db", str(db), "--json", "--tool", "delete_object"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert [json.loads(line)["tool"] for line in done.stdout.splitlines()] == ["delete_object"]
    missing = subprocess.run(
        [str(ASYNCAI), "threads"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        check=False,
    )
    assert missing.returncode == 1
    assert "no database at .asyncai/asyncai.db" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_an_unopenable_database_exits_without_a_thread_traceback(tmp_path):
    """`--db` naming a directory: one line of error, and no traceback from aiosqlite's
    worker thread (it used to report to an event loop that was already closed)."""
    (tmp_path / "dir.db").mkdir()
    done = subprocess.run(
        [str(ASYNCAI), "threads", "--db", str(tmp_path / "dir.db")],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("asyncai: opening ")
    assert "Traceback" not in done.stderr


async def test_a_transcript_with_a_lone_surrogate_prints(tmp_path):
    """A record carrying a lone surrogate (from a model's JSON) prints as valid JSONL that
    loads back to the same text, and as text with the surrogate escaped; it used to end
    in a UnicodeEncodeError traceback on stdout."""
    path = tmp_path / "asyncai.db"
    async with Store(path) as store:
        await store.runs.start_run("R1", "#ops", "T1")
        records = run_records("broken \ud800 question", answer="fine")
        await store.runs.finish_run("R1", "done", records, RunMetrics(), [], "done")
    outputs = []
    for extra in (["--jsonl"], []):
        proc = await asyncio.create_subprocess_exec(
            str(ASYNCAI), "transcript", "T1", "--db", str(path), *extra,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert (proc.returncode, err) == (0, b"")
        outputs.append(out.decode("utf-8"))  # strict: valid UTF-8
    first = json.loads(outputs[0].splitlines()[0])
    assert first["message"] == records[0].message
    assert "broken \\ud800 question" in outputs[1]


def test_a_huge_limit_is_an_argparse_error_not_an_overflow(capsys, db):
    """--limit past what SQLite's 64-bit integers hold: argparse's exit 2 and one line
    saying the bound; it used to end in an OverflowError traceback from the query."""
    with pytest.raises(SystemExit) as caught:
        main(["audit", "--db", str(db), "--limit", "99999999999999999999"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"asyncai audit: error: argument --limit: must be at most {MAX_LIMIT}: 99999999999999999999"
    )
    assert run_cli(capsys, "threads", "--db", str(db), "--limit", str(MAX_LIMIT))[0] == 0


@pytest.mark.parametrize(
    ("since", "bound"),
    [
        ("0001-01-01", "0001-01-01T00:00:00.000Z"),
        ("0999-05-05T01:02:03.456789", "0999-05-05T01:02:03.456Z"),
        ("0001-01-01T00:30:00+01:00", "0001-01-01T00:00:00.000Z"),  # before year 1 in UTC
        ("9999-12-31T23:00:00-05:00", "9999-12-31T23:59:59.999Z"),  # after 9999 in UTC
    ],
)
def test_since_accepts_the_first_and_last_years(since, bound):
    """Years below 1000 keep four digits and moments past either end of what datetime
    holds in UTC become its first or last moment; 0001-01-01 used to be refused
    (``1-01-01...`` is not ISO) and an offset past 9999 raised an OverflowError."""
    assert parse_since(since) == bound


def test_audit_since_the_year_one_lists_every_call(capsys, db):
    """`asyncai audit --since 0001-01-01` is every call; past 9999 none."""
    assert audit_tools(capsys, db, "--since", "0001-01-01") == audit_tools(capsys, db)
    assert audit_tools(capsys, db, "--since", "9999-12-31T23:00:00-05:00") == []


def test_a_non_utf8_argument_is_one_line_not_a_traceback(db):
    """Bytes that are not UTF-8 in argv (Python passes them on as lone surrogates): exit 2
    and one line showing the bytes, for every command; a filter or thread id like that
    used to end in a UnicodeEncodeError traceback from SQLite."""
    for argv in (
        [b"audit", b"--db", bytes(db), b"--tool", b"\xff"],
        [b"transcript", b"--db", bytes(db), b"T\xffx"],
    ):
        done = subprocess.run(
            [bytes(ASYNCAI), *argv], capture_output=True, timeout=30, cwd=ROOT, check=False
        )
        assert done.returncode == 2
        bad = b"b'\\xff'" if argv[0] == b"audit" else b"b'T\\xffx'"
        assert done.stderr == b"asyncai: an argument is not UTF-8 text: " + bad + (
            b"; pass text in UTF-8\n"
        )
        assert done.stdout == b""


def test_approvals_rules_lists_and_revoke_removes(capsys, tmp_path):
    """`approvals --rules [--json]` lists the rules in force with their ids; `--revoke ID`
    takes one out of force (one line), a second time it is an error naming the listing."""
    path = tmp_path / "asyncai.db"

    async def grant() -> None:
        async with Store(path) as store:
            await store.rules.add_rules(
                [
                    NewRule("r4ule2", "#ops", "kcp.scale_object", "alice", "2026-12-01T22:00:00Z"),
                    NewRule("d3vrul", "#dev", "git.commit", "bob", "2026-12-01T21:00:00Z", "k3"),
                ]
            )

    asyncio.run(grant())
    status, out, err = run_cli(capsys, "approvals", "--db", str(path), "--rules")
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "ID      CHANNEL  TOOL              GRANTED BY  GRANTED                  REQUEST",
        "d3vrul  #dev     git.commit        bob         2026-12-01 21:00:00.000  k3",
        "r4ule2  #ops     kcp.scale_object  alice       2026-12-01 22:00:00.000  -",
    ]
    status, out, _ = run_cli(capsys, "approvals", "--db", str(path), "--rules", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["channel"], r["tool"], r["granted_by"]) for r in rows] == [
        ("d3vrul", "#dev", "git.commit", "bob"),
        ("r4ule2", "#ops", "kcp.scale_object", "alice"),
    ]
    status, out, err = run_cli(capsys, "approvals", "--db", str(path), "--revoke", "R4ULE2")
    assert (status, err) == (0, "")
    assert out.startswith("revoked rule r4ule2: kcp.scale_object asks again in #ops")
    status, out, err = run_cli(capsys, "approvals", "--db", str(path), "--revoke", "r4ule2")
    assert (status, out) == (1, "")
    assert err.strip() == (
        "asyncai: no approval rule r4ule2 in force (asyncai approvals --rules lists them)"
    )
    _, out, _ = run_cli(capsys, "approvals", "--db", str(path), "--rules")
    assert [line.split()[0] for line in out.splitlines()] == ["ID", "d3vrul"]
    # the requests' listing keeps its flags; --rules and --pending are one or the other
    status, out, _ = run_cli(capsys, "approvals", "--db", str(path), "--pending")
    assert (status, out) == (0, "no pending approval requests\n")
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "approvals", "--db", str(path), "--rules", "--pending")
    assert exited.value.code == 2


def test_approvals_rules_on_an_empty_database(capsys, db):
    """No rule yet: one line saying so."""
    status, out, _ = run_cli(capsys, "approvals", "--db", str(db), "--rules")
    assert (status, out) == (0, "no approval rules in force\n")


@pytest.mark.parametrize(
    "command",
    [["threads"], ["audit"], ["transcript", "T1"], ["approvals"], ["approvals", "--revoke", "x"]],
)
def test_a_database_of_another_program_is_left_as_it_was(capsys, tmp_path, command):
    """`--db` naming an empty file or another program's SQLite file (a typo, the hub's
    hub.db): one line and exit 1, and the file untouched. The commands used to write
    asyncai's whole schema into it and switch it to WAL, and report "no threads yet"."""
    empty = tmp_path / "empty.db"
    empty.touch()
    other = tmp_path / "notes.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.commit()
    for path, why in ((empty, "it has no asyncai schema"), (other, "it has other tables: notes")):
        before = path.read_bytes()
        status, out, err = run_cli(capsys, *command, "--db", str(path))
        assert (status, out) == (1, "")
        assert err == f"asyncai: {path} is not an asyncai database ({why})\n"
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "notes.db"]


@pytest.mark.parametrize("command", [["threads"], ["audit"], ["transcript", "T1"], ["approvals"]])
def test_a_db_path_too_long_is_one_line(capsys, tmp_path, command):
    """--db with a name longer than the system takes: exit 1 and one line, not pathlib's
    OSError (ENAMETOOLONG) traceback from the existence check."""
    path = tmp_path / ("a" * 300)
    status, out, err = run_cli(capsys, *command, "--db", str(path))
    assert (status, out) == (1, "")
    assert err == f"asyncai: cannot open {path}: File name too long\n"
