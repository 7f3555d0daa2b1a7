"""Nested tool calls: one sandbox call → one inner ``call_tool``, logged and audited.

Each call is bounded by ``limits.tool_timeout`` and answered into the sandbox
per spec 0004's nested-result table:

| inner outcome                | sandbox sees                                  |
|------------------------------|-----------------------------------------------|
| ``is_error``                 | ``RuntimeError(<text>)``, catchable           |
| JSON text, or ``structured`` when there is no text | the parsed value        |
| other text                   | ``str``                                       |
| ``ToolTransportError``       | ``RuntimeError("tool error: ...")``           |
| no answer in ``tool_timeout``| ``RuntimeError("tool X timed out after 120s")`` |

Every call that reaches the inner executor, finished or dropped, becomes one
:class:`daemon.tools.AuditEntry` (spec A7); the optional observer sees each
entry as its call ends. Calls are logged as ``mcp.tool_call`` / ``mcp.tool_result`` with
``via="code_mode"``: at ``info``, or at ``warning`` with ``mutating=True``
when the tool may change something (A6: always on).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic_monty import ExternalExceptionData, ExternalSettledResult

from daemon.code_mode.catalog import CatalogEntry
from daemon.code_mode.convert import log_content, nested_value, result_bytes
from daemon.code_mode.limits import CodeModeLimits
from daemon.tools import (
    AuditEntry,
    AuditObserver,
    ToolCallOutput,
    ToolExecutor,
    ToolTransportError,
)

__all__ = ["NestedCalls"]

log = structlog.get_logger("asyncai.code_mode")

# An observer commits an audit row; it gets this long before the snippet moves on.
OBSERVER_TIMEOUT = 10.0


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _runtime_error(message: str) -> ExternalExceptionData:
    return {"exc_type": "RuntimeError", "message": message}


class NestedCalls:
    """Runs the nested calls of one ``run_code`` call and keeps their audit entries."""

    def __init__(
        self,
        inner: ToolExecutor,
        limits: CodeModeLimits,
        *,
        thread_id: str | None,
        observer: AuditObserver | None = None,
    ):
        self._inner = inner
        self._limits = limits
        self._thread_id = thread_id
        self._observer = observer
        self.entries: list[AuditEntry] = []

    async def run(self, entry: CatalogEntry, arguments: dict) -> ExternalSettledResult:
        """Call the tool; return the settled answer for the sandbox (never raises but cancel)."""
        tool = entry.tool_name
        mutating = entry.definition.mutating
        started, t0 = _utc_now(), time.monotonic()
        self._log("mcp.tool_call", mutating, via="code_mode", tool=tool, arguments=arguments)
        output: ToolCallOutput | None = None
        try:
            async with asyncio.timeout(self._limits.tool_timeout) as deadline:
                output = await self._inner.call_tool(tool, arguments)
        except asyncio.CancelledError:
            # dropped: max_wall, the snippet ended first, or the run was stopped
            await self._finish(tool, arguments, mutating, started, t0, True, 0, "call dropped")
            raise
        except TimeoutError:
            if not deadline.expired():
                message = f"tool error: {tool} raised TimeoutError"
            else:
                message = f"tool {tool} timed out after {self._limits.tool_timeout:g}s"
            await self._finish(tool, arguments, mutating, started, t0, True, 0, message)
            return _runtime_error(message)
        except ToolTransportError as exc:
            message = f"tool error: {exc}"
            await self._finish(tool, arguments, mutating, started, t0, True, 0, message)
            return _runtime_error(message)
        except Exception as exc:
            # a broken inner executor must not take the snippet down with it
            log.exception("code_mode.inner_failed", tool=tool)
            message = f"tool error: {type(exc).__name__}: {exc}"
            await self._finish(tool, arguments, mutating, started, t0, True, 0, message)
            return _runtime_error(message)

        nbytes = result_bytes(output)
        await self._finish(
            tool, arguments, mutating, started, t0, output.is_error, nbytes, log_content(output)
        )
        if output.is_error:
            return _runtime_error(output.content or f"tool {tool} failed")
        return {"return_value": nested_value(output)}

    def _log(self, event: str, mutating: bool, **fields: Any) -> None:
        if mutating:
            log.warning(event, mutating=True, **fields)
        else:
            log.info(event, **fields)

    async def _finish(
        self,
        tool: str,
        arguments: dict,
        mutating: bool,
        started: str,
        t0: float,
        is_error: bool,
        nbytes: int,
        content: Any,
    ) -> None:
        entry = AuditEntry(
            tool=tool,
            arguments=arguments,
            is_error=is_error,
            bytes=nbytes,
            mutating=mutating,
            started=started,
            duration_ms=round((time.monotonic() - t0) * 1000, 3),
        )
        self.entries.append(entry)
        self._log(
            "mcp.tool_result",
            mutating,
            via="code_mode",
            tool=tool,
            is_error=is_error,
            bytes=nbytes,
            content=content,
        )
        if self._observer is None:
            return
        try:
            async with asyncio.timeout(OBSERVER_TIMEOUT):
                maybe = self._observer(self._thread_id, entry)
                if inspect.isawaitable(maybe):
                    await maybe
        except Exception:
            # the audit sink failing must not break the snippet; the log keeps the entry
            log.exception("code_mode.observer_failed", tool=tool, entry=entry)
