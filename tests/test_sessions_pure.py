"""The pure parts of sessions/: thread keys, session ids, timestamps, history bounds."""

from __future__ import annotations

import uuid

import pytest

from sessions.history import HistoryBuilder, build_history, message_text
from sessions.ids import (
    normalize_timestamp,
    parse_since,
    session_id,
    split_thread_key,
    thread_key,
)
from sessions.model import RunMetrics


def text(t: str) -> dict:
    """A message with one text block."""
    return {"role": "x", "content": [{"type": "text", "text": t}]}


def tool_result(content: str) -> dict:
    """A user message carrying only a tool_result."""
    return {"content": [{"type": "tool_result", "tool_use_id": "t", "content": content}]}


@pytest.mark.parametrize(
    ("channel", "thread"),
    [("#ops", "01JD0000000000000000000000"), ("a/b", "c"), ("a", "b/c"), ("#x", "100%/x")],
)
def test_thread_keys_round_trip(channel, thread):
    """split_thread_key inverts thread_key, even with slashes and percent signs."""
    assert split_thread_key(thread_key(channel, thread)) == (channel, thread)


def test_thread_keys_are_readable_and_distinct():
    """The usual ids stay readable; ids that only differ in where a slash falls do not collide."""
    assert thread_key("#ops", "01JD") == "#ops/01JD"
    assert thread_key("a/b", "c") != thread_key("a", "b/c")
    with pytest.raises(ValueError, match="channel"):
        thread_key("", "T")
    with pytest.raises(ValueError, match="thread key"):
        split_thread_key("no-slash")


def test_session_id_is_a_stable_uuid5_of_the_thread():
    """sessionId is a UUID, the same every time, different for every thread."""
    sid = session_id("#ops", "T1")
    assert uuid.UUID(sid).version == 5
    assert sid == session_id("#ops", "T1") == "df074e87-31ff-526a-ac6f-700a7361cf80"
    assert sid not in {session_id("#dev", "T1"), session_id("#ops", "T2")}


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2026-11-29T18:00:00Z", "2026-11-29T18:00:00.000Z"),
        ("2026-11-29T18:00:00.123456Z", "2026-11-29T18:00:00.123Z"),
        ("2026-11-29T19:00:00+01:00", "2026-11-29T18:00:00.000Z"),
        ("2026-11-29T18:00:00", "2026-11-29T18:00:00.000Z"),
        ("2026-11-29", "2026-11-29T00:00:00.000Z"),
    ],
)
def test_timestamps_are_stored_in_one_comparable_format(given, stored):
    """Every accepted form becomes fixed-width UTC, so text order is time order."""
    assert normalize_timestamp(given) == stored
    assert parse_since(given) == stored


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-11-31", "29/11/2026", "2026-11-29 25:00"])
def test_bad_since_values_are_refused_with_an_example(bad):
    """parse_since names the value and shows the forms it accepts."""
    with pytest.raises(ValueError, match="2026-11-29T18:00:00Z"):
        parse_since(bad)


def test_message_text_keeps_only_text_blocks():
    """tool_use and tool_result blocks are not history; string content is."""
    assert message_text({"content": "  hi  "}) == "hi"
    assert message_text(tool_result("secret output")) == ""
    mixed = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "t", "name": "run_code", "input": {"code": "x"}},
            {"type": "text", "text": "  "},
            {"type": "text", "text": "b"},
        ]
    }
    assert message_text(mixed) == "a\nb"
    assert message_text({"content": None}) == ""


def test_history_merges_consecutive_texts_of_one_role():
    """A prompt left unanswered and the next prompt form one user turn, in order."""
    newest_first = [
        ("assistant", text("answer")),
        ("user", text("second")),
        ("user", tool_result("ignored")),
        ("user", text("first")),
        ("assistant", text("earlier")),
    ]
    assert build_history(newest_first, turns=10, chars=1000) == [
        ("assistant", "earlier"),
        ("user", "first\n\nsecond"),
        ("assistant", "answer"),
    ]


def test_history_bounds():
    """turns counts merged turns; chars keeps whole turns from the newest back."""
    newest_first = [(("user", "assistant")[i % 2], text(f"t{i}")) for i in range(10)]
    assert [t.text for t in build_history(newest_first, turns=3, chars=1000)] == ["t2", "t1", "t0"]
    assert [t.text for t in build_history(newest_first, turns=10, chars=5)] == ["t1", "t0"]
    assert build_history(newest_first, turns=0, chars=1000) == []
    assert build_history(newest_first, turns=5, chars=0) == []
    with pytest.raises(ValueError, match="negative"):
        HistoryBuilder(-1, 10)


def test_history_builder_says_when_older_records_cannot_matter():
    """`full` becomes true once enough turns or characters are final, so reading can stop."""
    builder = HistoryBuilder(turns=2, chars=1000)
    for role, t in [("user", "a"), ("assistant", "b")]:
        builder.add(role, text(t))
    assert not builder.full  # the oldest turn could still grow by merging
    builder.add("user", text("c"))
    assert builder.full
    by_chars = HistoryBuilder(turns=100, chars=3)
    by_chars.add("user", text("abc"))
    assert not by_chars.full
    by_chars.add("assistant", text("d"))
    assert by_chars.full


def test_run_metrics_extra_holds_the_set_counters_and_loads_only_known_ones() -> None:
    """The extra column gets the counters that differ from their defaults; reading it
    back sets the ones this version knows, with the right type, and skips the rest."""
    metrics = RunMetrics(rounds=2, tool_errors=3, reply_from_result=True)
    assert metrics.extra() == {"tool_errors": 3, "reply_from_result": True}
    assert RunMetrics().extra() == {}
    loaded = RunMetrics(rounds=2)
    loaded.load_extra({**metrics.extra(), "from_the_future": 1, "peeks": "many"})
    assert loaded == metrics
