"""Transcripts out of the store: Claude Code JSONL and a text form for people. Pure.

Claude Code keeps one JSON object per line, each a full envelope: readers
(Claude Code's ``--resume``, transcript viewers, usage counters) silently
drop lines without ``parentUuid``, ``sessionId``, ``uuid``, ``timestamp``,
``type``, ``cwd``, ``version``, ``isSidechain`` and ``userType``. The
``run_code`` audit rides along as ``toolUseResult`` on the ``tool_result``
record: UI metadata that a model never sees on resume.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .model import AuditEntry, RunMetrics, StoredRecord

__all__ = [
    "AUDIT_CSV_COLUMNS",
    "audit_csv_lines",
    "envelope",
    "json_line",
    "jsonl_lines",
    "printable",
    "run_line",
    "text_lines",
]

AUDIT_CSV_COLUMNS = (
    "id",
    "started",
    "channel",
    "thread_id",
    "run_id",
    "tool",
    "arguments",
    "mutating",
    "outcome",
    "is_error",
    "bytes",
    "duration_ms",
    "decision",
    "decided_by",
    "wait_ms",
    "queue_ms",
)
"""The audit CSV's header: one column per field of a ``tool_calls`` row."""

# A cell a spreadsheet would read as a formula (CSV injection): written with a
# leading apostrophe, which spreadsheets show as text and hide.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

RESULT_PREVIEW_CHARS = 2000  # how much of a tool result the text form shows

