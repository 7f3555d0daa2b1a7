"""Telemetry: OpenTelemetry traces and Prometheus metrics, read from the one timing source.

Every run's parts are timed once, on its timeline (:mod:`daemon.runtime.timing`,
the runtime's: the model code and the audit observer report to it without
knowing this package). This package reads those timelines:
:mod:`~daemon.telemetry.otlp` encodes a run's trace (pure),
:mod:`~daemon.telemetry.export` posts it to an OTLP/HTTP collector,
:mod:`~daemon.telemetry.metrics` counts into Prometheus metrics,
:mod:`~daemon.telemetry.serve` serves them on ``[telemetry] metrics_listen``,
:mod:`~daemon.telemetry.mount` puts ``/metrics`` in front of the console's guard, and
:mod:`~daemon.telemetry.telemetry` puts them together for :mod:`daemon.app`.
This face imports only the light parts: the exporter, prometheus-client and
uvicorn load when configured.

May import: ``daemon.runtime`` (the timelines), ``daemon.logging``, ``daemon.errors``,
``daemon.asgi`` (how ``/metrics`` is served), prometheus-client, uvicorn and httpx2;
nothing imports it but ``daemon.app``.
"""

from daemon.telemetry.mount import with_metrics
from daemon.telemetry.otlp import encode_trace, run_span_id, trace_id
from daemon.telemetry.readings import Readings
from daemon.telemetry.telemetry import Telemetry

__all__ = ["Readings", "Telemetry", "encode_trace", "run_span_id", "trace_id", "with_metrics"]
