"""Structured logging: NDJSON on stderr, secrets redacted, content made readable.

``configure_logging(verbose)`` sets up structlog (and routes the standard
library's ``logging``, which openai, httpx2 and mcp use, into the same
stream). Each line is one JSON object::

    {"timestamp": "2026-11-29T18:00:00.123456Z", "level": "info",
     "logger": "asyncai.backend", "event": "model.tool_call", "tool": "run_code", ...}

The level is ``warning`` by default and ``info`` with ``--verbose``. Mutating
nested calls are logged at warning (spec A6), so they appear without
``--verbose``; the model and MCP call events are info.

Loggers are named: ``structlog.get_logger("asyncai.code_mode")`` gives
``"logger": "asyncai.code_mode"``. Used names: ``asyncai.backend`` (``model.*``
events), ``asyncai.code_mode`` (``mcp.*`` events with ``via: "code_mode"``),
``asyncai.mcp`` (the MCP client).

Redaction happens in the last processor, so nothing reaches the stream
unfiltered: values under keys named like ``api_key``, ``token``,
``authorization``, ``password`` or ``secret`` (at any depth) become
``"[REDACTED]"``, and registered secret values (the configured API key and
channel token), ``Bearer …`` credentials and ``sk-…`` keys are cut out of
every string.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = [
    "REDACTED",
    "configure_logging",
    "log_content",
    "redact",
    "redact_text",
    "register_secret",
    "reset_logging",
]

REDACTED = "[REDACTED]"

# A key is secret when its last word is one of these (``prompt_tokens`` is not: plural).
_SECRET_KEY = re.compile(
    r"(?:^|[_\-.])(?:api[_\-]?key|apikey|token|authorization|password|passwd|secret|cookie)$",
    re.IGNORECASE,
)
# Credentials recognisable by shape, whoever logs them.
_SECRET_SHAPES = re.compile(r"(?i)(?<=bearer )[^\s\"',]+|\bsk-[A-Za-z0-9_\-]{16,}")
# Shorter values would cut ordinary words out of log lines.
_MIN_SECRET_LEN = 6

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Never print ``value`` (an API key, a token) in any log line from now on."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _secrets.add(value)


def _scrub(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _SECRET_SHAPES.sub(REDACTED, text)


def redact_text(text: str) -> str:
    """``text`` with registered secrets and credential shapes cut out, as in every log line
    (a trace's snippet attribute goes by the same rules)."""
    return _scrub(text)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and _SECRET_KEY.search(k) and value[k]
            else _redact_value(value[k])
            for k in value
        }
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


def redact(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: secrets out of every key and string, at any depth."""
    return _redact_value(dict(event_dict))


def add_logger_name(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: ``logger`` from the name given to ``get_logger`` (or stdlib's)."""
    name = getattr(logger, "name", None)
    if name and "logger" not in event_dict:
        event_dict["logger"] = name
    return event_dict


_FIRST = ("timestamp", "level", "logger", "event")


def _order(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """The fixed keys first, so lines read well before they are parsed."""
    out = {k: event_dict[k] for k in _FIRST if k in event_dict}
    out.update((k, v) for k, v in event_dict.items() if k not in out)
    return out


def log_content(content: Any, *, limit: int = 2000, max_json: int = 100_000) -> Any:
    """Tool content as a log field: the decoded JSON when it parses, else truncated text.

    JSON longer than ``max_json`` characters is not decoded (a megabyte of
    Kubernetes objects does not belong in one log line); text past ``limit``
    characters ends with ``…[N chars]`` giving the full length.
    """
    if not isinstance(content, str):
        return content
    if len(content) <= max_json:
        try:
            return json.loads(content)
        except ValueError:
            pass
    if len(content) <= limit:
        return content
    return content[:limit] + f"…[{len(content)} chars]"


class _NamedWriteLogger(structlog.WriteLogger):
    """A WriteLogger that remembers the name given to ``get_logger``."""

    def __init__(self, file: TextIO, name: str | None):
        super().__init__(file)
        self.name = name


class _NamedWriteLoggerFactory:
    def __init__(self, file: TextIO):
        self._file = file

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        return _NamedWriteLogger(self._file, str(args[0]) if args else None)


_handler: logging.Handler | None = None


def configure_logging(
    verbose: bool = False,
    stream: TextIO | None = None,
    *,
    secrets: Iterable[str | None] = (),
) -> None:
    """Log NDJSON to ``stream`` (default stderr): info with ``verbose``, else warning.

    ``secrets`` are registered with :func:`register_secret`. Calling it again
    replaces the previous setup (tests do; :func:`reset_logging` undoes it).
    """
    global _handler
    stream = sys.stderr if stream is None else stream
    for s in secrets:
        register_secret(s)
    level = logging.INFO if verbose else logging.WARNING
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    tail: list[structlog.typing.Processor] = [
        redact,
        _order,
        structlog.processors.JSONRenderer(ensure_ascii=False),
    ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            add_logger_name,
            timestamper,
            structlog.processors.format_exc_info,
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_NamedWriteLoggerFactory(stream),
        # module-level loggers must follow a later configure_logging (tests, `ask` then `serve`)
        cache_logger_on_first_use=False,
    )
    # The libraries below log through the standard library: same stream, same shape.
    # Their info lines (one per HTTP request) are noise even with --verbose.
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream)
    _handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.processors.add_log_level,
                structlog.stdlib.add_logger_name,  # the record's name
                timestamper,
                structlog.processors.format_exc_info,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
        )
    )
    _handler.setLevel(logging.WARNING)
    root.addHandler(_handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)


def reset_logging() -> None:
    """Undo :func:`configure_logging`: structlog defaults, handler removed, secrets forgotten."""
    global _handler
    structlog.reset_defaults()
    if _handler is not None:
        logging.getLogger().removeHandler(_handler)
        _handler = None
    _secrets.clear()
