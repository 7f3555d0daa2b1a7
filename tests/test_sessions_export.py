"""The Claude Code JSONL export, read back the way a third-party transcript reader does."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sessions import Record, RunMetrics, Store, session_id
from sessions.export import envelope, jsonl_lines, text_lines
from sessions.model import StoredRecord
from sessions.testing import assistant_record, run_records, tool_call_row, user_record

ENVELOPE = {
    "parentUuid",
    "isSidechain",
    "userType",
    "cwd",
    "sessionId",
    "version",
    "type",
    "message",
    "uuid",
    "timestamp",
}


def parallel_run() -> list[Record]:
    """A run whose assistant calls run_code twice in one message, then answers."""
    ids = [f"toolu_{uuid.uuid4().hex[:24]}" for _ in range(2)]
    call = assistant_record(
        [
            {"type": "text", "text": "Checking both namespaces."},
            *(
                {"type": "tool_use", "id": i, "name": "run_code", "input": {"code": f"ns{n}"}}
                for n, i in enumerate(ids)
            ),
        ],
        stop_reason="tool_use",
    )
    results = Record(
        uuid=str(uuid.uuid4()),
        type="user",
        timestamp="2026-11-29T18:10:02.000Z",
        message={
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": i,
                    "content": [{"type": "text", "text": "ok"}],
                }
                for i in reversed(ids)  # results may come back in another order
            ],
        },
        tool_use_result={"nested_calls": []},
    )
    return [
        user_record("and in kube-system?"),
        call,
        results,
        assistant_record([{"type": "text", "text": "Both are fine."}]),
    ]


@pytest.fixture
async def exported(tmp_path: Path) -> list[str]:
    """A thread of three runs (one failed before any record), exported to a file and read back."""
    async with Store(tmp_path / "a.db", cwd="/srv/asyncai", version="0.1.0") as store:
        for n, records in enumerate([run_records(), [], parallel_run()]):
            run = f"R{n}"
            await store.runs.record_prompt(
                "#ops", "01T", f"M{n}", "alice", "q", "2026-11-29T18:00:00Z"
            )
            await store.runs.start_run(run, "#ops", "01T", [f"M{n}"])
            if records:
                await store.audit.add_tool_call(
                    tool_call_row(run, "01T", record_uuid=records[1].uuid)
                )
            await store.runs.finish_run(
                run, "done" if records else "failed", records, RunMetrics(), [f"M{n}"], "done"
            )
        out = tmp_path / "session.jsonl"
        out.write_text(
            "".join(line + "\n" for line in jsonl_lines(await store.queries.transcript("01T")))
        )
    with out.open() as lines:
        return list(lines)


def test_every_line_is_a_full_envelope(exported: list[str]):
    """Each line parses alone and carries every envelope field readers require."""
    assert len(exported) == 8
    for line in exported:
        record = json.loads(line)
        assert set(record) - {"toolUseResult"} == ENVELOPE
        assert record["sessionId"] == session_id("#ops", "01T")
        assert uuid.UUID(record["sessionId"]).version == 5
        assert uuid.UUID(record["uuid"])
        assert record["isSidechain"] is False
        assert record["userType"] == "external"
        assert (record["cwd"], record["version"]) == ("/srv/asyncai", "0.1.0")
        assert datetime.fromisoformat(record["timestamp"]).tzinfo == UTC
        assert record["type"] == record["message"]["role"]
        if record["type"] == "assistant":
            message = record["message"]
            assert {"id", "type", "model", "content", "stop_reason", "usage"} <= set(message)


def test_parent_uuid_order_is_line_order(exported: list[str]):
    """Following parentUuid from the root visits every record exactly in line order."""
    records = [json.loads(line) for line in exported]
    children = {r["parentUuid"]: r["uuid"] for r in records}
    assert len(children) == len(records)  # no record has two children: a single chain
    walk, at = [], None
    while at in children:
        at = children[at]
        walk.append(at)
    assert walk == [r["uuid"] for r in records]


def test_tool_use_ids_match_tool_result_ids(exported: list[str]):
    """Every tool_use has exactly one later tool_result with its id, and no result is orphaned."""
    records = [json.loads(line) for line in exported]
    uses: dict[str, int] = {}
    results: dict[str, int] = {}
    for index, record in enumerate(records):
        for block in record["message"]["content"]:
            if block["type"] == "tool_use":
                uses[block["id"]] = index
            elif block["type"] == "tool_result":
                assert block["tool_use_id"] not in results
                results[block["tool_use_id"]] = index
                assert "toolUseResult" in record
    assert set(uses) == set(results)
    assert len(uses) == 3
    assert all(results[i] > uses[i] for i in uses)
    assert all("toolUseResult" not in r for r in records if r["type"] == "assistant")


def test_envelope_key_order_matches_claude_code():
    """Keys come in Claude Code's order; toolUseResult only when there is one."""
    record = StoredRecord(
        uuid="u",
        parent_uuid=None,
        session_id="s",
        channel="#ops",
        thread_id="T",
        run_id="R",
        type="user",
        timestamp="2026-11-29T18:00:00.000Z",
        message={"role": "user", "content": "hi"},
        tool_use_result=None,
        cwd="/",
        version="0.1.0",
    )
    assert list(envelope(record)) == [
        "parentUuid",
        "isSidechain",
        "userType",
        "cwd",
        "sessionId",
        "version",
        "type",
        "message",
        "uuid",
        "timestamp",
    ]
    # a string content (what Claude Code writes for a typed prompt) renders too
    assert list(text_lines([record])) == ["[2026-11-29 18:00:00] user:", "    hi", ""]


