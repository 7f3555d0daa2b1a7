"""The cluster's pure parts: which member claims a new thread, and the capped cursor."""

from __future__ import annotations

from pathlib import Path

from daemon.cluster.router import preferred
from daemon.runtime.ports import InboundMessage
from daemon.runtime.store import SessionsRuntimeStore
from sessions.store import Store


def test_the_preferred_member_does_not_depend_on_the_order_members_are_listed() -> None:
    """Every daemon computes the same claimant from the same live set."""
    members = ["m1", "m2", "m3"]
    for n in range(200):
        thread = f"{n:026d}"
        assert preferred("#ops", thread, members) == preferred("#ops", thread, members[::-1])
    assert preferred("#ops", "t", []) is None


def test_new_threads_spread_evenly_and_a_leaving_member_moves_only_its_own() -> None:
    """Two members get about half each; when one leaves, only its threads change hands."""
    threads = [f"01M8NY6P17T0CK{n:012d}" for n in range(2000)]
    two = {t: preferred("#ops", t, ["a", "b"]) for t in threads}
    share = sum(1 for owner in two.values() if owner == "a") / len(threads)
    assert 0.45 < share < 0.55
    three = {t: preferred("#ops", t, ["a", "b", "c"]) for t in threads}
    assert all(three[t] == two[t] for t in threads if three[t] != "c")


def _message(n: int) -> InboundMessage:
    return InboundMessage(
        channel="#ops", id=f"{n:026d}", thread=f"{n:026d}", sender="alice", text="hi"
    )


async def test_the_cursor_never_passes_the_cap(tmp_path: Path) -> None:
    """With a cap (the message before another daemon's oldest unanswered prompt) the
    cursor stops there; without one it follows every prompt; "" holds it."""
    async with Store(tmp_path / "a.db") as store:
        runtime_store = SessionsRuntimeStore(store)
        cap: dict[str, str | None] = {"#ops": None}
        runtime_store.cursor_cap = cap.get
        await runtime_store.record_prompt(_message(1))
        assert await store.cursors.get_cursor("#ops") == _message(1).id
        cap["#ops"] = _message(2).id
        await runtime_store.record_prompt(_message(5))
        assert await store.cursors.get_cursor("#ops") == _message(2).id
        await runtime_store.advance_cursor("#ops", _message(6).id)
        assert await store.cursors.get_cursor("#ops") == _message(2).id
        cap["#ops"] = ""
        await runtime_store.advance_cursor("#ops", _message(7).id)
        assert await store.cursors.get_cursor("#ops") == _message(2).id
        cap["#ops"] = None
        await runtime_store.advance_cursor("#ops", _message(7).id)
        assert await store.cursors.get_cursor("#ops") == _message(7).id
        assert [p.id for p in await store.queries.pending_prompts()] == [
            _message(1).id,
            _message(5).id,
        ]
