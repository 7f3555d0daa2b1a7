"""A run's timeline as an OTLP trace: the JSON body of one ``/v1/traces`` export, pure.

The OTLP/HTTP JSON encoding (the protocol's own, beside protobuf): trace and
span ids in hex, times as strings of Unix nanoseconds, attributes as typed
values. One trace per run:

- the trace id and the ``run`` span's id are derived from the run id, so a
  run resumed after a restart (a new timeline) still hangs under the same
  trace and run span;
- every other span's id is derived from the run id, the timeline's start and
  the span's number: unique across the legs of a run, and the same each time
  one timeline is encoded;
- attribute keys are ``asyncai.*``, and the model's also under the GenAI
  semantic conventions (``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``);
- a span whose ``outcome`` is ``error`` (or a run ``failed``) has the
  status ERROR.

No I/O and no OpenTelemetry SDK: the spans are built after the fact from the
one timing source (:mod:`daemon.runtime.timing`), with ids of their own, which
is not what the SDK's tracer is for, and the SDK's OTLP exporter would bring
protobuf and grpc stubs into a daemon that has no other use for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from daemon.runtime import RunTimeline, Span

__all__ = ["SERVICE_NAME", "encode_trace", "run_span_id", "trace_id"]

SERVICE_NAME = "asyncai"

# OTLP's SpanKind: INTERNAL for the run and its parts, CLIENT for the calls that leave it
_INTERNAL, _CLIENT = 1, 3
_STATUS_ERROR = 2

# the model's attributes under the GenAI semantic conventions as well
_GEN_AI = {
    "model": "gen_ai.request.model",
    "prompt_tokens": "gen_ai.usage.input_tokens",
    "completion_tokens": "gen_ai.usage.output_tokens",
}


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).digest()[:size].hex()


def trace_id(run_id: str) -> str:
    """The run's trace id (32 hex digits), the same in every process."""
    return _digest(f"asyncai-trace:{run_id}", 16)


def run_span_id(run_id: str) -> str:
    """The ``run`` span's id (16 hex digits), the same in every process."""
    return _digest(f"asyncai-run:{run_id}", 8)


def _span_id(timeline: RunTimeline, span: Span) -> str:
    if span.parent is None:
        return run_span_id(timeline.run_id)
    return _digest(f"asyncai-span:{timeline.run_id}:{timeline.unix_ns(0.0)}:{span.id}", 8)


def _value(value: Any) -> dict[str, Any]:
    """One attribute value in OTLP JSON (64-bit integers as strings, as the encoding says)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, value in attributes.items():
        if value is None:
            continue
        out.append({"key": f"asyncai.{key}", "value": _value(value)})
        if key in _GEN_AI:
            out.append({"key": _GEN_AI[key], "value": _value(value)})
    return out


def _name(span: Span) -> str:
    """``run``, ``model.request``, ``run_code``, ``approval.wait``; ``tool_call SERVER.TOOL``."""
    if span.kind != "tool_call":
        return span.kind
    tool = span.attributes.get("tool") or "?"
    server = span.attributes.get("server")
    return f"tool_call {server}.{tool}" if server else f"tool_call {tool}"


def _failed(span: Span) -> bool:
    return span.attributes.get("outcome") == "error" or span.attributes.get("status") == "failed"


def _span(
    timeline: RunTimeline, span: Span, end: float, by_id: Mapping[int, Span]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace_id(timeline.run_id),
        "spanId": _span_id(timeline, span),
        "name": _name(span),
        "kind": _CLIENT if span.kind in ("model.request", "tool_call") else _INTERNAL,
        "startTimeUnixNano": str(timeline.unix_ns(span.start)),
        "endTimeUnixNano": str(timeline.unix_ns(span.end if span.end is not None else end)),
        "attributes": _attributes(span.attributes),
    }
    if span.parent is not None:
        out["parentSpanId"] = _span_id(timeline, by_id[span.parent])
    if span.marks:
        out["events"] = [
            {"name": name, "timeUnixNano": str(timeline.unix_ns(t))}
            for name, t in span.marks.items()
        ]
    if _failed(span):
        out["status"] = {"code": _STATUS_ERROR}
    return out


def encode_trace(timeline: RunTimeline, *, host: str | None = None) -> dict[str, Any]:
    """The OTLP/HTTP JSON body exporting every span of ``timeline`` (an open span ends
    at the run's end); ``host``: the resource's ``host.name``."""
    end = timeline.run.end if timeline.run.end is not None else timeline.now()
    by_id = {span.id: span for span in timeline.spans}
    resource = [{"key": "service.name", "value": {"stringValue": SERVICE_NAME}}]
    if host:
        resource.append({"key": "host.name", "value": {"stringValue": host}})
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [
                    {
                        "scope": {"name": "asyncai"},
                        "spans": [_span(timeline, span, end, by_id) for span in timeline.spans],
                    }
                ],
            }
        ]
    }
