"""The one timing source of a run: its spans on one clock, read by traces, metrics and the split.

Issue 30 asks that the OpenTelemetry spans, the Prometheus metrics and (issue
31) the run's time split always agree. So nothing of those three measures
time itself: each reads the :class:`RunTimeline` of a run, where every part
of the run is a :class:`Span` whose ``start`` and ``end`` come from the
timeline's one monotonic clock:

- ``run``: the whole run (channel, thread, sender, prompt id, status);
- ``model.request``: one chat completion, its retries included (model,
  tokens); a streamed reply may :func:`mark` ``first_token`` on it, which
  splits it into prompt evaluation and generation (issue 31);
- ``run_code``: one snippet (size, outcome, the snippet capped and
  redacted as the logs are); in direct mode ``tool_call`` spans stand
  where the model called a tool itself;
- ``tool_call``: one nested call, under the ``run_code`` span that made it
  (server, tool, mutating, outcome, bytes, the wait for a server slot);
- ``approval.wait``: the time a paused run waited for a person's decision.

Who reports: the daemon opens a run's timeline around the backend with
:func:`timing_run` (:mod:`daemon.app`), which sets :data:`current_timeline`
for the run's task, as :mod:`daemon.runtime.progress` sets the progress;
the model code opens its spans with :func:`timed`, which does nothing
outside a run; code mode's nested calls reach it through the audit observer
(:func:`timing_observer`), because code mode knows only that interface. The
tasks a span starts inherit :data:`current_span`, so a nested call finds
the ``run_code`` span it belongs to.

A run paused for approval keeps its timeline in :class:`Timelines` until it
is resumed in this process, so the resumed leg adds to the same spans, on
the same clock; after a restart it begins a new timeline whose run span
starts at the first approval wait. The sinks (:class:`TimingSink`: the
metrics, the exporter) see each span as it ends and each leg as it ends.
Pure but for the clock, which is injectable; a sink's failure is logged,
never the run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import structlog

from daemon.logging import redact_text
from daemon.tools import AuditEntry, AuditObserver

__all__ = [
    "SNIPPET_CHARS",
    "SPLIT_PARTS",
    "RunTimeline",
    "Span",
    "SpanKind",
    "TimeSplit",
    "Timelines",
    "TimingSink",
    "WaitedDecision",
    "current_span",
    "current_timeline",
    "mark",
    "run_split",
    "snippet_attribute",
    "time_split",
    "timed",
    "timing_observer",
]

log = structlog.get_logger("asyncai.daemon")

SpanKind = Literal["run", "model.request", "run_code", "tool_call", "approval.wait"]

SNIPPET_CHARS = 2000
"""A run_code span's snippet attribute is cut here (as the logs cut content)."""

# Paused runs whose timelines are kept for their resumption, at most: past it the oldest
# is dropped (its resumed leg then starts a timeline of its own, as after a restart).
MAX_PAUSED = 1000


@dataclass(slots=True)
class Span:
    """One timed part of a run; ``start``/``end`` in seconds of its timeline's clock."""

    id: int  # unique within its timeline; the run span is 0
    kind: SpanKind
    parent: int | None
    start: float
    end: float | None = None  # None while it is open
    attributes: dict[str, Any] = field(default_factory=dict)
    # moments within the span by name, on the same clock ("first_token" of a streamed reply)
    marks: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """How long it took (0.0 while it is open)."""
        return 0.0 if self.end is None else max(0.0, self.end - self.start)


