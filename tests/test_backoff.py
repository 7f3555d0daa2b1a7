"""``daemon.backoff.Backoff``: the delays of the model's retries and the MCP restarts."""

from __future__ import annotations

import pytest

from daemon.backoff import Backoff


def test_delays_double_from_initial_up_to_maximum() -> None:
    """0.5, 1, 2, … seconds, never above the maximum."""
    backoff = Backoff(initial=0.5, maximum=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_retry_after_is_waited_out_within_the_maximum() -> None:
    """A server's Retry-After wins over a shorter delay, but never over the cap."""
    backoff = Backoff(initial=1.0, maximum=10.0)
    assert backoff.delay(1, retry_after=7.0) == 7.0
    assert backoff.delay(1, retry_after=60.0) == 10.0
    assert backoff.delay(3, retry_after=0.5) == 4.0


@pytest.mark.parametrize("attempt", [1, 2, 5])
def test_jitter_takes_at_most_its_fraction_off(attempt: int) -> None:
    """With jitter 0.25 each delay lies in [0.75·d, d]."""
    plain, jittered = Backoff(1.0, 30.0), Backoff(1.0, 30.0, jitter=0.25)
    for _ in range(200):
        assert 0.75 * plain.delay(attempt) <= jittered.delay(attempt) <= plain.delay(attempt)


def test_zero_backoff_never_waits() -> None:
    """Backoff(0, 0) is what tests inject: every delay is 0."""
    assert {Backoff(0.0, 0.0).delay(n) for n in range(1, 10)} == {0.0}
