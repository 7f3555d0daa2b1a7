"""The variables note (spec A11): what the REPL of a thread still holds.

A conversation's history keeps only user and assistant text, so a model that
fetched 80 objects into ``ss`` last turn does not know ``ss`` is still there
and fetches again. After each snippet the engine probes the scope and
``context_note(thread)`` appends, to the newest user message of the next
run::

    [run_code variables still in scope: ss: list[80], d: dict[3], n: int]

The note lives in the user message, never in the tool description, so the
cached prompt prefix stays byte-identical.

How it is built, all without I/O here (the engine runs the probe):

1. :class:`ScopeVariables` records, from the text of every snippet fed to
   the scope, the module-level names it binds (:mod:`bindings`; imports,
   helper and private names left out), most recently bound last.
2. :func:`probe_code` is a snippet that describes those names inside the
   scope: ``list[80]``, ``dict[3]``, ``str[1200]``, ``int``, ``None``,
   ``function``… A name that is not bound (a branch not taken, a snippet
   that failed first) is skipped. The probe binds only one private name.
3. :func:`parse_probe` reads its result, and :meth:`ScopeVariables.note`
   formats at most :data:`MAX_NAMES` names within :data:`MAX_CHARS`
   characters, the most recent kept.

A scope that was evicted, or reset after a crash, a limit or ``restart``,
has lost its variables: until a new snippet binds something, the note says
the REPL is empty (:func:`reset_note`, chosen by :func:`thread_note` from
the scope's reset reason).

A stored REPL (issue 14) adds one-line notices before the list, each said
once: :func:`restored_note` (loaded from the save of a given time),
:func:`not_restored_note` (the REPL starts empty, and why), and
:func:`not_saved_note` (too large to store, so it will not survive a
restart).
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from daemon.code_mode.bindings import Binding, module_bindings
from daemon.code_mode.helpers import PRIVATE_PREFIX, RESERVED_NAMES

__all__ = [
    "MAX_CHARS",
    "MAX_NAMES",
    "MAX_PREVIEW",
    "MAX_PROBED",
    "NOTE_PREFIX",
    "ResetReason",
    "ScopeVariables",
    "format_note",
    "format_saved_at",
    "format_size",
    "not_restored_note",
    "not_saved_note",
    "one_line",
    "parse_probe",
    "parse_probe_previews",
    "probe_code",
    "reset_note",
    "restored_note",
    "thread_note",
]

MAX_NAMES = 30
MAX_CHARS = 600
# Names probed at most: the most recent ones; the note shows fewer anyway.
MAX_PROBED = 60
MAX_PREVIEW = 160  # characters of a value's preview kept (the console's REPL page)
NOTE_PREFIX = "[run_code variables still in scope: "

ResetReason = Literal["evicted", "reset"]
# The engine's ScopeState.reset_reason values that leave a thread's REPL empty.
_REASONS: dict[str, ResetReason] = {"evicted": "evicted", "restart": "reset", "reset": "reset"}

_RESET_TEXT: dict[str, str] = {
    "evicted": (
        "[run_code REPL is empty: this conversation's sandbox was dropped while idle, so the "
        "variables of earlier run_code calls are gone; fetch again what you need.]"
    ),
    "reset": (
        "[run_code REPL is empty: the sandbox was reset (restart, crash or limit), so the "
        "variables of earlier run_code calls are gone; fetch again what you need.]"
    ),
}

_PROBE_FUNCTION = f"{PRIVATE_PREFIX}describe_vars"
_SHORT_FUNCTION = f"{PRIVATE_PREFIX}short_value"
_PREVIEW_FUNCTION = f"{PRIVATE_PREFIX}preview_value"

# Monty Python. ``type(v).__name__`` works there; a NameError for a name the
# snippets did not end up binding is caught per name. Each value also gets a
# short preview (the console's REPL page shows it; the note does not): a
# scalar's repr, a string's first characters, a container's first three items
# each as a scalar or a ``type[len]``, so the cost is bounded whatever the
# value holds (no repr of a whole container).
_PROBE_SOURCE = f"""\
def {_SHORT_FUNCTION}(x):
    if isinstance(x, (str, bytes)):
        return repr(x[:30]) + ("…" if len(x) > 30 else "")
    if x is None or isinstance(x, (bool, int, float)):
        return repr(x)[:30]
    if isinstance(x, (list, tuple, dict, set, frozenset)):
        return type(x).__name__ + "[" + str(len(x)) + "]"
    return type(x).__name__
