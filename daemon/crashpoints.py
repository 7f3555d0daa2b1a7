"""Crash points: a test makes the daemon SIGKILL itself at one named durable step.

The crash-point suite (``tests/test_crash_points.py``, issue 26 §6) kills a
real ``asyncai serve`` at each durable step of a run and checks the promises
after the restart. Killing from outside cannot hit a step exactly; a crash
point can: ``crash_point("reply_committed")`` sits right after the step it
names, and when the step is armed the process sends itself ``SIGKILL`` there,
as the kernel or an OOM killer would (no ``finally``, no ``atexit``, no flush).

Only the environment arms it, read ONCE when this module is imported::

    ASYNCAI_CRASH_AT=reply_committed      # the 1st time the step is reached
    ASYNCAI_CRASH_AT=reply_committed:2    # the 2nd time

Unset (production), :func:`crash_point` is a global read and a ``None``
check. A value naming no step of :data:`STEPS`, or a count below 1, is
refused at import (:class:`ValueError`), so a typo cannot make a test pass
without crashing anything. Just before the kill one line goes to stderr,
``asyncai: crash point STEP:N reached, SIGKILL``, so a test can tell the
kill it asked for from any other death.

The steps, in the order a run reaches them (where each point sits):

| step | right after |
|---|---|
| ``prompt_recorded`` | an inbound prompt recorded (at the live edge: deferred with its run's row) |
| ``run_started`` | the run admitted (its row and claim deferred to its first write) |
| ``scope_restored`` | the thread's saved REPL loaded into its scope (code mode) |
| ``audit_started`` | a nested call's ``started`` audit row committed |
| ``call_sent`` | the call handed to the tool (the side effect may happen now) |
| ``call_answered`` | the tool's answer arrived in the daemon |
| ``audit_completed`` | the call's audit row completed with its outcome |
| ``model_answered`` | the model's final answer came back (the run's result) |
| ``reply_committed`` | the reply, the run's end and the REPL dump, in one transaction |
| ``reply_published`` | the hub acked the reply |
| ``run_finished`` | the reply marked acknowledged; the run is over |
| ``approval_stored`` | an approval request and its paused run committed |
| ``approval_published`` | the hub acked the approval request |
| ``decision_recorded`` | a person's ``!approve``/``!deny`` committed |
| ``resume_started`` | a decided run taken for its resume (before it goes on) |

Any package of daemon/ may import this module (it imports only the
standard library); ``sessions`` and ``channels`` may not, so the points of
their writes sit at the daemon-side caller, after the awaited write
returned (the commit is done by then).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["ENV", "STEPS", "armed", "crash_point", "parse"]

ENV = "ASYNCAI_CRASH_AT"

STEPS: tuple[str, ...] = (
    "prompt_recorded",
    "run_started",
    "scope_restored",
    "audit_started",
    "call_sent",
    "call_answered",
    "audit_completed",
    "model_answered",
    "reply_committed",
    "reply_published",
    "run_finished",
    "approval_stored",
    "approval_published",
    "decision_recorded",
    "resume_started",
)


def parse(value: str | None) -> tuple[str, int] | None:
    """``"step"`` or ``"step:N"`` as ``(step, N)``; None when unset or empty.

    Raises ValueError for a step not in :data:`STEPS` or a count that is
    not a whole number of at least 1.
    """
    if not value:
        return None
    step, _, count = value.strip().partition(":")
    if step not in STEPS:
        raise ValueError(f"{ENV}={value!r}: no crash point {step!r}; the steps: {', '.join(STEPS)}")
    try:
        n = int(count) if count else 1
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV}={value!r}: the count after ':' must be a whole number >= 1")
    return step, n


_ARMED: tuple[str, int] | None = parse(os.environ.get(ENV))
_reached = 0  # how often the armed step was reached so far


def armed() -> tuple[str, int] | None:
    """The armed ``(step, count)``, or None (what :envvar:`ASYNCAI_CRASH_AT` said at import)."""
    return _ARMED


def crash_point(step: str) -> None:
    """SIGKILL this process if ``step`` is armed and reached for the armed time; else nothing."""
    if _ARMED is None:
        return
    _reach(step)


def _reach(step: str) -> None:
    global _reached
    assert _ARMED is not None
    if step != _ARMED[0]:
        return
    _reached += 1
    if _reached == _ARMED[1]:
        sys.stderr.write(f"asyncai: crash point {step}:{_reached} reached, SIGKILL\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
