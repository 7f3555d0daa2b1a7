"""Runs of two daemons' databases through the audit stream into one collected database."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client

from daemon.cli import main
from daemon.cluster.audit import (
    AUDIT_STREAM,
    AUDIT_SUBJECT,
    AuditExporter,
    collect,
    ensure_audit_stream,
)
from sessions.model import RunMetrics
from sessions.replica import MalformedRunDocument
from sessions.store import Store
from sessions.testing import run_records, tool_call_row


async def _a_run(store: Store, thread: str, prompt_id: str, *, mutating: bool = False) -> str:
    """One finished run with its prompt, four records and one audit row."""
    await store.runs.record_prompt(
        "#c", thread, prompt_id, "alice", "how many?", "2026-11-30T10:00:00Z"
    )
    run_id = str(uuid.uuid4())
    await store.runs.start_run(run_id, "#c", thread, [prompt_id])
    await store.audit.add_tool_call(
        tool_call_row(run_id, thread, tool="scale" if mutating else "list", mutating=mutating)
    )
    await store.runs.finish_run(
        run_id, "done", run_records(), RunMetrics(rounds=2), [prompt_id], "done"
    )
    return run_id


async def test_two_daemons_runs_are_collected_into_one_queryable_database(
    nc: Client, tmp_path: Path
) -> None:
    """Each daemon exports its runs; audit-collect stores them all; the queries see both."""
    js = nc.jetstream()
    async with Store(tmp_path / "a" / "a.db") as a, Store(tmp_path / "b" / "b.db") as b:
        await _a_run(a, "000000000001", "000000000001")
        await _a_run(b, "000000000002", "000000000002", mutating=True)
        follow = await _a_run(a, "000000000001", "000000000005")  # a follow-up in a's thread
        exporters = [
            AuditExporter(js, s.replica, tmp_path / name, interval=60)
            for s, name in ((a, "a"), (b, "b"))
        ]
        await ensure_audit_stream(js)
        assert [await e.send_new() for e in exporters] == [2, 1]
        assert [await e.send_new() for e in exporters] == [0, 0]  # the marker remembers
        (tmp_path / "a" / "audit.published").unlink()
        assert await exporters[0].send_new() == 2  # lost marker: sent again, de-duplicated
        async with Store(tmp_path / "all.db") as collected:
            stats = await collect(js, collected.replica, until_caught_up=True, fetch_timeout=0.5)
            assert (stats.applied, stats.refused) == (3, 0)
            threads = {t.thread_id: t for t in await collected.queries.threads()}
            assert set(threads) == {"000000000001", "000000000002"}
            audit = await collected.audit.entries()
            assert sorted(e.tool for e in audit) == ["list", "list", "scale"]
            assert [e.tool for e in await collected.audit.entries(mutating=True)] == ["scale"]
            transcript = await collected.queries.transcript("000000000001")
            assert len(transcript) == 8  # both runs of the thread, four records each
            assert transcript[4].parent_uuid == transcript[3].uuid  # the chain holds
            # applying the same run again changes nothing
            await collected.replica.apply_run_rows(await a.replica.run_rows(follow))
            assert len(await collected.audit.entries()) == 3
            assert len(await collected.queries.transcript("000000000001")) == 8


async def test_what_is_not_a_run_document_is_refused_and_the_rest_goes_on(
    nc: Client, tmp_path: Path
) -> None:
    """Garbage on the subject is logged and acked; the good documents are applied."""
    js = nc.jetstream()
    async with Store(tmp_path / "a.db") as a, Store(tmp_path / "all.db") as collected:
        run_id = await _a_run(a, "000000000001", "000000000001")
        await ensure_audit_stream(js)
        await js.publish(AUDIT_SUBJECT, b"not json", stream=AUDIT_STREAM)
        await js.publish(AUDIT_SUBJECT, json.dumps({"v": 7}).encode(), stream=AUDIT_STREAM)
        await js.publish(AUDIT_SUBJECT, json.dumps(await a.replica.run_rows(run_id)).encode())
        stats = await collect(js, collected.replica, until_caught_up=True, fetch_timeout=0.5)
        assert (stats.applied, stats.refused) == (1, 2)
        again = await collect(js, collected.replica, until_caught_up=True, fetch_timeout=0.5)
        assert (again.applied, again.refused) == (0, 0)  # the durable consumer resumes
        with pytest.raises(MalformedRunDocument):
            await collected.replica.apply_run_rows({"v": 1, "run": "x", "tables": {}})


async def test_audit_collect_command_follows_the_stream_into_a_database(
    nc: Client, tmp_path: Path
) -> None:
    """`asyncai audit-collect --db PATH --once`: the runs land in PATH, `asyncai audit` sees them;
    a broker that is not there is one line on stderr and exit status 1."""
    js = nc.jetstream()
    async with Store(tmp_path / "a.db") as a:
        await _a_run(a, "000000000001", "000000000001", mutating=True)
        await ensure_audit_stream(js)
        assert await AuditExporter(js, a.replica, tmp_path, interval=60).send_new() == 1
    url = nc.connected_url
    assert url is not None
    collect_cmd = [
        sys.executable,
        "-m",
        "daemon.cli",
        "audit-collect",
        "--db",
        str(tmp_path / "all.db"),
        "--url",
        f"nats://{url.hostname}:{url.port}",
        "--once",
    ]
    proc = await asyncio.create_subprocess_exec(
        *collect_cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "applied 1 runs, refused 0"
    audit = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon.cli",
        "audit",
        "--db",
        str(tmp_path / "all.db"),
        "--json",
        stdout=asyncio.subprocess.PIPE,
    )
    rows, _ = await asyncio.wait_for(audit.communicate(), 60)
    [row] = [json.loads(line) for line in rows.decode().splitlines()]
    assert (row["tool"], row["mutating"], row["thread_id"]) == ("scale", True, "000000000001")
    nobody = await asyncio.create_subprocess_exec(
        *collect_cmd[:-2],
        "nats://127.0.0.1:1",
        "--once",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(nobody.communicate(), 60)
    assert nobody.returncode == 1
    assert err.decode().startswith("asyncai audit-collect: cannot connect to the NATS broker")
    assert len(err.decode().strip().splitlines()) == 1


@pytest.mark.parametrize("durable", ["a.b", "audit collect", "*", ">", "", "d" * 256])
def test_a_durable_name_nats_refuses_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], durable: str
) -> None:
    """--durable is checked before connecting: a '.', a space, '*' or '>' used to end in
    nats-py's ValueError traceback once connected, an empty name silently followed the
    stream with no durable consumer (nothing kept of where it left off), and one over 255
    characters was the broker's 400."""
    with pytest.raises(SystemExit) as exited:
        main(["audit-collect", "--db", str(tmp_path / "all.db"), "--durable", durable])
    assert exited.value.code == 2
    assert "argument --durable: " in capsys.readouterr().err
    assert not (tmp_path / "all.db").exists()


@pytest.mark.parametrize("fetch_timeout", [0.0005, 0.002, 0.01])
async def test_a_fetch_whose_deadline_passes_mid_way_is_caught_up_not_an_error(
    nc: Client, tmp_path: Path, fetch_timeout: float
) -> None:
    """nats-py's ``fetch`` raises the builtin ``TimeoutError`` (not only its own
    ``nats.errors.TimeoutError``) when the deadline passes between its two pull
    requests; under load that is a normal empty fetch. It once ended
    ``audit-collect --once`` with exit status 1 and an empty message (CI,
    2026-12-02): a builtin TimeoutError is an OSError, and its text is empty."""
    js = nc.jetstream()
    async with Store(tmp_path / "all.db") as collected:
        for _ in range(20):
            stats = await collect(
                js, collected.replica, until_caught_up=True, fetch_timeout=fetch_timeout
            )
            assert (stats.applied, stats.refused) == (0, 0)
