"""The one timing source (daemon/runtime/timing.py) and the OTLP encoding of its spans, pure:
a clock the test moves, no sockets, no daemon."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from daemon.logging import register_secret
from daemon.runtime import (
    RunTimeline,
    Span,
    Timelines,
    WaitedDecision,
    current_span,
    mark,
    snippet_attribute,
    time_split,
    timed,
    timing_observer,
)
from daemon.telemetry import encode_trace, run_span_id, trace_id
from daemon.tools import AuditEntry, observe_entry


class Clock:
    """Seconds that move only when the test says."""

    def __init__(self, start: float = 100.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


class Recorder:
    """A TimingSink that keeps what it was told."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.legs: list[tuple[RunTimeline, bool]] = []

    def span_ended(self, timeline: RunTimeline, span: Span) -> None:
        self.spans.append(span)

    def leg_ended(self, timeline: RunTimeline, *, paused: bool) -> None:
        self.legs.append((timeline, paused))


def _entry(key: str, outcome: Any, *, duration_ms: float = 0.0, nbytes: int = 0) -> AuditEntry:
    return AuditEntry(
        tool="echo",
        arguments={"text": "x"},
        is_error=outcome == "error",
        bytes=nbytes,
        mutating=False,
        started="2026-12-01T00:00:00Z",
        duration_ms=duration_ms,
        outcome=outcome,
        key=key,
    )


async def test_spans_nest_under_the_span_of_the_task_that_opened_them() -> None:
    """A model request and a run_code open under the run; nested calls, observed from
    tasks the run_code started (a gather), under that run_code, each closing on its end."""
    clock, sink = Clock(), Recorder()
    timelines = Timelines([sink], clock=clock, wall=lambda: 1_000.0)
    observer = timing_observer(None, lambda tool: "test")
    async with timelines.timing_run("r1", {"channel": "#ops"}) as timeline:
        with timed("model.request", model="m") as request:
            clock.tick(1.0)
            assert request is not None
            request.attributes["prompt_tokens"] = 10
        with timed("run_code", snippet_chars=12) as code:

            async def call(key: str, seconds: float) -> None:
                await observe_entry(observer, "t", _entry(key, "started"))
                await asyncio.sleep(0)  # the three interleave, as a gather's calls do
                clock.tick(seconds)
                await observe_entry(observer, "t", _entry(key, "ok", nbytes=5))

            await asyncio.gather(call("a", 0.1), call("b", 0.2), call("c", 0.3))
        timeline.run.attributes["status"] = "done"
    calls = timeline.of_kind("tool_call")
    assert code is not None
    assert len(calls) == 3
    assert {c.parent for c in calls} == {code.id}
    assert code.parent == timeline.run.id == 0
    assert all(c.end is not None and c.attributes["outcome"] == "ok" for c in calls)
    assert [c.attributes["server"] for c in calls] == ["test"] * 3
    assert timeline.run.end == clock.t  # closed when the leg ended, not paused
    assert sink.legs == [(timeline, False)]
    assert [s.kind for s in sink.spans] == ["model.request", *["tool_call"] * 3, "run_code"]


async def test_outside_a_run_timed_and_the_observer_keep_nothing() -> None:
    """Model code and nested calls outside any run (a warm-up, a test's executor) time nothing."""
    with timed("model.request") as span:
        assert span is None
    seen: list[AuditEntry] = []

    def inner(thread: str | None, entry: AuditEntry) -> None:
        seen.append(entry)

    await asyncio.sleep(0)
    timing_observer(inner)("t", _entry("k", "started"))
    assert len(seen) == 1  # handed on all the same


async def test_an_exception_or_a_cancellation_leaves_its_outcome_and_the_run_status() -> None:
    """A span ended by an error says ``error``; a cancelled run is ``interrupted``."""
    timelines = Timelines(clock=Clock())
    kept: list[RunTimeline] = []

    async def run() -> None:
        async with timelines.timing_run("r2", {}) as timeline:
            kept.append(timeline)
            with contextlib.suppress(ValueError), timed("run_code"):
                raise ValueError("boom")
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run()
    (timeline,) = kept
    assert timeline.of_kind("run_code")[0].attributes["outcome"] == "error"
    assert timeline.run.attributes["status"] == "interrupted"


