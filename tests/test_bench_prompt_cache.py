"""bench/prompt_cache.py's table (the measuring needs the model)."""

from __future__ import annotations

from bench.prompt_cache import Timed, table, texts


def test_the_table_sums_all_requests_and_the_follow_ups_apart() -> None:
    """A thread's first turn (A1, B1) pays the system message either way; the follow-ups
    (A2, A11 ...) are where a saved state can help, so they are summed on their own."""
    rows = [
        ("A1", [Timed(20.0, 22.0), Timed(20.0, 23.0)]),
        ("B1", [Timed(4.0, 5.0), Timed(4.0, 6.0)]),
        ("A2", [Timed(9.0, 10.0), Timed(5.0, 6.0)]),
        ("A11", [Timed(14.0, 15.0), Timed(5.0, 6.0)]),
    ]
    text = table(rows).splitlines()
    assert text[0].startswith("| request | first token, shipped | first token, RAM cache |")
    assert text[2] == "| A1 | 20.0 s | 20.0 s | 22.0 s | 23.0 s |"
    assert text[-3] == "all requests: 52.0 s shipped, 41.0 s with the RAM cache (0.79x)"
    assert text[-1] == "follow-ups: 25.0 s shipped, 12.0 s with the RAM cache (0.48x)"


def test_the_conversation_is_fixed_text_from_the_docs() -> None:
    """The same system message and turns every run, long enough for three turns a thread."""
    system, pieces = texts()
    assert len(system) == 6_000
    assert len(pieces) >= 6
    assert (system, pieces) == texts()