def {_PREVIEW_FUNCTION}(v):
    if isinstance(v, (list, tuple, dict)):
        parts = []
        for k in v:
            if len(parts) == 3:
                parts.append("…")
                break
            if isinstance(v, dict):
                parts.append({_SHORT_FUNCTION}(k) + ": " + {_SHORT_FUNCTION}(v[k]))
            else:
                parts.append({_SHORT_FUNCTION}(k))
        inner = ", ".join(parts)
        if isinstance(v, dict):
            return "{{" + inner + "}}"
        return "[" + inner + "]" if isinstance(v, list) else "(" + inner + ")"
    if isinstance(v, (set, frozenset)):
        return ""
    return {_SHORT_FUNCTION}(v)
def {_PROBE_FUNCTION}(pairs):
    out = []
    for pair in pairs:
        try:
            v = pair[1]()
        except NameError:
            continue
        t = type(v).__name__
        if t == "module":
            continue
        try:
            p = {_PREVIEW_FUNCTION}(v)
        except Exception:
            p = ""
        if isinstance(v, (list, tuple, dict, set, frozenset, str, bytes)):
            out.append([pair[0], t + "[" + str(len(v)) + "]", p])
        else:
            out.append([pair[0], t, p])
    return out
"""

_TYPE_NAMES = {"NoneType": "None", "type": "class", "builtin_function_or_method": "function"}


def reset_note(reason: ResetReason) -> str:
    """The note for a scope whose variables are gone: ``"evicted"`` or ``"reset"``."""
    return _RESET_TEXT[reason]


# A reason from a store or an exception is cut to one line of this many characters.
_MAX_REASON = 200


def format_saved_at(saved_at: str) -> str:
    """``2026-11-30 14:05:12 UTC`` from an ISO 8601 time; other text as it is, on one line."""
    try:
        when = datetime.fromisoformat(saved_at)
    except ValueError:
        return one_line(saved_at)
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_size(size: int) -> str:
    """``71.2 MiB``, ``64 MiB``, ``12 KiB``, ``900 bytes``: one decimal at most."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def one_line(text: str) -> str:
    """``text`` with its whitespace runs collapsed to one space, at most 200 characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REASON else flat[: _MAX_REASON - 1] + "…"


def restored_note(saved_at: str) -> str:
    """The notice for a REPL loaded from its stored dump, saved at ``saved_at`` (ISO 8601)."""
    return (
        f"[run_code REPL was restored from the save of {format_saved_at(saved_at)}: "
        "the variables of earlier run_code calls are back as they were then.]"
    )


def not_restored_note(reason: str) -> str:
    """The notice for a stored REPL that could not be loaded; ``reason`` in one line."""
    return (
        f"[run_code REPL is empty: the saved REPL was not restored: {one_line(reason)}; "
        "fetch again what you need.]"
    )


def not_saved_note(size: int, limit: int) -> str:
    """The notice for a REPL of ``size`` bytes over ``code_mode.max_scope_dump`` (``limit``)."""
    return (
        f"[run_code REPL ({format_size(size)}) is over code_mode.max_scope_dump "
        f"({format_size(limit)}) and was not saved: it will not survive a restart.]"
    )


def _trackable(name: str) -> bool:
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and name not in RESERVED_NAMES
        and not name.startswith(PRIVATE_PREFIX)
    )


def probe_code(names: Sequence[str]) -> str:
    """A snippet whose value describes ``names`` inside the scope.

    Its value is a list of ``[name, description]`` pairs, for the names that
    are bound, in the order given; :func:`parse_probe` reads it.
    """
    safe = [n for n in names if _trackable(n)]
    pairs = ", ".join(f'("{n}", lambda: {n})' for n in safe)
    return f"{_PROBE_SOURCE}{_PROBE_FUNCTION}([{pairs}])\n"


def parse_probe(value: Any) -> list[tuple[str, str]]:
    """The ``(name, description)`` pairs of a probe result; junk is skipped."""
    return [(name, kind) for name, kind, _ in parse_probe_previews(value)]


def parse_probe_previews(value: Any) -> list[tuple[str, str, str]]:
    """The ``(name, description, preview)`` of a probe result (a pair without a preview
    has an empty one); junk is skipped."""
    out: list[tuple[str, str, str]] = []
    if not isinstance(value, (list, tuple)):
        return out
    for item in value:
        if (
            isinstance(item, (list, tuple))
            and len(item) in (2, 3)
            and all(isinstance(x, str) for x in item)
            and _trackable(item[0])
        ):
            name, kind = str(item[0]), str(item[1])  # both checked to be str above
            preview = str(item[2]) if len(item) == 3 else ""
            out.append((name, _TYPE_NAMES.get(kind, kind), preview[:MAX_PREVIEW]))
    return out


def format_note(described: Sequence[tuple[str, str]]) -> str | None:
    """``[run_code variables still in scope: a: int, ...]``, or None when nothing is bound.

    Keeps the most recent :data:`MAX_NAMES` names (``described`` is oldest
    first) and at most :data:`MAX_CHARS` characters in all; dropped older
    names are counted as ``(+N older)``.
    """
    items = [f"{n}: {d}" for n, d in described]
    if not items:
        return None
    kept = items[-MAX_NAMES:]
    while kept:
        dropped = len(items) - len(kept)
        body = (f"(+{dropped} older) " if dropped else "") + ", ".join(kept)
        text = f"{NOTE_PREFIX}{body}]"
        if len(text) <= MAX_CHARS:
            return text
        kept = kept[1:]
    # One description alone is over the bound (an absurdly long name): say so.
    return f"{NOTE_PREFIX}(+{len(items)} names)]"


class ScopeVariables:
    """The names the snippets of one scope bound, as last probed.

    One per REPL scope. The engine calls :meth:`record` with each snippet it
    feeds, :meth:`probe` for the probe snippet after it ran, and
    :meth:`update` with the probe's result (when the probe itself fails, it
    skips ``update``: the last note stands); :meth:`clear` when the scope's
    state is lost. :attr:`note` is the listed variables, or None.
    """

    def __init__(self) -> None:
        self._names: dict[str, None] = {}  # insertion order = binding order
        self._described: list[tuple[str, str]] = []
        self._previews: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        """Recorded names, least recently bound first."""
        return list(self._names)

    def record(self, code: str) -> None:
        """Remember the module-level names ``code`` binds (a rebinding moves a name last)."""
        self.record_bindings(module_bindings(code))

    def record_bindings(self, bindings: Iterable[Binding]) -> None:
        """:meth:`record` with the bindings already found (the parse ran off the loop)."""
        for b in bindings:
            if b.kind == "import" or not _trackable(b.name):
                continue
            self._names.pop(b.name, None)
            self._names[b.name] = None

    def remember(self, names: Iterable[str]) -> None:
        """Track ``names`` found bound in the scope (a restored REPL), in the order given."""
        for name in names:
            if _trackable(name):
                self._names.pop(name, None)
                self._names[name] = None

    def clear(self) -> None:
        """The scope's state is gone: forget every name."""
        self._names.clear()
        self._described = []
        self._previews = {}

    def probe(self) -> str | None:
        """The probe snippet for the recorded names, or None when there are none."""
        if not self._names:
            return None
        return probe_code(self.names[-MAX_PROBED:])

    def update(self, probe_value: Any) -> None:
        """Take the probe's result; names that turned out unbound are forgotten."""
        found = parse_probe_previews(probe_value)
        described = [(n, d) for n, d, _ in found]
        self._previews = {n: p for n, _, p in found}
        bound = {n for n, _ in described}
        # Only names within the probed window can be known to be unbound.
        for name in self.names[-MAX_PROBED:]:
            if name not in bound:
                self._names.pop(name)
        self._described = described

    @property
    def described(self) -> list[tuple[str, str, str]]:
        """The last probe's ``(name, description, preview)``, oldest binding first (the
        console's REPL page reads them: the note's own words, every name, and a preview)."""
        return [(n, d, self._previews.get(n, "")) for n, d in self._described]

    @property
    def note(self) -> str | None:
        """``[run_code variables still in scope: ...]``, or None when nothing is bound."""
        return format_note(self._described)


def thread_note(
    variables: ScopeVariables | None, reset_reason: str | None, notices: Sequence[str] = ()
) -> str | None:
    """The note for a thread's next run.

    ``notices`` first, one a line (what became of the stored REPL: restored,
    not restored, not saved). Then the variables still in scope when there
    are any; otherwise, when the scope lost its state (``reset_reason``
    ``"evicted"``, ``"restart"`` or ``"reset"``), the text saying the REPL
    is empty. None when there is nothing to say.
    """
    lines = list(notices)
    listed = variables.note if variables is not None else None
    reason = _REASONS.get(reset_reason or "")
    if listed is not None:
        lines.append(listed)
    elif reason is not None:
        lines.append(reset_note(reason))
    return "\n".join(lines) or None
