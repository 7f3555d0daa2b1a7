"""The OTLP/HTTP exporter: each finished run's trace posted to ``ENDPOINT/v1/traces``.

A :class:`~daemon.runtime.TimingSink`: when a run ends (not when it pauses
for approval: its timeline goes on after the decision), its trace is encoded
(:mod:`daemon.telemetry.otlp`) and queued; one task owned here posts the
queue in order, as JSON (``Content-Type: application/json``).

- The queue is bounded (:data:`MAX_QUEUED` traces). When the collector is
  slower than the runs, or away, a new trace that finds it full is dropped
  and counted (:attr:`OtlpExporter.dropped`), so the daemon's memory never
  grows with an outage; a run is never slowed by its export.
- Each post is bounded by :data:`POST_TIMEOUT`; a failed post is dropped,
  not retried (the next trace goes next). A failure is logged once per
  outage (``telemetry.export_failed``), its end once (``telemetry.export_resumed``).
- :meth:`OtlpExporter.aclose` posts what is queued within
  :data:`CLOSE_GRACE` seconds, then cancels the task and closes the client.

Imported only when an endpoint is configured (``[telemetry] otlp_endpoint``
or ``OTEL_EXPORTER_OTLP_ENDPOINT``); it uses the HTTP client the model
client already loads (httpx2). ``OTEL_EXPORTER_OTLP_HEADERS`` (a collector's
credentials, :func:`parse_headers`) are sent with every post and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import httpx2
import structlog

from daemon.logging import register_secret
from daemon.runtime import RunTimeline, Span
from daemon.telemetry.otlp import encode_trace

__all__ = [
    "CLOSE_GRACE",
    "MAX_QUEUED",
    "POST_TIMEOUT",
    "OtlpExporter",
    "parse_headers",
    "traces_url",
]

log = structlog.get_logger("asyncai.telemetry")

MAX_QUEUED = 256
"""Traces waiting to be posted, at most; a new one past it is dropped."""

POST_TIMEOUT = 10.0
"""Seconds one post may take."""

CLOSE_GRACE = 5.0
"""Seconds the shutdown gives the queued traces."""


def parse_headers(text: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs separated by commas, values
    percent-encoded (``Authorization=Basic%20abc``), as the OpenTelemetry spec says;
    blanks around each are dropped. ValueError naming the pair that has no ``=`` or no key.
    """
    headers: dict[str, str] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key or not _TOKEN.fullmatch(key):
            raise ValueError(f"OTEL_EXPORTER_OTLP_HEADERS: {pair.strip()!r} is not KEY=VALUE")
        headers[key] = unquote(value.strip())
    return headers


# an HTTP header name (RFC 9110's token)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP ``endpoint`` (its base, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` gives it): ``ENDPOINT/v1/traces``."""
    return endpoint.rstrip("/") + "/v1/traces"


class OtlpExporter:
    """Posts each finished run's trace to an OTLP/HTTP collector; see the module docstring.

    ``headers``: sent with every post (a collector's API key: never logged).
    """

    def __init__(self, endpoint: str, *, headers: Mapping[str, str] | None = None) -> None:
        self.url = traces_url(endpoint)
        for value in (headers or {}).values():
            register_secret(value)
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(MAX_QUEUED)
        self._client: httpx2.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._host = socket.gethostname()
        self.dropped = 0  # traces dropped: the queue was full, or the post failed
        self.exported = 0  # traces the collector accepted

    def start(self) -> None:
        """Start the posting task (on the running loop)."""
        if self._task is None:
            self._client = httpx2.AsyncClient(timeout=POST_TIMEOUT)
            self._task = asyncio.create_task(self._post_all(), name="asyncai-otlp")

    def span_ended(self, timeline: RunTimeline, span: Span) -> None:
        """Nothing: a trace goes out whole when its run ends."""

    def leg_ended(self, timeline: RunTimeline, *, paused: bool) -> None:
        """A run that ended is queued for export (a paused one waits for its end)."""
        if paused:
            return
        body = json.dumps(encode_trace(timeline, host=self._host)).encode()
        try:
            self._queue.put_nowait(body)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning("telemetry.export_queue_full", dropped=self.dropped, url=self.url)

    async def _post_all(self) -> None:
        while True:
            body = await self._queue.get()
            try:
                await self._post(body)
            finally:
                self._queue.task_done()

    async def _post(self, body: bytes) -> None:
        assert self._client is not None
        try:
            response = await self._client.post(self.url, content=body, headers=self._headers)
            problem: Any = None if response.status_code < 300 else f"HTTP {response.status_code}"
        except httpx2.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            self.exported += 1
            if self._failing:
                self._failing = False
                log.warning("telemetry.export_resumed", url=self.url)
            return
        self.dropped += 1
        if not self._failing:
            self._failing = True
            log.warning("telemetry.export_failed", url=self.url, error=problem, action="dropped")

    async def flush(self) -> None:
        """Until every queued trace was posted (or dropped)."""
        await self._queue.join()

    async def aclose(self) -> None:
        """Post what is queued (within :data:`CLOSE_GRACE`), then stop and close the client."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_GRACE):
                await self.flush()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