async def test_a_paused_run_goes_on_in_the_same_timeline_with_its_approval_wait() -> None:
    """Pausing keeps the timeline (the run span open); the resumed leg adds the wait
    (ending as it resumes, as long as the decision says) and its own spans, same clock."""
    clock, sink = Clock(), Recorder()
    timelines = Timelines([sink], clock=clock)
    async with timelines.timing_run("r3", {}) as first:
        with timed("run_code"):
            clock.tick(1.0)
        first.run.attributes["status"] = "paused"
    assert first.run.end is None
    assert sink.legs == [(first, True)]
    clock.tick(30.0)
    wait = WaitedDecision(30.0, True, "approved", "bob")
    async with timelines.timing_run("r3", {}, waits=[wait]) as second:
        with timed("run_code", resumed=True):
            clock.tick(2.0)
        second.run.attributes["status"] = "done"
    assert second is first
    (waited,) = second.of_kind("approval.wait")
    assert (waited.start, waited.end) == (101.0, 131.0)
    assert waited.attributes == {"approved": True, "decision": "approved", "decided_by": "bob"}
    assert second.leg_start == 131.0
    assert second.run.end == 133.0
    assert sink.legs[-1] == (second, False)


async def test_a_resumption_without_its_first_leg_starts_at_the_wait() -> None:
    """After a restart the paused leg's timeline is gone: the run span begins with the wait."""
    clock = Clock()
    timelines = Timelines(clock=clock)
    async with timelines.timing_run(
        "r4", {}, waits=[WaitedDecision(5.0, False, "denied", "x")]
    ) as t:
        t.run.attributes["status"] = "done"
    assert t.run.start == 95.0
    assert t.of_kind("approval.wait")[0].start == 95.0


async def test_a_sink_that_fails_never_fails_the_run() -> None:
    """Telemetry is best effort: a sink raising is logged once, the run goes on."""

    class Broken(Recorder):
        def span_ended(self, timeline: RunTimeline, span: Span) -> None:
            raise RuntimeError("sink down")

    timelines = Timelines([Broken()], clock=Clock())
    async with timelines.timing_run("r5", {}) as timeline:
        with timed("run_code"):
            pass
        timeline.run.attributes["status"] = "done"
    assert timeline.run.end is not None


def test_a_nested_call_that_never_started_is_added_as_long_as_it_took() -> None:
    """A call refused before it was made has only its end: the span ends now, its
    ``duration_ms`` long."""
    clock = Clock()
    timeline = RunTimeline("r6", clock=clock)
    span = timeline.call_ended("", None, 0.5, tool="rm", outcome="error")
    assert (span.start, span.end, span.parent) == (99.5, 100.0, 0)


def test_the_split_adds_up_to_the_run_and_counts_overlaps_once() -> None:
    """Issue 31's split from the same spans: a model request split at its first token,
    three overlapping calls counted once inside run_code, the sandbox its own time,
    the approval wait, and the daemon the rest."""
    clock = Clock(0.0)
    timeline = RunTimeline("r7", clock=clock)
    request = timeline.open("model.request", timeline.run)
    clock.tick(0.5)
    request.marks["slot"] = clock()
    clock.tick(2.0)
    request.marks["first_token"] = clock()
    clock.tick(1.0)
    timeline.close(request)  # t = 3.5
    code = timeline.open("run_code", timeline.run)
    clock.tick(0.25)
    a = timeline.open("tool_call", code)
    b = timeline.open("tool_call", code)
    clock.tick(1.0)
    timeline.close(a)
    clock.tick(1.0)
    timeline.close(b)  # calls cover [3.75, 5.75]
    clock.tick(0.25)
    timeline.close(code)  # [3.5, 6.0]
    timeline.add("approval.wait", timeline.run, 6.0, 7.0)
    clock.tick(1.5)
    timeline.close(timeline.run)  # t = 7.5
    split = time_split(timeline)
    assert split.total == 7.5
    assert (split.model_slot, split.prompt_eval, split.generation) == (0.5, 2.0, 1.0)
    assert (split.tools, split.sandbox, split.approvals) == (2.0, 0.5, 1.0)
    assert split.daemon == pytest.approx(0.5)
    parts = [split.model_slot, split.prompt_eval, split.generation, split.sandbox]
    assert sum(parts) + split.tools + split.approvals + split.daemon == pytest.approx(7.5)


