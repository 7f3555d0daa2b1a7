"""Structured logging: NDJSON lines, levels, logger names, redaction, readable content."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import structlog

from daemon.logging import REDACTED, configure_logging, log_content, reset_logging

SECRET = "sk-configured-key-000111222"


@pytest.fixture
def logs() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """(quiet, verbose) streams; configure one per test with ``use``."""
    yield io.StringIO(), io.StringIO()
    reset_logging()


def lines(stream: io.StringIO) -> list[dict]:
    """Every line parsed; each must be exactly one JSON object."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_default_level_is_warning_and_verbose_adds_info(logs):
    """Without --verbose only warnings and errors; with it, info too."""
    quiet, verbose = logs
    log = structlog.get_logger("asyncai.backend")
    configure_logging(False, quiet)
    log.info("model.tool_call", tool="run_code")
    log.warning("model.request_retry", attempt=1)
    configure_logging(True, verbose)
    log.info("model.tool_call", tool="run_code")
    log.debug("model.debug")
    assert [e["event"] for e in lines(quiet)] == ["model.request_retry"]
    assert [e["event"] for e in lines(verbose)] == ["model.tool_call"]


def test_each_line_has_an_iso_utc_timestamp_level_logger_and_event_first(logs):
    """The fixed keys lead every line; the timestamp is ISO 8601 in UTC."""
    stream, _ = logs
    configure_logging(True, stream)
    structlog.get_logger("asyncai.code_mode").warning(
        "mcp.tool_call", via="code_mode", tool="delete_object", mutating=True
    )
    (line,) = stream.getvalue().splitlines()
    event = json.loads(line)
    assert list(event)[:4] == ["timestamp", "level", "logger", "event"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["timestamp"])
    assert event == {
        "timestamp": event["timestamp"],
        "level": "warning",
        "logger": "asyncai.code_mode",
        "event": "mcp.tool_call",
        "via": "code_mode",
        "tool": "delete_object",
        "mutating": True,
    }


def test_context_variables_join_every_line(logs):
    """Fields bound with structlog.contextvars (run id, thread) appear on each event."""
    stream, _ = logs
    configure_logging(True, stream)
    with structlog.contextvars.bound_contextvars(run_id="r1", thread_id="t1"):
        structlog.get_logger("asyncai.runtime").info("run.start")
    (event,) = lines(stream)
    assert (event["run_id"], event["thread_id"]) == ("r1", "t1")


def test_secret_keys_are_redacted_at_any_depth(logs):
    """api_key, token, Authorization… become [REDACTED]; token counts do not."""
    stream, _ = logs
    configure_logging(True, stream)
    structlog.get_logger("asyncai.mcp").info(
        "mcp.server_start",
        api_key="abc",
        env={"GITHUB_TOKEN": "ghp_x", "MODE": "ro"},
        headers=[{"Authorization": "Basic dXNlcjpwYXNz"}, {"x-api-key": "k"}],
        password="hunter2",
        prompt_tokens=12,
        max_tokens=64,
    )
    (event,) = lines(stream)
    assert event["api_key"] == REDACTED
    assert event["env"] == {"GITHUB_TOKEN": REDACTED, "MODE": "ro"}
    assert event["headers"] == [{"Authorization": REDACTED}, {"x-api-key": REDACTED}]
    assert event["password"] == REDACTED
    assert (event["prompt_tokens"], event["max_tokens"]) == (12, 64)


def test_secret_values_are_cut_out_of_every_string(logs):
    """The configured key, Bearer credentials and sk- keys vanish from any text, nested or not."""
    stream, _ = logs
    configure_logging(True, stream, secrets=[SECRET, "", None, "abc"])
    structlog.get_logger("asyncai.backend").info(
        f"saw {SECRET}",
        content={"output": f"KEY={SECRET}", "list": [f"x{SECRET}y"]},
        header="Authorization: Bearer eyJhbGciOi.payload.sig",
        other="sk-proj-abcdefghijklmnopqrstuvwx and more",
        short="abc is too short to be treated as a secret",
    )
    text = stream.getvalue()
    assert SECRET not in text
    assert "eyJhbGciOi" not in text
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in text
    (event,) = lines(stream)
    assert event["event"] == f"saw {REDACTED}"
    assert event["content"] == {"output": f"KEY={REDACTED}", "list": [f"x{REDACTED}y"]}
    assert event["header"] == f"Authorization: Bearer {REDACTED}"
    assert event["short"].startswith("abc is")


def test_exceptions_are_rendered_and_redacted(logs):
    """log.exception puts the traceback in the line, with secrets cut out."""
    stream, _ = logs
    configure_logging(False, stream, secrets=[SECRET])
    try:
        raise RuntimeError(f"request failed with key {SECRET}")
    except RuntimeError:
        structlog.get_logger("asyncai.backend").exception("model.crash")
    (event,) = lines(stream)
    assert "RuntimeError: request failed with key [REDACTED]" in event["exception"]


def test_standard_library_logging_joins_the_stream(logs):
    """openai, httpx2 and mcp log through logging: same NDJSON, redacted, warnings only."""
    stream, _ = logs
    configure_logging(True, stream, secrets=[SECRET])
    logging.getLogger("httpx2").info("HTTP Request: POST /v1/chat/completions")
    logging.getLogger("openai._base_client").warning("retrying with %s", f"Bearer {SECRET}")
    (event,) = lines(stream)
    assert event["logger"] == "openai._base_client"
    assert event["level"] == "warning"
    assert event["event"] == f"retrying with Bearer {REDACTED}"


def test_reset_logging_removes_the_handler(logs):
    """After reset_logging nothing more reaches the old stream."""
    stream, _ = logs
    configure_logging(True, stream)
    reset_logging()
    logging.getLogger("httpx2").warning("after reset")
    assert stream.getvalue() == ""


def test_log_content_decodes_json_and_truncates_text():
    """JSON content becomes a value; long text is cut with its full length; huge JSON stays text."""
    assert log_content('{"a": [1, 2]}') == {"a": [1, 2]}
    assert log_content("plain words") == "plain words"
    long = "x" * 5000
    assert log_content(long) == "x" * 2000 + "…[5000 chars]"
    huge = json.dumps(["item"] * 40_000)
    assert isinstance(log_content(huge), str)
    assert log_content(huge).endswith(f"…[{len(huge)} chars]")
    assert log_content({"already": "decoded"}) == {"already": "decoded"}
    assert log_content("abcdef", limit=3) == "abc…[6 chars]"
