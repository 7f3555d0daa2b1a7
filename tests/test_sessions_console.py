"""The reads the console's pages make (issue 30), on real SQLite: the approvals search,
the audit's filters and its CSV, the usage per day, sender and channel."""

from __future__ import annotations

import csv
import io
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from sessions import AUDIT_CSV_COLUMNS, RunMetrics, Store, StoreError, audit_csv_lines
from sessions.approvals import NewApproval
from sessions.testing import run_records, tool_call_row
from sessions.usage import usage_query


@pytest.fixture
async def store(tmp_path: Path):
    """A store with three runs: R1 (alice, #ops), R2 (bob, #ops), R3 (alice and carol,
    coalesced, #dev), each with its calls and counters; R3 started a day later."""
    path = tmp_path / "c.db"
    async with Store(path) as store:
        runs = [
            ("R1", "#ops", "T1", [("M1", "alice")], 100, 10, 2, 5000, 200),
            ("R2", "#ops", "T2", [("M2", "bob")], 40, 4, 1, 300, 400),
            ("R3", "#dev", "T3", [("M3", "alice"), ("M4", "carol")], 7, 3, 0, 0, 0),
        ]
        for run_id, channel, thread, prompts, p_tok, c_tok, nested, b_in, b_out in runs:
            for mid, sender in prompts:
                await store.runs.record_prompt(
                    channel, thread, mid, sender, "do it", "2026-11-30T08:00:00Z"
                )
            await store.runs.start_run(run_id, channel, thread, [m for m, _ in prompts])
            metrics = RunMetrics(
                rounds=1,
                nested_calls=nested,
                bytes_in=b_in,
                bytes_out=b_out,
                prompt_tokens=p_tok,
                completion_tokens=c_tok,
            )
            await store.runs.finish_run(
                run_id, "done", run_records("do it"), metrics, [m for m, _ in prompts], "done"
            )
        audit = store.audit
        await audit.add_tool_call(
            tool_call_row("R1", "T1", tool="list_objects", started="2026-11-30T08:00:01Z")
        )
        await audit.add_tool_call(
            tool_call_row(
                "R1",
                "T1",
                tool="delete_object",
                mutating=True,
                arguments={"name": "=cmd|' /C calc'!A0"},
                started="2026-11-30T08:00:02Z",
            )
        )
        row = tool_call_row("R2", "T2", tool="erase", mutating=True, is_error=True)
        row = type(row)(**{**row.__dict__, "outcome": "error", "started": "2026-11-30T09:00:00Z"})
        await audit.add_tool_call(row)
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE runs SET started = '2026-12-01T10:00:00.000Z' WHERE id = 'R3'")
            db.execute("UPDATE runs SET started = '2026-11-30T08:00:00.000Z' WHERE id != 'R3'")
        yield store


async def test_the_audit_filters_by_outcome_sender_tools_and_time(store: Store) -> None:
    """Each filter narrows the calls; a server's tools are a list; an empty list is none."""
    audit = store.audit
    assert [e.tool for e in await audit.entries()] == ["erase", "delete_object", "list_objects"]
    assert [e.tool for e in await audit.entries(outcome="error")] == ["erase"]
    assert [e.tool for e in await audit.entries(sender="alice")] == [
        "delete_object",
        "list_objects",
    ]
    assert [e.tool for e in await audit.entries(sender="bob", mutating=True)] == ["erase"]
    assert await audit.entries(sender="nobody") == []
    both = await audit.entries(tools=["erase", "list_objects"])
    assert [e.tool for e in both] == ["erase", "list_objects"]
    assert await audit.entries(tools=[]) == []
    window = await audit.entries(since="2026-11-30T08:00:02Z", until="2026-11-30T09:00:00Z")
    assert [e.tool for e in window] == ["delete_object"]
    assert [e.tool for e in await audit.entries(channel="#ops", tool="erase")] == ["erase"]
    with pytest.raises(StoreError, match="until"):
        await audit.entries(until="yesterday-ish")


async def test_the_audit_csv_has_a_header_every_field_and_no_formula(store: Store) -> None:
    """One line per call, the arguments as JSON; a cell that would run as a formula in a
    spreadsheet is written as text."""
    text = "".join(audit_csv_lines(await store.audit.entries()))
    rows = list(csv.reader(io.StringIO(text)))
    assert tuple(rows[0]) == AUDIT_CSV_COLUMNS
    assert len(rows) == 4
    deleted = dict(zip(rows[0], rows[2], strict=True))
    assert deleted["tool"] == "delete_object"
    assert deleted["mutating"] == "1"
    assert deleted["arguments"] == '{"name":"=cmd|\' /C calc\'!A0"}'  # JSON starts with {
    assert deleted["channel"] == "#ops"
    assert text.endswith("\r\n")