class RunTimeline:
    """The spans of one run, on one clock: :attr:`run` first, the others as they open.

    ``clock`` is monotonic seconds (what every span is measured in); ``wall``
    is the Unix time read once with it, so :meth:`unix_ns` places a span in
    real time for an exporter without a second clock deciding any duration.
    """

    def __init__(
        self,
        run_id: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_end: Callable[[RunTimeline, Span], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self._on_end = on_end  # told of each span but the run's as it ends
        self._clock = clock
        self._anchor = clock()
        self._anchor_unix = wall()
        self.spans: list[Span] = []
        self.run = self.open("run", None, **(attributes or {}))
        self.leg_start = self.run.start  # where the current leg began (a resumption's start)
        self._calls: dict[str, Span] = {}  # nested calls started and not ended, by audit key

    def now(self) -> float:
        """The timeline's clock now."""
        return self._clock()

    def unix_ns(self, t: float) -> int:
        """Moment ``t`` of this clock as Unix nanoseconds (for exporters)."""
        return int((self._anchor_unix + (t - self._anchor)) * 1e9)

    def open(self, kind: SpanKind, parent: Span | None, **attributes: Any) -> Span:
        """A new span starting now, under ``parent`` (None: a root, only the run)."""
        span = Span(len(self.spans), kind, parent.id if parent is not None else None, self._clock())
        span.attributes.update(attributes)
        self.spans.append(span)
        return span

    def close(self, span: Span, **attributes: Any) -> None:
        """End ``span`` now (once: a second close only adds its attributes)."""
        span.attributes.update(attributes)
        if span.end is None:
            span.end = self._clock()
            if self._on_end is not None and span.parent is not None:
                self._on_end(self, span)

    def add(
        self, kind: SpanKind, parent: Span, start: float, end: float, **attributes: Any
    ) -> Span:
        """A span that already ended (measured before it was reported)."""
        span = Span(len(self.spans), kind, parent.id, start, end, dict(attributes))
        self.spans.append(span)
        if start < self.run.start:
            self.run.start = start  # the run began with it (a wait before a restart's leg)
        if self._on_end is not None:
            self._on_end(self, span)
        return span

    def children(self, span: Span) -> list[Span]:
        """The spans directly under ``span``, in the order they opened."""
        return [s for s in self.spans if s.parent == span.id]

    def of_kind(self, kind: SpanKind) -> list[Span]:
        """Every span of ``kind``, in the order they opened."""
        return [s for s in self.spans if s.kind == kind]

    def call_started(self, key: str, parent: Span | None, **attributes: Any) -> Span:
        """A nested call began (its audit ``started`` entry): its span opens."""
        span = self.open("tool_call", parent or self.run, **attributes)
        if key:
            self._calls[key] = span
        return span

    def call_ended(self, key: str, parent: Span | None, duration: float, **attributes: Any) -> Span:
        """A nested call ended: the span its start opened closes; a call never started
        (refused before it was made) is added ending now, ``duration`` long."""
        span = self._calls.pop(key, None) if key else None
        if span is None:
            end = self._clock()
            return self.add("tool_call", parent or self.run, end - duration, end, **attributes)
        self.close(span, **attributes)
        return span


class TimingSink(Protocol):
    """What reads the timelines: told of each span as it ends and of each leg's end."""

    def span_ended(self, timeline: RunTimeline, span: Span) -> None:
        """``span`` ended (not the run's own: see :meth:`leg_ended`)."""
        ...

    def leg_ended(self, timeline: RunTimeline, *, paused: bool) -> None:
        """The run's backend returned: it ended (``paused`` False, the run span closed)
        or paused for approval (its timeline kept for the resumption)."""
        ...


current_timeline: ContextVar[RunTimeline | None] = ContextVar("current_timeline", default=None)
"""The timeline of the run whose task this is (None outside a run)."""

current_span: ContextVar[Span | None] = ContextVar("current_span", default=None)
"""The innermost open span of this task: what a span opened now is nested under."""


class Timelines:
    """The daemon's timelines: opened around each leg of a run, kept while it is paused,
    handed to the sinks. ``clock`` and ``wall`` are every timeline's (tests pass theirs)."""

    def __init__(
        self,
        sinks: Sequence[TimingSink] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.sinks = list(sinks)
        self._clock = clock
        self._wall = wall
        self._paused: OrderedDict[str, RunTimeline] = OrderedDict()
        self._sinks_failed = False

    def _notify(self, call: Callable[[TimingSink], None]) -> None:
        for sink in self.sinks:
            try:
                call(sink)
            except Exception as exc:  # telemetry never fails a run; said once, not per span
                if not self._sinks_failed:
                    self._sinks_failed = True
                    log.error("daemon.timing_sink_failed", error=f"{type(exc).__name__}: {exc}")

    def span_ended(self, timeline: RunTimeline, span: Span) -> None:
        """Hand an ended span to the sinks."""
        if self.sinks:
            self._notify(lambda sink: sink.span_ended(timeline, span))

    @contextlib.asynccontextmanager
    async def timing_run(
        self,
        run_id: str,
        attributes: Mapping[str, Any],
        *,
        waits: Sequence[WaitedDecision] = (),
    ) -> AsyncIterator[RunTimeline]:
        """One leg of a run: its timeline is current within the block.

        ``waits``: the decisions a resumed leg goes on with, each an
        ``approval.wait`` span ending now. The block sets the run's
        ``status`` on ``timeline.run.attributes``; ``paused`` keeps the
        timeline for the resumption, anything else ends the run (a
        cancellation: ``interrupted``; an error: ``failed``).
        """
        timeline = self._paused.pop(run_id, None)
        if timeline is None:
            timeline = RunTimeline(
                run_id, attributes, clock=self._clock, wall=self._wall, on_end=self.span_ended
            )
        else:
            timeline.run.attributes.pop("status", None)
            timeline.leg_start = timeline.now()
        now = timeline.now()
        for wait in waits:
            timeline.add(
                "approval.wait",
                timeline.run,
                now - wait.seconds,
                now,
                approved=wait.approved,
                decision=wait.kind,
                decided_by=wait.by,
            )
        token = current_timeline.set(timeline)
        span_token = current_span.set(timeline.run)
        try:
            yield timeline
        except asyncio.CancelledError:
            timeline.run.attributes["status"] = "interrupted"
            raise
        except BaseException:
            timeline.run.attributes["status"] = "failed"
            raise
        finally:
            current_span.reset(span_token)
            current_timeline.reset(token)
            paused = timeline.run.attributes.get("status") == "paused"
            if paused:
                self._paused[run_id] = timeline
                while len(self._paused) > MAX_PAUSED:
                    self._paused.popitem(last=False)
            else:
                timeline.run.attributes.setdefault("status", "done")
                timeline.close(timeline.run)
            if self.sinks:
                self._notify(lambda sink: sink.leg_ended(timeline, paused=paused))

    def forget(self, run_id: str) -> None:
        """Drop a paused run's timeline (its request expired or was stopped)."""
        self._paused.pop(run_id, None)


@dataclass(frozen=True)
class WaitedDecision:
    """A decision a resumed run goes on with, as its ``approval.wait`` span tells it."""

    seconds: float
    approved: bool
    kind: str
    by: str


@contextlib.contextmanager
def timed(kind: SpanKind, **attributes: Any) -> Iterator[Span | None]:
    """A span of ``kind`` around the block, under the task's current span; None (and
    nothing kept) outside a run. An exception leaves ``outcome`` set unless the block
    set it (``cancelled`` for a cancellation, else ``error``)."""
    timeline = current_timeline.get()
    if timeline is None:
        yield None
        return
    span = timeline.open(kind, current_span.get() or timeline.run, **attributes)
    token = current_span.set(span)
    try:
        yield span
    except asyncio.CancelledError:
        span.attributes.setdefault("outcome", "cancelled")
        raise
    except BaseException:
        span.attributes.setdefault("outcome", "error")
        raise
    finally:
        current_span.reset(token)
        timeline.close(span)


def mark(name: str) -> None:
    """Mark a moment of the task's current span (``first_token`` of a streamed reply)."""
    timeline, span = current_timeline.get(), current_span.get()
    if timeline is not None and span is not None:
        span.marks.setdefault(name, timeline.now())


def snippet_attribute(code: str, limit: int = SNIPPET_CHARS) -> str:
    """A snippet as a span attribute: cut at ``limit`` characters as log content is
    (``…[N chars]``), secrets cut out by the logs' own rules."""
    text = code if len(code) <= limit else code[:limit] + f"…[{len(code)} chars]"
    return redact_text(text)


def timing_observer(
    inner: AuditObserver | None, server_of: Callable[[str], str | None] = lambda _tool: None
) -> AuditObserver:
    """The audit observer that times each nested call on the run's timeline (its
    ``started`` and ending entries), then hands on to ``inner``. ``server_of(tool)``:
    the MCP server that serves ``tool``, for the span's attributes. In direct mode
    (the same observer around the model's own calls) the call's span is the one the
    model code opened: the entries add to it, so a call is never counted twice."""

    def observe(thread_id: str | None, entry: AuditEntry) -> Awaitable[None] | None:
        timeline = current_timeline.get()
        if timeline is not None:
            parent = current_span.get()
            attributes: dict[str, Any] = {
                "server": server_of(entry.tool),
                "tool": entry.tool,
                "mutating": entry.mutating,
            }
            if entry.outcome != "started":
                attributes.update(outcome=entry.outcome, bytes=entry.bytes)
                if entry.queue_ms:
                    attributes["queue_ms"] = entry.queue_ms
                if entry.decision:
                    attributes["decision"] = entry.decision
            if parent is not None and parent.kind == "tool_call":
                # direct mode: the model's own call, whose span the model code holds open;
                # its audit adds what it knows to that span instead of a second one under it
                parent.attributes.update(attributes)
            elif entry.outcome == "started":
                timeline.call_started(entry.key, parent, **attributes)
            else:
                timeline.call_ended(entry.key, parent, entry.duration_ms / 1000, **attributes)
        return inner(thread_id, entry) if inner is not None else None

    return observe


# ---- the split (issue 31) ----------------------------------------------------------------


@dataclass(frozen=True)
class TimeSplit:
    """Where a run's seconds went, every part from the same spans (issue 31, section 1).

    ``prompt_eval`` and ``generation`` split the model's time at each
    request's ``first_token`` mark (a request without one counts as
    generation); ``model_slot`` is the wait for a model slot (spans of kind
    ``model.request`` marked ``slot``: the time before the mark); ``sandbox``
    is run_code's own time, its nested calls taken out; ``tools`` the time
    with at least one nested (or direct) call running; ``approvals`` the
    waits; ``daemon`` the rest of the run.
    """

    total: float
    model_slot: float
    prompt_eval: float
    generation: float
    sandbox: float
    tools: float
    approvals: float
    daemon: float

    def rounded(self) -> dict[str, float]:
        """The parts by name in seconds to the millisecond (the run row's ``split``)."""
        return {name: round(getattr(self, name), 3) for name in SPLIT_PARTS}


SPLIT_PARTS = (
    "total",
    "model_slot",
    "prompt_eval",
    "generation",
    "sandbox",
    "tools",
    "approvals",
    "daemon",
)
"""The parts of :class:`TimeSplit`, in the order every report shows them."""


def _union(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``intervals`` (overlaps counted once)."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return covered


def calls_of(timeline: RunTimeline) -> list[Span]:
    """The run's tool calls: nested ones and the model's own (direct mode)."""
    return timeline.of_kind("tool_call")


def run_split() -> dict[str, float]:
    """The split of the task's run so far (:meth:`TimeSplit.rounded`); empty outside a run."""
    timeline = current_timeline.get()
    return time_split(timeline).rounded() if timeline is not None else {}


def time_split(timeline: RunTimeline) -> TimeSplit:
    """The split of a run's time from its spans: the parts add up to ``total``.

    Parts that overlap (a gather of calls, a tool span inside run_code) are
    counted once, in the innermost part, so the sum never exceeds the run.
    """
    run = timeline.run
    end = run.end if run.end is not None else timeline.now()
    total = max(0.0, end - run.start)

    def until(span: Span) -> float:
        return span.end if span.end is not None else end

    slot = prompt_eval = generation = 0.0
    for span in timeline.of_kind("model.request"):
        begin = span.marks.get("slot", span.start)
        first = span.marks.get("first_token")
        slot += begin - span.start
        if first is not None:
            prompt_eval += first - begin
            generation += until(span) - first
        else:
            generation += until(span) - begin
    calls = calls_of(timeline)
    tools = _union([(s.start, until(s)) for s in calls])
    code = timeline.of_kind("run_code")
    code_ids = {s.id for s in code}
    inside = _union([(s.start, until(s)) for s in calls if s.parent in code_ids])
    sandbox = max(0.0, _union([(s.start, until(s)) for s in code]) - inside)
    approvals = _union([(s.start, until(s)) for s in timeline.of_kind("approval.wait")])
    known = slot + prompt_eval + generation + sandbox + tools + approvals
    return TimeSplit(
        total=total,
        model_slot=slot,
        prompt_eval=prompt_eval,
        generation=generation,
        sandbox=sandbox,
        tools=tools,
        approvals=approvals,
        daemon=max(0.0, total - known),
    )
