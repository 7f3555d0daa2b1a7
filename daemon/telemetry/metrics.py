"""The Prometheus metrics: counts and durations read from the timing source, and live gauges.

Every count and duration of a run comes from the spans of its timeline
(:mod:`daemon.runtime.timing`), as they end, so the metrics agree with the
traces and the time split; the gauges are read from the daemon when scraped
(:class:`Readings`). Counts, never content: no label carries a prompt, an
argument or a thread. Labels are the run's ``status``, the model's token
``kind``, and a nested call's ``server``, ``tool`` and ``outcome`` (the
configured tools: a bounded set).

=============================================  =========  ================================
metric                                         type       labels
=============================================  =========  ================================
``asyncai_runs_total``                         counter    ``status`` (done, failed,
                                                          interrupted, paused)
``asyncai_run_duration_seconds``               histogram  ``status``
``asyncai_model_tokens_total``                 counter    ``kind`` (prompt, completion)
``asyncai_model_request_duration_seconds``     histogram
``asyncai_nested_calls_total``                 counter    ``server``, ``tool``, ``outcome``
``asyncai_tool_call_duration_seconds``         histogram  ``server``, ``tool``
``asyncai_approval_wait_seconds``              histogram  ``decision``
``asyncai_approvals_pending``                  gauge
``asyncai_active_runs``                        gauge
``asyncai_queued_prompts``                     gauge
``asyncai_repl_scopes``                        gauge      ``state`` (live, saved)
``asyncai_channel_reconnects_total``           counter
=============================================  =========  ================================

A paused run counts once as ``paused`` when it pauses, and again with how it
ended when its resumption ends; its duration is observed for each leg.
Each :class:`Metrics` has its own registry (no process-wide state): the
daemon's is served by :func:`metrics_app`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from daemon.runtime import RunTimeline, Span, time_split
from daemon.telemetry.readings import Readings

__all__ = ["Metrics", "MetricsApp", "metrics_app"]

log = structlog.get_logger("asyncai.telemetry")

# Seconds: a nested call is milliseconds to minutes; a run seconds to max_run_seconds.
_CALL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_RUN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 900)
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 86400)


class _Gauges(Collector):
    """The gauges (and the reconnect counter the channel keeps), read at collection."""

    def __init__(self, readings: Readings) -> None:
        self.readings = readings
        self.saved: int | None = None  # the last count of stored scopes

    def collect(self) -> Iterator[Metric]:
        r = self.readings
        for name, help_text, read in (
            ("asyncai_active_runs", "Runs working now.", r.active_runs),
            (
                "asyncai_queued_prompts",
                "Prompts waiting for a run (queue depth).",
                r.queued_prompts,
            ),
            (
                "asyncai_approvals_pending",
                "Calls waiting for a person's decision.",
                r.approvals_pending,
            ),
        ):
            if read is not None:
                yield GaugeMetricFamily(name, help_text, value=read())
        scopes = GaugeMetricFamily(
            "asyncai_repl_scopes", "REPL scopes: live in a worker, or saved.", labels=["state"]
        )
        if r.scopes_live is not None:
            scopes.add_metric(["live"], r.scopes_live())
        if self.saved is not None:
            scopes.add_metric(["saved"], self.saved)
        yield scopes
        if r.channel_reconnects is not None:
            yield CounterMetricFamily(
                "asyncai_channel_reconnects",
                "Times the channel connection was made again after it broke.",
                value=r.channel_reconnects(),
            )


class Metrics:
    """The daemon's metrics: a :class:`~daemon.runtime.TimingSink` and the gauges.

    ``readings``: what the gauges read (None: only the run metrics).
    """

    def __init__(self, readings: Readings | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = Counter("asyncai_runs", "Runs ended, by status.", ["status"], registry=r)
        self.run_seconds = Histogram(
            "asyncai_run_duration_seconds",
            "How long a run (each leg of a paused one) took.",
            ["status"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "asyncai_model_tokens", "Model tokens, by kind.", ["kind"], registry=r
        )
        self.model_seconds = Histogram(
            "asyncai_model_request_duration_seconds",
            "How long one model request took, its retries included.",
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.calls = Counter(
            "asyncai_nested_calls",
            "Tool calls made, by server, tool and outcome.",
            ["server", "tool", "outcome"],
            registry=r,
        )
        self.call_seconds = Histogram(
            "asyncai_tool_call_duration_seconds",
            "How long a tool call took (its wait for a server slot not included).",
            ["server", "tool"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.run_parts = Counter(
            "asyncai_run_part_seconds",
            "Where the runs' seconds went: the time split of each ended run, by part.",
            ["part"],
            registry=r,
        )
        self.approval_wait = Histogram(
            "asyncai_approval_wait_seconds",
            "How long a call waited for a person's decision.",
            ["decision"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.gauges = _Gauges(readings or Readings())
        r.register(self.gauges)

    def span_ended(self, timeline: RunTimeline, span: Span) -> None:
        """Count a model request, a tool call or an approval wait as it ends."""
        a = span.attributes
        if span.kind == "model.request":
            self.model_seconds.observe(span.seconds)
            self.tokens.labels("prompt").inc(_count(a.get("prompt_tokens")))
            self.tokens.labels("completion").inc(_count(a.get("completion_tokens")))
        elif span.kind == "tool_call":
            server, tool = str(a.get("server") or ""), str(a.get("tool") or "")
            self.calls.labels(server, tool, str(a.get("outcome") or "unknown")).inc()
            self.call_seconds.labels(server, tool).observe(span.seconds)
        elif span.kind == "approval.wait":
            self.approval_wait.labels(str(a.get("decision") or "")).observe(span.seconds)

    def leg_ended(self, timeline: RunTimeline, *, paused: bool) -> None:
        """Count the run by how it ended (or ``paused``) and observe how long it took."""
        run = timeline.run
        status = str(run.attributes.get("status") or "done")
        self.runs.labels(status).inc()
        end = run.end if run.end is not None else timeline.now()
        self.run_seconds.labels(status).observe(max(0.0, end - timeline.leg_start))
        if not paused:  # a paused run's split is counted once, when it ends
            for part, seconds in time_split(timeline).rounded().items():
                if part != "total":
                    self.run_parts.labels(part).inc(seconds)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


class MetricsApp:
    """The ASGI app serving a :class:`Metrics` in Prometheus' text format, wherever it is
    mounted (``/metrics``); no session needed. The saved scopes are counted first.

    A class, not a function, so Starlette's ``Route`` takes it as an ASGI app.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._inner = make_asgi_app(metrics.registry)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one scrape."""
        if scope.get("type") != "http":
            return
        count = self.metrics.gauges.readings.scopes_saved
        if count is not None:
            try:
                self.metrics.gauges.saved = await count()
            except Exception as exc:  # the store closing or busy: the last count stands
                log.debug("telemetry.scopes_not_counted", error=f"{type(exc).__name__}: {exc}")
        await self._inner(scope, receive, send)


def metrics_app(metrics: Metrics) -> MetricsApp:
    """The ASGI app serving ``metrics`` (see :class:`MetricsApp`)."""
    return MetricsApp(metrics)
