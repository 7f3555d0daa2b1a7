"""The daemon's telemetry, assembled: the timelines, and what reads them when configured.

:class:`Telemetry` owns the daemon's :class:`~daemon.runtime.Timelines` (the
one timing source, always on: issue 31's time split reads it too) and,
when configured, its two readers:

- the OTLP exporter (:mod:`daemon.telemetry.export`), when ``otlp_endpoint``
  is set (``[telemetry] otlp_endpoint``, or ``OTEL_EXPORTER_OTLP_ENDPOINT``);
- the Prometheus metrics (:mod:`daemon.telemetry.metrics`), when they are
  served: on ``metrics_listen`` (:mod:`daemon.telemetry.serve`) and/or on
  the console's address, in front of its guard
  (:func:`daemon.telemetry.with_metrics`).

Neither is imported unless configured, nor prometheus-client, nor uvicorn:
a daemon without telemetry pays for one small timeline per run and nothing
else (tests/test_telemetry.py checks ``sys.modules``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.runtime import Timelines
from daemon.telemetry.readings import Readings

if TYPE_CHECKING:
    from daemon.telemetry.export import OtlpExporter
    from daemon.telemetry.metrics import Metrics
    from daemon.telemetry.serve import MetricsServer

__all__ = ["Telemetry"]


class Telemetry:
    """The timelines, the exporter and the metrics; :meth:`start`, then :meth:`aclose`.

    ``metrics``: build the metrics even without ``metrics_listen`` (the
    console serves them). ``otlp_headers``: ``OTEL_EXPORTER_OTLP_HEADERS``'s text,
    sent with each export (ValueError at :meth:`start` when it does not parse).
    ``readings``: what the gauges read (a :class:`~daemon.telemetry.Readings`),
    set before :meth:`start`.
    """

    def __init__(
        self,
        *,
        otlp_endpoint: str | None = None,
        metrics_listen: str | None = None,
        metrics: bool = False,
        readings: Readings | None = None,
        otlp_headers: str | None = None,
    ) -> None:
        self.otlp_endpoint = otlp_endpoint
        self.otlp_headers = otlp_headers
        self.metrics_listen = metrics_listen
        self._want_metrics = metrics or metrics_listen is not None
        self.readings = readings
        self.timelines = Timelines()
        self.exporter: OtlpExporter | None = None
        self.metrics: Metrics | None = None
        self.server: MetricsServer | None = None

    async def start(self) -> None:
        """Build what is configured, and serve ``metrics_listen`` (OSError: not bindable;
        ValueError: the headers do not parse)."""
        if self.otlp_endpoint and self.exporter is None:
            from daemon.telemetry.export import OtlpExporter, parse_headers

            headers = parse_headers(self.otlp_headers or "")
            self.exporter = OtlpExporter(self.otlp_endpoint, headers=headers)
            self.exporter.start()
            self.timelines.sinks.append(self.exporter)
        if self._want_metrics and self.metrics is None:
            from daemon.telemetry.metrics import Metrics

            self.metrics = Metrics(self.readings)
            self.timelines.sinks.append(self.metrics)
        if self.metrics_listen and self.server is None:
            from daemon.telemetry.serve import MetricsServer

            self.server = MetricsServer(self.metrics_asgi(), self.metrics_listen)
            await self.server.start()

    def metrics_asgi(self) -> Any:
        """The ASGI app serving the metrics (``/metrics``), built on first use."""
        from daemon.telemetry.metrics import Metrics, metrics_app

        if self.metrics is None:
            self.metrics = Metrics(self.readings)
            self.timelines.sinks.append(self.metrics)
        return metrics_app(self.metrics)

    async def aclose(self) -> None:
        """Stop serving the metrics, then post the queued traces and stop the exporter."""
        if self.server is not None:
            await self.server.aclose()
            self.server = None
        if self.exporter is not None:
            await self.exporter.aclose()