async def test_the_audit_csv_writes_a_formula_as_text() -> None:
    """A value that starts like a formula gets a leading apostrophe."""
    from sessions import AuditEntry

    entry = AuditEntry(
        1, "R1", "#ops", "T1", None, "=HYPERLINK(1)", {}, False, 1, False, "2026", 1.0
    )
    [_, line] = list(audit_csv_lines([entry]))
    assert "'=HYPERLINK(1)" in line


async def test_approvals_are_searched_by_text_status_and_channel(store: Store) -> None:
    """The text is looked for in the id, the calls' arguments, who asked, who decided and
    the reason; 'decided' is every status but pending; % and _ are plain characters."""
    approvals = store.approvals
    for id_, run, channel, thread, who, arg in [
        ("aaaaaa", "R1", "#ops", "T1", "alice", "web-1"),
        ("bbbbbb", "R2", "#ops", "T2", "bob", "db_100%"),
        ("cccccc", "R3", "#dev", "T3", "alice", "cache"),
    ]:
        await approvals.add_approval(
            NewApproval(
                id=id_,
                run_id=run,
                channel=channel,
                thread_id=thread,
                requested_by=who,
                expires="2026-12-09T08:00:00Z",
                calls=[{"call_id": 1, "tool": "erase", "server": "kcp", "arguments": {"n": arg}}],
                conversation={},
                requested=f"2026-11-30T08:00:0{id_.count('a') // 6 + id_.count('b') // 3}Z",
            )
        )
    await approvals.decide_approval("aaaaaa", "denied", by="carol", reason="not in prod")
    await approvals.decide_approval("bbbbbb", "approved", by="alice")

    async def ids(**kwargs: object) -> list[str]:
        return sorted(a.id for a in await approvals.search(**kwargs))  # type: ignore[arg-type]

    assert await ids() == ["aaaaaa", "bbbbbb", "cccccc"]
    assert await ids(status="decided") == ["aaaaaa", "bbbbbb"]
    assert await ids(status="pending") == ["cccccc"]
    assert await ids(text="WEB-1") == ["aaaaaa"]
    assert await ids(text="prod") == ["aaaaaa"]
    assert await ids(text="carol") == ["aaaaaa"]
    assert await ids(text="100%") == ["bbbbbb"]
    assert await ids(text="b_1") == ["bbbbbb"]  # _ is no wildcard: web-1 does not match
    assert await ids(text="alice", status="decided") == ["aaaaaa", "bbbbbb"]
    assert await ids(channel="#dev") == ["cccccc"]
    assert await ids(text="erase", channel="#ops", status="denied") == ["aaaaaa"]


async def test_usage_per_day_sender_and_channel(store: Store) -> None:
    """Tokens, runs, nested calls and bytes kept out of the context (never below zero for
    a run), summed; a coalesced run counts for each of its senders."""
    by_day = {r.key: r for r in await store.queries.usage("day")}
    assert sorted(by_day) == ["2026-11-30", "2026-12-01"]
    first = by_day["2026-11-30"]
    assert (first.runs, first.tokens, first.nested_calls) == (2, 154, 3)
    assert (first.bytes_in, first.bytes_kept_out) == (5300, 4800)  # R2 sent back more: 0
    by_sender = {r.key: (r.runs, r.tokens) for r in await store.queries.usage("sender")}
    assert by_sender == {"alice": (2, 120), "bob": (1, 44), "carol": (1, 10)}
    by_channel = {r.key: r.runs for r in await store.queries.usage("channel")}
    assert by_channel == {"#dev": 1, "#ops": 2}
    since = await store.queries.usage("sender", since="2026-12-01T00:00:00Z")
    assert [(r.key, r.runs) for r in since] == [("alice", 1), ("carol", 1)]
    until = await store.queries.usage("channel", until="2026-12-01T00:00:00Z")
    assert [(r.key, r.runs) for r in until] == [("#ops", 2)]


def test_usage_is_summed_by_day_sender_or_channel_only() -> None:
    """Anything else is refused before any SQL is built; values are bound."""
    with pytest.raises(ValueError, match="not 'thread'"):
        usage_query("thread")  # type: ignore[arg-type]
    sql, params = usage_query("channel", since="2026-12-01T00:00:00Z")
    assert "?" in sql
    assert params == ["2026-12-01T00:00:00.000Z"]
