"""Stored REPLs (issue 14): a thread's scope survives eviction and restart through a ScopeStore.

End to end on the real shared Monty pool, over an in-memory store
(:mod:`tests.fakes.scope_store`); a "restart" is a new executor over the
same store (on a new pool where it matters). The note texts at the end.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from structlog.testing import capture_logs

from daemon.approvals import Decision, Verdict
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.repl import StoredScopeDump
from daemon.code_mode.repl.note import (
    ScopeVariables,
    format_saved_at,
    format_size,
    not_restored_note,
    not_saved_note,
    reset_note,
    restored_note,
    thread_note,
)
from daemon.code_mode.sandbox.pool import close_pool, create_pool
from daemon.tools import PersistentScopes, ThreadKey, ToolCallOutput, ToolDefinition
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.scope_store import SAVED_AT, MemoryScopeStore

TEST_LIMITS = {"max_feed_duration": 2.0, "max_wall": 20.0, "tool_timeout": 10.0}

MakeExecutor = Callable[..., CodeModeToolExecutor]

T = ThreadKey("#t", "t")  # the thread most tests use


@pytest.fixture
def fake() -> FakeToolExecutor:
    """One unannotated (so mutating) tool."""
    fake = FakeToolExecutor()

    @fake.tool()
    async def delete_object(*, name: str) -> str:
        """Delete one object."""
        return f"deleted {name}"

    return fake


@pytest.fixture
def store() -> MemoryScopeStore:
    """An empty in-memory store."""
    return MemoryScopeStore()


@pytest.fixture
async def make_executor(monty_pool, fake) -> AsyncIterator[MakeExecutor]:
    """Executors on the shared pool with test limits; closed afterwards."""
    made: list[CodeModeToolExecutor] = []

    def make(scopes=None, pool=monty_pool, gate=None, **limits) -> CodeModeToolExecutor:
        ex = CodeModeToolExecutor(
            fake, CodeModeLimits(**{**TEST_LIMITS, **limits}), pool=pool, gate=gate, scopes=scopes
        )
        made.append(ex)
        return ex

    yield make
    for ex in made:
        await ex.aclose()


async def run(executor: CodeModeToolExecutor, thread: str, code: str) -> ToolCallOutput:
    """One run_code call in the scope of ``thread`` (an id in the channel ``#t``)."""
    scope = executor.thread_scope(ThreadKey("#t", thread))
    return await scope.call_tool("run_code", {"code": code})


def ask(definition: ToolDefinition, arguments: dict) -> Verdict:
    """An approval policy that sends every mutating call to a person."""
    return Verdict("ask", "not read-only")


async def test_an_evicted_scope_is_stored_and_restored_when_its_thread_comes_back(
    make_executor, store
):
    """max_scopes=2: a third thread evicts the first, whose REPL is stored and loaded again."""
    ex = make_executor(store, max_scopes=2)
    assert isinstance(ex, PersistentScopes)
    assert (await run(ex, "a", "x = 41\ndef inc(v):\n    return v + 1\nx")).content == "41"
    await run(ex, "b", "y = 1")
    await run(ex, "c", "z = 1")  # evicts "a": stored before its checkout is closed
    assert ex.worker_pid(ThreadKey("#t", "a")) is None
    assert ThreadKey("#t", "a") in store.dumps
    back = await run(ex, "a", "inc(x)")
    assert back.content == "42", back.content
    assert "restored from the save of 2026-11-30 14:05:12 UTC" in (
        ex.context_note(ThreadKey("#t", "a")) or ""
    )


async def test_a_restart_restores_the_repl_and_the_note_says_when_it_was_saved(fake, store):
    """A new executor on a new pool over the same store: the note says restored, with the time
    and the names; the variables are back; the restored line is said once."""
    limits = CodeModeLimits(max_scopes=1, **TEST_LIMITS)
    pool = create_pool(limits)
    await pool.__aenter__()
    try:
        first = CodeModeToolExecutor(fake, limits, pool=pool, scopes=store)
        await run(first, "t", "x = 41\nrows = [1, 2, 3]")
        await first.checkpoint(T)
        assert [t for t, _ in store.saves] == [T]
        await first.aclose()
    finally:
        await close_pool(pool)

    pool = create_pool(limits)
    await pool.__aenter__()
    try:
        second = CodeModeToolExecutor(fake, limits, pool=pool, scopes=store)
        assert second.context_note(T) is None  # not loaded yet: nothing known
        await second.restore_scope(T)
        assert second.context_note(T) == (
            f"{restored_note(SAVED_AT)}\n[run_code variables still in scope: x: int, rows: list[3]]"
        )
        assert (
            second.context_note(T) == "[run_code variables still in scope: x: int, rows: list[3]]"
        )
        out = await run(second, "t", "x + len(rows) + dig({'a': {'b': 2}}, 'a', 'b')")
        assert out.content == "46", out.content
        await second.aclose()
    finally:
        await close_pool(pool)


async def test_a_thread_with_nothing_stored_takes_no_worker_before_its_first_snippet(
    make_executor, store
):
    """restore_scope with nothing stored: no checkout (a run that calls no tool costs the
    pool nothing, issue 17) and no note; the first snippet then starts fresh, helpers set up;
    an evicted thread whose REPL could not be stored is told so, as before."""
    ex = make_executor(store, max_scopes=1)
    await ex.restore_scope(T)
    assert ex.worker_pid(T) is None
    assert ex.context_note(T) is None
    assert (await run(ex, "t", "dig({'a': {'b': 2}}, 'a', 'b')")).content == "2"
    assert ex.worker_pid(T) is not None

    store.fail_saves = True
    await run(ex, "u", "y = 1")  # evicts "t"; its save fails, so nothing of it is stored
    await ex.restore_scope(T)
    assert ex.worker_pid(T) is None
    assert ex.context_note(T) == reset_note("evicted")
    assert "NameError" in (await run(ex, "t", "x")).content


async def test_a_new_thread_reads_nothing_from_the_store(make_executor, store):
    """restore_scope(new=True), for a run that answers its thread's root: no store read,
    no worker, no note, and the first snippet loads nothing either; the thread's REPL is
    then stored and restored as any other's."""
    ex = make_executor(store)
    await ex.restore_scope(T, new=True)
    assert ex.worker_pid(T) is None
    assert ex.context_note(T) is None
    assert (await run(ex, "t", "x = 41\nx")).content == "41"
    assert store.loads == []
    await ex.checkpoint(T)
    again = make_executor(store)
    await again.restore_scope(T)
    assert store.loads == [T]
    assert (await run(again, "t", "x + 1")).content == "42"


async def test_restore_scope_reads_a_stored_repl_once(make_executor, store):
    """restore_scope reads the store to know whether there is a REPL, and loads what it read
    (with a cluster's store, a read is a fetch over NATS)."""
    first = make_executor(store)
    await run(first, "t", "x = 41")
    await first.checkpoint(T)
    store.loads.clear()  # the first snippet looked too, and found nothing
    second = make_executor(store)
    await second.restore_scope(T)
    assert store.loads == [T]
    assert restored_note(SAVED_AT) in (second.context_note(T) or "")
    assert (await run(second, "t", "x + 1")).content == "42"
    assert store.loads == [T]


async def test_aclose_stores_what_changed_since_the_last_checkpoint(make_executor, store):
    """Shutdown (checkpoint_all, and aclose itself) stores a REPL the daemon did not checkpoint."""
    first = make_executor(store)
    await run(first, "t", "x = 7")
    await first.aclose()
    second = make_executor(store)
    assert (await run(second, "t", "x")).content == "7"


async def test_a_rejected_dump_leaves_the_repl_empty_and_the_note_says_why(make_executor, store):
    """ScopeRejected from the store: the thread starts empty (helpers set up), one line says why."""
    first = make_executor(store)
    await run(first, "t", "x = 41")
    await first.checkpoint(T)
    store.reject[T] = "its MAC does not match"
    second = make_executor(store)
    await second.restore_scope(T)
    assert second.context_note(T) == (
        "[run_code REPL is empty: the saved REPL was not restored: its MAC does not match; "
        "fetch again what you need.]"
    )
    assert "NameError" in (await run(second, "t", "x")).content
    assert (await run(second, "t", "dig({'a': {'b': 2}}, 'a', 'b')")).content == "2"


async def test_bytes_monty_cannot_load_leave_the_repl_empty_with_the_reason(make_executor, store):
    """Garbage bytes (load_session raises): a fresh checkout with the helpers, the reason noted;
    the first snippet loads it when restore_scope was not called, and the next note tells."""
    store.dumps[T] = StoredScopeDump(b"garbage", SAVED_AT)
    ex = make_executor(store)
    out = await run(ex, "t", "y = [dig({'a': {'b': 2}}, 'a', 'b')]\ny")
    assert out.content == "[2]", out.content
    why = "RuntimeError: protocol violation: failed to load session: not a monty dump"
    assert ex.context_note(T) == (
        f"{not_restored_note(why)}\n[run_code variables still in scope: y: list[1]]"
    )
    await ex.checkpoint(T)  # the bad bytes are replaced by the REPL as it is
    assert store.dumps[T].data != b"garbage"


async def test_a_scope_over_max_scope_dump_is_not_stored_and_the_note_says_so(make_executor, store):
    """Over the limit: nothing stored (an older dump is dropped), the next note says why."""
    ex = make_executor(store, max_scope_dump=1024)  # the helpers alone dump to more
    await run(ex, "t", "x = 1")
    store.dumps[T] = StoredScopeDump(b"an older, smaller REPL", SAVED_AT)
    with capture_logs() as logs:
        await ex.checkpoint(T)
    assert store.saves == []
    assert T not in store.dumps
    assert [e["event"] for e in logs] == ["code_mode.scope_too_large"]
    note = ex.context_note(T) or ""
    size = format_size(logs[0]["bytes"])
    assert note.splitlines() == [
        f"[run_code REPL ({size}) is over code_mode.max_scope_dump (1 KiB) and was not saved: "
        "it will not survive a restart.]",
        "[run_code variables still in scope: x: int]",
    ]


async def test_a_failing_save_is_logged_and_never_raised(make_executor, store):
    """The store raising on save costs only the REPL's survival; a later checkpoint retries."""
    ex = make_executor(store)
    await run(ex, "t", "x = 1")
    store.fail_saves = True
    with capture_logs() as logs:
        await ex.checkpoint(T)
    assert [e["event"] for e in logs] == ["code_mode.scope_save_failed"]
    store.fail_saves = False
    await ex.checkpoint(T)
    assert [t for t, _ in store.saves] == [T]


async def test_checkpoint_stores_only_what_changed(make_executor, store):
    """A second checkpoint without a snippet in between stores nothing."""
    ex = make_executor(store)
    await run(ex, "t", "x = 1")
    await ex.checkpoint(T)
    await ex.checkpoint(T)
    await ex.checkpoint_all()
    await ex.checkpoint(ThreadKey("#t", "never-seen"))
    assert [t for t, _ in store.saves] == [T]


async def test_reset_drops_the_repl_and_its_stored_dump(make_executor, store):
    """!reset: the live REPL and the stored dump are gone; nothing comes back after a restart."""
    ex = make_executor(store)
    await run(ex, "t", "x = 1")
    await ex.checkpoint(T)
    await ex.reset(T)
    assert T not in store.dumps
    assert ex.context_note(T) == reset_note("reset")
    assert "NameError" in (await run(ex, "t", "x")).content
    await run(ex, "u", "u = 1")
    await ex.aclose()  # stores "t" (empty, helpers only) and "u"
    again = make_executor(store)
    await again.reset(ThreadKey("#t", "u"))  # a thread not live here: only its dump is dropped
    assert "NameError" in (await run(again, "u", "u")).content


async def test_restart_argument_empties_the_repl_and_drops_the_stale_dump(make_executor, store):
    """run_code(restart=True) empties the REPL for good: the next checkpoint drops the dump."""
    ex = make_executor(store)
    await run(ex, "t", "x = 1")
    await ex.checkpoint(T)
    out = await ex.thread_scope(T).call_tool("run_code", {"code": "1", "restart": True})
    assert out.content == "1"
    await ex.checkpoint(T)
    again = make_executor(store)
    assert "NameError" in (await run(again, "t", "x")).content


async def test_without_a_store_nothing_changes(make_executor):
    """scopes=None: an evicted REPL is gone and the note says so; the new calls do nothing."""
    ex = make_executor(max_scopes=1)
    await run(ex, "a", "x = 1")
    await run(ex, "b", "y = 1")
    await ex.restore_scope(ThreadKey("#t", "a"))
    await ex.checkpoint(ThreadKey("#t", "b"))
    await ex.checkpoint_all()
    assert ex.context_note(ThreadKey("#t", "a")) == reset_note("evicted")
    assert "NameError" in (await run(ex, "a", "x")).content


async def test_a_scope_that_never_ran_code_is_dropped_without_a_trace(make_executor, store):
    """A thread whose runs called no code holds a scope but no REPL: evicting it stores
    nothing, logs nothing and leaves no "evicted" note (nothing was lost), with a store or
    without; a scope that ran code is still stored, logged and noted as before."""
    for persistence in (store, None):
        ex = make_executor(persistence, max_scopes=1)
        ex.thread_scope(ThreadKey("#t", "idle"))  # a run starts and calls no code
        with capture_logs() as logs:
            await run(ex, "busy", "x = 1")  # evicts "idle"
        assert not [e for e in logs if e["event"] == "code_mode.scope_evicted"]
        assert ex.context_note(ThreadKey("#t", "idle")) is None
        assert ex.live_scopes == 1
        with capture_logs() as logs:
            ex.thread_scope(ThreadKey("#t", "next"))  # evicts "busy", which holds x
        assert [e["thread"] for e in logs if e["event"] == "code_mode.scope_evicted"] == ["busy"]
        await run(ex, "next", "y = 2")
        if persistence is None:
            assert ex.context_note(ThreadKey("#t", "busy")) == reset_note("evicted")
        else:
            assert (await run(ex, "busy", "x")).content == "1"  # stored, then loaded
    idle = ThreadKey("#t", "idle")
    assert idle not in [t for t, _ in store.saves]
    assert idle not in store.drops
    assert ThreadKey("#t", "busy") in [t for t, _ in store.saves]


async def test_a_paused_snippet_and_the_stored_repl_are_one_state(make_executor, fake, store):
    """Paused: checkpoint stores nothing (no live REPL). A stray run while paused is stored;
    after a restart resume loads the snapshot, not that dump; the resumed REPL is then stored."""
    first = make_executor(store, gate=ask)
    await run(first, "t", "y = 1")
    await first.checkpoint(T)
    before = store.dumps[T]
    out = await run(first, "t", 'x = 5\nr = await delete_object(name="a")\nx = x + 1\n[x, r]')
    assert out.pause is not None
    assert first.worker_pid(T) is None  # nothing live to dump
    await first.checkpoint(T)
    await first.checkpoint_all()
    assert store.dumps[T] is before
    stray = await run(first, "t", "stray = y")  # loads nothing: the scope was live here
    assert "NameError" in stray.content
    await run(first, "t", "stray = 2")
    await first.aclose()
    assert store.dumps[T] is not before  # the stray REPL

    second = make_executor(store, gate=ask)
    decisions = {c.call_id: Decision(True, "alice") for c in out.pause.calls}
    done = await second.resume(T, out.pause, decisions)
    assert json.loads(done.content) == [6, "deleted a"], done.content
    assert "NameError" in (await run(second, "t", "stray")).content  # the snapshot, not the dump
    await second.checkpoint(T)

    third = make_executor(store)
    assert json.loads((await run(third, "t", "[x, r, y]")).content) == [6, "deleted a", 1]


async def test_a_resumed_snippet_makes_the_scope_dirty(make_executor, store):
    """After resume, checkpoint stores the REPL the resumed snippet left."""
    ex = make_executor(store, gate=ask)
    out = await run(ex, "t", 'r = await delete_object(name="a")')
    assert out.pause is not None
    await ex.checkpoint(T)
    assert store.saves == []
    decisions = {c.call_id: Decision(True, "alice") for c in out.pause.calls}
    done = await ex.resume(T, out.pause, decisions)
    assert done.content == "(no output; the last expression was None)", done.content
    await ex.checkpoint(T)
    assert [t for t, _ in store.saves] == [T]


# -- the note texts ------------------------------------------------------------


def test_the_stored_repl_notices_come_before_the_variables():
    """thread_note puts notices first, then the names, or the empty-REPL text, or nothing."""
    listed = ScopeVariables()
    listed.record("x = 1")
    listed.update([["x", "int"]])
    notice = restored_note("2026-11-30T14:05:12Z")
    assert thread_note(listed, None, [notice]) == (
        f"{notice}\n[run_code variables still in scope: x: int]"
    )
    assert thread_note(None, "evicted", [notice]) == f"{notice}\n{reset_note('evicted')}"
    assert thread_note(None, None, [notice]) == notice
    assert thread_note(None, None, []) is None


def test_sizes_times_and_reasons_read_well():
    """Sizes in KiB/MiB with one decimal at most, times in UTC, reasons on one short line."""
    assert format_size(int(71.2 * 1024**2)) == "71.2 MiB"
    assert format_size(64 * 1024**2) == "64 MiB"
    assert format_size(900) == "900 bytes"
    assert format_saved_at("2026-11-30T15:05:12+01:00") == "2026-11-30 14:05:12 UTC"
    assert format_saved_at("yesterday\nnoon") == "yesterday noon"
    assert not_saved_note(int(71.2 * 1024**2), 64 * 1024**2) == (
        "[run_code REPL (71.2 MiB) is over code_mode.max_scope_dump (64 MiB) and was not saved: "
        "it will not survive a restart.]"
    )
    long = not_restored_note("bad\n" * 200)
    assert "\n" not in long
    assert len(long) < 300


async def test_a_forgotten_scope_loads_the_newer_stored_repl(make_executor, store):
    """A cluster's daemon takes a thread back that another daemon ran meanwhile: its own
    live REPL is older than the stored one, so it is dropped (not stored over the newer
    one) and the next snippet loads the stored REPL."""
    here, there = make_executor(store), make_executor(store)
    assert (await run(here, "t", "x = 1\nx")).content == "1"
    await here.checkpoint(T)
    assert (await run(there, "t", "x += 1\nx")).content == "2"  # the other daemon's run
    await there.checkpoint(T)
    await run(here, "t", "stale = True")  # dirty: would be stored over the newer REPL
    await here.forget(T)
    assert (await run(here, "t", "x")).content == "2"
    assert "stale" not in (await run(here, "t", "str(list(locals()))")).content