async def test_mark_notes_a_moment_of_the_current_span_once() -> None:
    """``mark("first_token")`` on the span the task is in; a second mark keeps the first."""
    clock = Clock()
    timelines = Timelines(clock=clock)
    async with timelines.timing_run("r8", {}) as timeline:
        with timed("model.request") as span:
            clock.tick(1.0)
            mark("first_token")
            clock.tick(1.0)
            mark("first_token")
            assert current_span.get() is span
        timeline.run.attributes["status"] = "done"
    assert span is not None
    assert span.marks == {"first_token": 101.0}


def test_the_snippet_attribute_is_capped_and_redacted_as_the_logs_are() -> None:
    """A long snippet is cut with its length said; a registered secret never shows."""
    register_secret("hunter2-secret-value")
    text = snippet_attribute("token = 'hunter2-secret-value'\n" + "x" * 3000, limit=100)
    assert "hunter2-secret-value" not in text
    assert "[REDACTED]" in text
    assert text.endswith("…[3031 chars]")
    assert len(text) < 130


def test_the_trace_of_a_run_is_one_tree_with_ids_from_the_run() -> None:
    """The encoded trace: one trace id (from the run id), the run span's id from the
    run id, every other span's parent the id of its parent span; nanosecond times
    from the one wall anchor; model tokens also under GenAI's names; errors marked."""
    clock = Clock(10.0)
    timeline = RunTimeline("run-9", {"channel": "#ops"}, clock=clock, wall=lambda: 1_700_000_000.0)
    request = timeline.open("model.request", timeline.run, model="m", prompt_tokens=7)
    clock.tick(1.0)
    timeline.close(request)
    code = timeline.open("run_code", timeline.run, snippet_chars=3)
    call = timeline.call_started("k", code, server="test", tool="echo")
    timeline.call_ended("k", code, 0.0, outcome="error", bytes=0)
    timeline.close(code)
    timeline.close(timeline.run, status="done")
    body = encode_trace(timeline, host="h")
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    by_name = {s["name"]: s for s in spans}
    assert {s["traceId"] for s in spans} == {trace_id("run-9")}
    run = by_name["run"]
    assert run["spanId"] == run_span_id("run-9")
    assert "parentSpanId" not in run
    assert by_name["model.request"]["parentSpanId"] == run["spanId"]
    assert by_name["run_code"]["parentSpanId"] == run["spanId"]
    tool = by_name["tool_call test.echo"]
    assert tool["parentSpanId"] == by_name["run_code"]["spanId"]
    assert tool["status"] == {"code": 2}
    assert run["startTimeUnixNano"] == str(1_700_000_000 * 10**9)
    attributes = {a["key"]: a["value"] for a in by_name["model.request"]["attributes"]}
    assert attributes["gen_ai.usage.input_tokens"] == {"intValue": "7"}
    assert attributes["asyncai.model"] == {"stringValue": "m"}
    assert call.id != code.id
    assert len({s["spanId"] for s in spans}) == len(spans)


async def test_in_direct_mode_the_audit_adds_to_the_models_call_span_instead_of_a_second() -> None:
    """The model's own call (direct mode) has its span from the model code; the audit
    observer around the same call fills in server and bytes, and no span opens under it."""
    timelines = Timelines(clock=Clock())
    observer = timing_observer(None, lambda tool: "test")
    async with timelines.timing_run("r10", {}) as timeline:
        with timed("tool_call", tool="echo") as span:
            await observe_entry(observer, "t", _entry("k", "started"))
            await observe_entry(observer, "t", _entry("k", "ok", nbytes=4))
        timeline.run.attributes["status"] = "done"
    assert timeline.of_kind("tool_call") == [span]
    assert span is not None
    assert span.attributes["server"] == "test"
    assert span.attributes["bytes"] == 4
