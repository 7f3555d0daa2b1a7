"""The harness's rules by name, and which of them a run has switched on (pure).

Every rule or mechanism of the harness has a stable kebab-case name and a
one-line statement of the class of questions or data it serves
(:data:`RULES`). All of them are on by default; ``ASYNCAI_HARNESS_OFF`` (a
comma list of names) switches some off, for the bench's ablations: a
measuring knob, not a user setting. :data:`TRIALS` are mechanisms under
measurement, off until ``ASYNCAI_HARNESS_ON`` names them.

The environment is read once, where the profile is built
(:func:`from_environ`, in ``daemon.model.profiles``); the profile makes its
:class:`Switches` current for the run (:func:`active`), and each rule asks
:func:`on` at the place where it acts, so a pure function of the harness
stays a function of its arguments and the current switches.

So that an ablation need not ask every question again, a run can collect the
rules it *reached* (:func:`reaching`): those whose gate it consulted while they
were on. A run that never reached a rule goes, at temperature 0, the same way
with that rule off, so the rule cannot have changed its answer.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from daemon.errors import ConfigError

__all__ = [
    "BUILT",
    "OFF_VARIABLE",
    "ON_VARIABLE",
    "RULES",
    "TRIALS",
    "Switches",
    "active",
    "acts",
    "from_environ",
    "kept",
    "noticing",
    "on",
    "parse_names",
    "reaching",
]

OFF_VARIABLE = "ASYNCAI_HARNESS_OFF"
ON_VARIABLE = "ASYNCAI_HARNESS_ON"

#: Every rule and mechanism of the harness (on by default), by name: the class of
#: questions or data it serves.
RULES: dict[str, str] = {
    # the code-block protocol's mechanisms
    "worked-example": "the system message ends with a worked (question, snippet) example",
    "hidden-fields": "result fields the catalog's Returns: sketches cut short are listed as "
    "access paths",
    "text-calls": "a tool call written as text (Qwen's <tool_call>, JSON) is made as a call",
    "recover-arguments": "run_code arguments that are not valid JSON (raw newlines, "
    "unescaped quotes) are recovered",
    "rename-helpers": "a variable that shadows a helper (items = items(r)) is renamed",
    "last-assignment": "a snippet ending on an assignment returns the assigned name",
    "retry-alone": "a retry follows the question and the feedback alone, without the failed "
    "code as the model's turn (shown it, a small model resends it)",
    "warm-retry": "a retry is sampled warmer, seeded by its prompt (greedy resends the "
    "failed snippet)",
    "look": "a failed snippet's variables are looked at (paths, values, counts) and shown "
    "with the retry",
    "key-hint": "a KeyError: where the key really is, from the look",
    "topic-hint": "a failed snippet that called a function other than the one the question's "
    "words name: start with that one",
    "vote": "a short answer: a second sample from the question reread, a third on a tie",
    "examples": "solved (question, snippet) pairs of [model] examples: the closest two by "
    "their words replace the worked example (without the file, nothing changes)",
    "echo-check": "a reply that retells the worked example is replaced by the result",
    "quote-result": "a reply that drops a value of a short result gets the result quoted",
    "failed-honest": "a run whose every snippet failed (none ran to a result): the reply says "
    "the question could not be answered and the last error's line, not the model's words",
    "dict-loop": "a loop over a dict whose items the snippet read as dicts (its keys are "
    "str) loops over the one list the look found one key below it, and runs again, no model "
    "round",
    "example-source": "the solved examples shown first are those whose question names the "
    "same kinds of source as the question (a URL, a file path, or neither)",
    # the tool-call protocol (tools offered directly)
    "direct-answer-instruction": "with tools offered directly, the last round asks for the "
    "answer in the harness's words",
}

#: Rules read where a backend is built (its system message, the direct-mode protocol)
#: rather than at a place in a run: :func:`reaching` counts each as reached by every
#: run it is on in.
BUILT: frozenset[str] = frozenset(
    {"worked-example", "hidden-fields", "examples", "text-calls", "direct-answer-instruction"}
)

#: Mechanisms under measurement: off until ``ASYNCAI_HARNESS_ON`` names them.
TRIALS: dict[str, str] = {
    "unfetched-url": "a URL the question names that the snippet never fetched (neither it "
    "nor its path is in the code): a failed snippet's retry, or a good result's one more "
    "round, is told the call that fetches it",
}


@dataclass(frozen=True)
class Switches:
    """The rules a run has switched off and the trials it has switched on."""

    off: frozenset[str] = frozenset()
    trials: frozenset[str] = frozenset()

    def on(self, name: str) -> bool:
        """Whether the rule or trial ``name`` acts (a name neither knows is an error)."""
        if name in RULES:
            return name not in self.off
        if name in TRIALS:
            return name in self.trials
        raise KeyError(f"no harness rule {name!r}")


_CURRENT: contextvars.ContextVar[Switches] = contextvars.ContextVar(
    "harness_switches",
    default=Switches(),  # noqa: B039 (a frozen dataclass of frozensets: immutable)
)


#: The trials that were off where they applied, while :func:`noticing` collects them.
_NOTICED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "harness_noticed", default=None
)


#: The rules reached while :func:`reaching` collects them.
_REACHED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "harness_reached", default=None
)


def on(name: str) -> bool:
    """Whether the rule ``name`` acts in the current run (all rules do by default); a
    rule that does is reached (:func:`reaching`)."""
    acting = _CURRENT.get().on(name)
    if acting and (reached := _REACHED.get()) is not None:
        reached.add(name)
    return acting


def acts(name: str, applies: bool) -> bool:
    """Whether the rule or trial ``name`` acts at a place where it ``applies``.

    A trial that is off where it applies is noticed (:func:`noticing`). A run
    in which no trial of a set was noticed went, up to its end, the way it
    would have gone with those trials on: each acts only through this call,
    and with the same inputs (temperature 0) the run reaches the same places.
    So a side-by-side bench need not ask the other arm such a question
    (``python -m bench.questions --skip-unchanged``).
    """
    if not applies:
        return False
    if on(name):
        return True
    noticed = _NOTICED.get()
    if noticed is not None and name in TRIALS:
        noticed.add(name)
    return False


_T = TypeVar("_T")


def kept(name: str, done: _T, undone: _T) -> _T:
    """``done`` (what rule ``name`` makes of a value) where it differs from ``undone``
    (the value as it was) and the rule acts there (:func:`acts`), else ``undone``: a
    rule written this way is reached only where it changes something."""
    return done if acts(name, done != undone) else undone


@contextmanager
def noticing() -> Iterator[set[str]]:
    """The trials that were off where they applied in the ``with`` block (:func:`acts`),
    collected into the set it yields (tasks started inside share it)."""
    noticed: set[str] = set()
    token = _NOTICED.set(noticed)
    try:
        yield noticed
    finally:
        _NOTICED.reset(token)


@contextmanager
def reaching(switches: Switches) -> Iterator[set[str]]:
    """The rules and trials reached in the ``with`` block (asked :func:`on` while on,
    or :func:`acts` where they applied and were on), collected into the set it yields
    (tasks started inside share it), with the :data:`BUILT` rules ``switches`` leaves
    on. A rule outside the set did not act in the block."""
    reached = {name for name in BUILT if switches.on(name)}
    token = _REACHED.set(reached)
    try:
        yield reached
    finally:
        _REACHED.reset(token)


@contextmanager
def active(switches: Switches) -> Iterator[None]:
    """Make ``switches`` current for the code in the ``with`` block (a run's leg)."""
    token = _CURRENT.set(switches)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def parse_names(text: str, known: Mapping[str, str], variable: str) -> frozenset[str]:
    """The rule names of a comma list; an unknown one is a
    :class:`~daemon.errors.ConfigError` that lists the known names."""
    names: set[str] = set()
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in known:
            raise ConfigError(
                f"{variable}: unknown harness rule {name!r}; the known names are: "
                + ", ".join(sorted(known))
            )
        names.add(name)
    return frozenset(names)


def from_environ(environ: Mapping[str, str]) -> Switches:
    """The switches ``ASYNCAI_HARNESS_OFF`` and ``ASYNCAI_HARNESS_ON`` set."""
    return Switches(
        off=parse_names(environ.get(OFF_VARIABLE, ""), RULES, OFF_VARIABLE),
        trials=parse_names(environ.get(ON_VARIABLE, ""), TRIALS, ON_VARIABLE),
    )