async def test_text_form_truncates_long_results_and_marks_errors(tmp_path: Path):
    """Long results are cut with a pointer to --jsonl; errors and mutating calls are marked."""
    records = run_records(
        result="y" * 5000,
        is_error=True,
        nested=[
            {
                "tool": "delete_object",
                "arguments": {},
                "is_error": False,
                "bytes": 9,
                "mutating": True,
            }
        ],
    )
    async with Store(tmp_path / "a.db") as store:
        await store.runs.start_run("R", "#ops", "T")
        await store.runs.finish_run("R", "done", records, RunMetrics(), [], "done")
        text = "\n".join(text_lines(await store.queries.transcript("T"), result_chars=100))
    assert "(error):" in text
    assert "… (4900 more characters; --jsonl has them all)" in text
    assert "delete_object({}) — ok, MUTATING, 9 B" in text


async def test_text_form_cuts_a_nested_calls_long_arguments(tmp_path: Path):
    """A nested call's arguments are cut like a result: a call made with 10 MB of text
    used to print as one 10 MB line of the text transcript (the audit table cuts them
    too; --jsonl has them all)."""
    nested = {"tool": "echo", "arguments": {"text": "z" * 10_000_000}, "bytes": 10_000_000}
    records = run_records(result="ok", nested=[nested])
    async with Store(tmp_path / "a.db") as store:
        await store.runs.start_run("R", "#ops", "T")
        await store.runs.finish_run("R", "done", records, RunMetrics(), [], "done")
        stored = await store.queries.transcript("T")
    [line] = [x for x in text_lines(stored) if x.startswith("    echo(")]
    assert line.startswith('    echo({"text": "zzz')
    assert f"… ({10_000_012 - 2000} more characters; --jsonl has them all)) — ok" in line
    assert len(line) < 2200
    [exported] = [x for x in jsonl_lines(stored) if "toolUseResult" in x]
    assert json.loads(exported)["toolUseResult"]["nested_calls"][0] == nested


def _said(run_id: str, text: str) -> StoredRecord:
    return StoredRecord(
        uuid=str(uuid.uuid4()),
        parent_uuid=None,
        session_id="s",
        channel="#ops",
        thread_id="T",
        run_id=run_id,
        type="user",
        timestamp="2026-12-02T02:00:00.000Z",
        message={"role": "user", "content": text},
        tool_use_result=None,
        cwd="/",
        version="0.1.0",
    )


def test_each_run_ends_with_its_line_where_its_seconds_went():
    """Issue 31: `asyncai transcript` ends each run's records with one line: its status,
    its split (the model's part summed from slot, prompt and generation), rounds and
    tokens; a run stored before the split says it has none."""
    from sessions.export import run_line

    split = {
        "total": 10.0,
        "model_slot": 0.5,
        "prompt_eval": 6.25,
        "generation": 2.0,
        "sandbox": 0.125,
        "tools": 1.0,
        "approvals": 0.0,
        "daemon": 0.125,
    }
    timed = RunMetrics(rounds=2, prompt_tokens=12_345, completion_tokens=67, split=split)
    line = run_line("0123456789abcdef", "done", timed)
    assert line == (
        "── run 0123456789ab done in 10.00 s: model 8.75 (slot 0.50, prompt 6.25, "
        "generation 2.00) · sandbox 0.12 · tools 1.00 · approvals 0.00 · daemon 0.12 "
        "· 2 rounds, 12,345+67 tokens"
    )
    old = run_line("R2", "failed", RunMetrics(rounds=1))
    assert old == "── run R2 failed: 1 rounds, 0+0 tokens (no time split recorded)"
    lines = list(
        text_lines(
            [_said("R1", "a"), _said("R1", "b"), _said("R2", "c")],
            runs={"R1": "line one", "R2": "line two"},
        )
    )
    assert lines.index("line one") == lines.index("    b") + 2  # after R1's last record
    assert lines[-1] == "line two"
    assert "line one" not in list(text_lines([_said("R1", "a")]))  # no runs given: none


def test_a_stored_split_survives_the_round_trip_and_junk_in_it_is_dropped():
    metrics = RunMetrics(split={"total": 1.5, "tools": 0.25})
    assert metrics.extra() == {"split": {"total": 1.5, "tools": 0.25}}
    loaded = RunMetrics()
    loaded.load_extra({"split": {"total": 2, "tools": "x", "daemon": True}, "peeks": 1})
    assert (loaded.split, loaded.peeks) == ({"total": 2.0}, 1)
    assert RunMetrics().extra() == {}
