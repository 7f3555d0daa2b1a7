"""The console's reads (sessions/views.py, issue 30): the threads list and one thread unfolded.

On a real SQLite store, rows written the way the daemon writes them; the
unfolding of records into rounds is pure and tested without the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.web.highlight import highlight
from sessions import RunMetrics, Store, unfold_run
from sessions.model import AuditEntry
from sessions.testing import run_records, tool_call_row
from tests.test_sessions_store import answered_run


@pytest.fixture
async def store(tmp_path: Path):
    """An open store on a fresh file."""
    async with Store(tmp_path / "asyncai.db") as s:
        yield s


async def test_the_threads_list_has_status_first_prompt_tokens_and_filters(store: Store):
    """Two done threads and one running: each row's first prompt and sender, runs and
    tokens; filters by channel, sender and status each narrow the list."""
    await answered_run(store, "#ops", "t1", "r1", "p1", prompt="how many pods?")
    await answered_run(store, "#ops", "t1", "r2", "p2", prompt="and now?")
    await answered_run(store, "#dev", "t2", "r3", "p3", prompt="build status?")
    await store.runs.add_run_tokens("r1", 100, 20)
    await store.runs.record_prompt("#ops", "t3", "p4", "bob", "scale it", "2026-11-29T19:00:00Z")
    await store.runs.start_run("r4", "#ops", "t3", ["p4"])

    rows = {r.thread_id: r for r in await store.views.threads()}
    assert rows["t1"].first_prompt == "how many pods?"
    assert rows["t1"].first_sender == "alice"
    assert (rows["t1"].runs, rows["t1"].tokens, rows["t1"].status) == (2, 120, "idle")
    assert rows["t3"].status == "running"
    assert {r.thread_id for r in await store.views.threads(channel="#dev")} == {"t2"}
    assert {r.thread_id for r in await store.views.threads(sender="bob")} == {"t3"}
    assert {r.thread_id for r in await store.views.threads(status="running")} == {"t3"}
    assert await store.views.threads(status="paused") == []
    assert await store.views.channels() == ["#dev", "#ops"]


async def test_a_thread_unfolds_into_runs_rounds_snippets_and_calls(store: Store):
    """A done run: its prompt, the run_code snippet with its result, the nested call under
    its round, and the reply; the version mark changes when a new call starts."""
    records = await answered_run(store, "#ops", "t1", "r1", "p1", calls=2)
    page = await store.views.thread("#ops", "t1")
    assert page is not None
    [run] = page.runs
    assert run.prompts[0][:2] == ("alice", "how many pods?")
    assert run.reply == "Three."
    snippet_round = run.rounds[0]
    assert snippet_round.uuid == records[1].uuid
    [snippet] = snippet_round.snippets
    assert snippet.tool == "run_code"
    assert "list_objects" in snippet.code
    assert snippet.result == "3"
    assert [c.tool for c in snippet_round.calls] == ["list_objects", "list_objects"]
    assert run.working == []
    assert await store.views.thread("#ops", "nope") is None

    before = await store.views.thread_version("#ops", "t1")
    await store.runs.record_prompt("#ops", "t1", "p2", "alice", "again", "2026-11-29T19:00:00Z")
    await store.runs.start_run("r2", "#ops", "t1", ["p2"])
    started = await store.views.thread_version("#ops", "t1")
    assert started != before
    await store.audit.add_tool_call(tool_call_row("r2", "t1", record_uuid="not-yet-stored"))
    assert await store.views.thread_version("#ops", "t1") != started
    page = await store.views.thread("#ops", "t1")
    assert page is not None
    assert page.status == "running"
    assert [c.tool for c in page.runs[-1].working] == ["list_objects"]  # live, before records


async def test_a_thread_page_shows_the_newest_runs_only_unless_asked(store: Store):
    """runs=N keeps the newest N (oldest first on the page) and counts them all."""
    for i in range(5):
        await store.runs.record_prompt(
            "#ops", "t", f"p{i}", "alice", f"q{i}", "2026-11-29T18:00:00Z"
        )
        await store.runs.start_run(f"r{i}", "#ops", "t", [f"p{i}"])
        await store.runs.finish_run(
            f"r{i}", "done", run_records(f"q{i}"), RunMetrics(), [f"p{i}"], "done"
        )
    page = await store.views.thread("#ops", "t", runs=2)
    assert page is not None
    assert page.total_runs == 5
    assert [r.prompts[0][1] for r in page.runs] == ["q3", "q4"]
    every = await store.views.thread("#ops", "t", runs=None)
    assert every is not None
    assert len(every.runs) == 5


def _entry(call_id: int, record_uuid: str | None) -> AuditEntry:
    return AuditEntry(
        id=call_id, run_id="r", channel="#c", thread_id="t", record_uuid=record_uuid,
        tool="echo", arguments={}, is_error=False, bytes=1, mutating=False,
        started="2026-11-29T18:00:00.000Z", duration_ms=1.0,
    )  # fmt: skip


def test_unfold_run_matches_results_to_snippets_and_calls_to_rounds() -> None:
    """An error result marks its snippet; calls of an unstored round are 'working'."""
    records = run_records(is_error=True, result="NameError: x")
    as_rows = [(r.uuid, r.type, r.message) for r in records]
    rounds, working, reply = unfold_run(as_rows, [_entry(1, records[1].uuid), _entry(2, "later")])
    assert rounds[0].snippets[0].is_error is True
    assert rounds[0].snippets[0].result == "NameError: x"
    assert [c.id for c in rounds[0].calls] == [1]
    assert [c.id for c in working] == [2]
    assert reply == "Three pods are running."
    assert unfold_run([], []) == ([], [], None)


def test_highlight_escapes_and_marks_keywords_strings_and_comments() -> None:
    """The snippet's text survives escaped; a broken snippet is shown plain, escaped."""
    html = str(highlight("x = await f('<b>')  # note\nif x: 1"))
    assert '<span class="tok-kw">await</span>' in html
    assert '<span class="tok-str">&#39;&lt;b&gt;&#39;</span>' in html
    assert '<span class="tok-com"># note</span>' in html
    assert '<span class="tok-num">1</span>' in html
    assert str(highlight("s = '''<i>")) == "s = &#39;&#39;&#39;&lt;i&gt;"


def test_an_approval_says_how_long_it_waited() -> None:
    """From its request to its decision, in seconds; None while pending."""
    from sessions import ApprovalView

    decided = ApprovalView(
        "a1", "2026-11-29T18:00:00.000Z", "alice", "approved", "bob",
        "2026-11-29T18:00:12.500Z", None, ["kcp.scale_object"],
    )  # fmt: skip
    assert decided.waited == 12.5
    pending = ApprovalView("a2", "2026-11-29T18:00:00Z", "alice", "pending", None, None, None, [])
    assert pending.waited is None