# What a terminal acts on instead of showing: the C0 and C1 controls (ESC and CSI
# start sequences that move the cursor, rewrite the screen or set the title; CR
# returns to the line's start), DEL, the line and paragraph separators, the
# bidirectional marks, embeddings, overrides and isolates that reorder what follows,
# and lone surrogates (not UTF-8 at all). Tab is kept.
_UNSAFE = re.compile(
    r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0A:
        return "\\n"
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` as one line a terminal shows and never acts on: each character of
    ``_UNSAFE`` (newlines included) as its escape, ``\\x1b``, ``\\n``, ``\\u202e``. A
    stored text cannot move the cursor, start another line or reorder the line."""
    return _UNSAFE.sub(_escape, text)


def json_line(value: Any, *, separators: tuple[str, str] = (",", ":")) -> str:
    """``value`` as one line of JSON (``ensure_ascii=False``) with every character of
    ``_UNSAFE`` left as its ``\\uXXXX`` escape: the same JSON value, valid UTF-8 (a lone
    surrogate too), and safe to print on a terminal."""
    text = json.dumps(value, ensure_ascii=False, separators=separators)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def envelope(record: StoredRecord) -> dict[str, Any]:
    """One record as Claude Code writes it (same keys, same order)."""
    line: dict[str, Any] = {
        "parentUuid": record.parent_uuid,
        "isSidechain": record.is_sidechain,
        "userType": record.user_type,
        "cwd": record.cwd,
        "sessionId": record.session_id,
        "version": record.version,
        "type": record.type,
        "message": record.message,
        "uuid": record.uuid,
        "timestamp": record.timestamp,
    }
    if record.tool_use_result is not None:
        line["toolUseResult"] = record.tool_use_result
    return line


def jsonl_lines(records: Iterable[StoredRecord]) -> Iterator[str]:
    """The JSONL export, one line per record (no trailing newline on each)."""
    for record in records:
        yield json_line(envelope(record))


def _indent(text: str, prefix: str = "    ") -> list[str]:
    return [prefix + line for line in (text.splitlines() or [""])]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content
        )
    return json.dumps(content, ensure_ascii=False)


def _preview(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit} more characters; --jsonl has them all)"


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _nested_calls(audit: Any, limit: int) -> list[str]:
    calls = audit.get("nested_calls") if isinstance(audit, dict) else None
    if not isinstance(calls, list) or not calls:
        return []
    lines = [f"  nested calls ({len(calls)}):"]
    for call in calls:
        if not isinstance(call, dict):
            continue
        flags = [
            "error" if call.get("is_error") else "ok",
            *(["MUTATING"] if call.get("mutating") else []),
            f"{call.get('bytes', 0)} B",
            # waited for a slot of its server's max_concurrent
            *([f"queued {call['queue_ms']:.0f} ms"] if _positive(call.get("queue_ms")) else []),
        ]
        arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
        if len(arguments) > limit:  # cut as a result is: one line, not megabytes
            more = len(arguments) - limit
            arguments = f"{arguments[:limit]}… ({more} more characters; --jsonl has them all)"
        lines.append(f"    {call.get('tool')}({arguments}) — {', '.join(flags)}")
    return lines


def run_line(run_id: str, status: str, metrics: RunMetrics) -> str:
    """One line on a run: its status, where its seconds went (the split its row keeps,
    issue 31), its rounds and tokens. A run from before the split says so."""
    m, split = metrics, metrics.split
    tokens = f"{m.rounds} rounds, {m.prompt_tokens:,}+{m.completion_tokens:,} tokens"
    if not split:
        return f"── run {run_id[:12]} {status}: {tokens} (no time split recorded)"

    def s(part: str) -> str:
        return f"{split.get(part, 0.0):.2f}"

    model = sum(split.get(p, 0.0) for p in ("model_slot", "prompt_eval", "generation"))
    return (
        f"── run {run_id[:12]} {status} in {s('total')} s: model {model:.2f} "
        f"(slot {s('model_slot')}, prompt {s('prompt_eval')}, generation {s('generation')})"
        f" · sandbox {s('sandbox')} · tools {s('tools')} · approvals {s('approvals')}"
        f" · daemon {s('daemon')} · {tokens}"
    )


def text_lines(
    records: Iterable[StoredRecord],
    *,
    result_chars: int = RESULT_PREVIEW_CHARS,
    runs: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """A human-readable transcript: who said what, the code the model ran, what came back;
    ``runs`` (a line by run id, :func:`run_line`) ends each run's records. Each line is
    :func:`printable`: a stored text (a prompt, a tool call's id, a result) cannot drive
    the terminal or start a line that looks like another turn."""
    for line in _text_lines(records, result_chars, runs or {}):
        yield printable(line)


def _text_lines(
    records: Iterable[StoredRecord], result_chars: int, runs: Mapping[str, str]
) -> Iterator[str]:
    current: str | None = None
    for record in records:
        if record.run_id != current:
            if current is not None and current in runs:
                yield runs[current]
                yield ""
            current = record.run_id
        when = record.timestamp.replace("T", " ").rstrip("Z")[:19]
        content = record.message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks or []:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if not str(block.get("text", "")).strip():
                    continue
                yield f"[{when}] {record.type}:"
                yield from _indent(str(block["text"]))
            elif kind == "tool_use":
                yield f"[{when}] assistant → {block.get('name')} ({block.get('id')}):"
                arguments = block.get("input") or {}
                if isinstance(arguments, dict) and isinstance(arguments.get("code"), str):
                    yield from _indent(arguments["code"])
                    others = {k: v for k, v in arguments.items() if k != "code"}
                    if others:
                        yield from _indent(json.dumps(others, ensure_ascii=False))
                else:
                    yield from _indent(json.dumps(arguments, ensure_ascii=False, indent=2))
            elif kind == "tool_result":
                status = "error" if block.get("is_error") else "ok"
                yield f"[{when}] result of {block.get('tool_use_id')} ({status}):"
                yield from _indent(_preview(_result_text(block.get("content")), result_chars))
                yield from _nested_calls(record.tool_use_result, result_chars)
            else:
                yield f"[{when}] {record.type}: ({kind} block)"
        yield ""
    if current is not None and current in runs:
        yield runs[current]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    if isinstance(value, str) and text.startswith(_FORMULA_START):
        return "'" + text
    return text


def audit_csv_lines(entries: Iterable[AuditEntry]) -> Iterator[str]:
    """The audit as CSV (RFC 4180, ``\\r\\n`` line ends): the header, then one line per
    call with its arguments as JSON; text a spreadsheet would run as a formula is
    written as text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(AUDIT_CSV_COLUMNS)
    yield buffer.getvalue()
    for entry in entries:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([_cell(getattr(entry, name)) for name in AUDIT_CSV_COLUMNS])
        yield buffer.getvalue()
