"""The host loop: drives one snippet through a Monty checkout (spec 0004, Engine loop).

DESIGN.md's adaptation to pydantic-monty 1.4:

| Monty suspension                          | host answer                                   |
|-------------------------------------------|-----------------------------------------------|
| name lookup of a catalog name             | a host function of that name                  |
| name lookup otherwise                     | nothing → ``NameError``                       |
| function call, catalog name, valid args   | ``{'future': ...}``; the call waits to be awaited |
| function call, invalid args               | the catalog's ``CallRejected`` (``TypeError``)|
| function call past the nested-call budget | ``RuntimeError: nested tool call budget exceeded`` |
| function call, unknown name               | ``NameError``                                 |
| OS call ``import`` / ``import_stubs``     | ``resume_auto()`` (stdlib imports work)       |
| any other OS call                         | ``PermissionError: os access disabled ...``   |
| future snapshot                           | start every newly awaited call at once; wait  |
|                                           | for ≥1 to finish; resume with all finished    |
| past ``max_suspensions`` suspensions      | stop; the checkout is discarded               |

A nested call starts only when its id appears among a future snapshot's
``pending_call_ids``, i.e. when the sandbox awaits it: gathered calls run
concurrently, and a call that is never awaited never runs (the return
contract then asks for ``await``).

The outcome says whether the checkout must be discarded ("reset"): after a
time-limit ``TimeoutError``, a heap ``MemoryError``, a crashed worker, or a
blown suspension budget. A breach of the print cap keeps it, unless Monty
itself ended the checkout (it does when the overflowing output is flushed
just before a host call).
"""

from __future__ import annotations

import asyncio
import typing
from dataclasses import dataclass, field
from typing import Any

import pydantic_monty
import structlog
from pydantic_monty import (
    AsyncFunctionSnapshot,
    AsyncFutureSnapshot,
    AsyncMontySession,
    ExcType,
    ExternalExceptionData,
    ExternalSettledResult,
    MontyComplete,
    MontyCrashedError,
    MontyError,
    MontyRuntimeError,
    MontySyntaxError,
)

from daemon.code_mode.catalog import CallRejected, Catalog, CatalogEntry
from daemon.code_mode.convert import to_json_value
from daemon.code_mode.limits import CodeModeLimits
from daemon.code_mode.nested import NestedCalls

__all__ = ["OS_DENIED", "PrintSink", "SnippetOutcome", "SnippetRun"]

log = structlog.get_logger("asyncai.code_mode")

OS_DENIED = "os access disabled in asyncai code mode"
_AUTO_OS_CALLS = frozenset({"import", "import_stubs"})
_EXC_TYPES = frozenset(typing.get_args(pydantic_monty.ExcType))
# Tool calls are bounded by tool_timeout each; this only guards the engine's
# own wait against a task that never settles.
_WAIT_SLACK = 30.0


@dataclass
class SnippetOutcome:
    """How one snippet ended: its value and prints, or an error; and whether to reset."""

    value: Any = None
    prints: str = ""
    error: str | None = None
    reset: bool = False  # the checkout was discarded after this snippet
    fresh: bool = False  # the snippet ran in a newly checked-out (empty) REPL
    unawaited: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the snippet completed without an error."""
        return self.error is None


class PrintSink:
    """Collects ``print()`` output up to ``max_bytes``; past it, fails the feed.

    Raising ``MemoryError`` from the callback makes Monty abort the feed with
    that error; the flag tells it apart from a heap ``MemoryError``, which
    resets the scope where this one does not.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.used = 0
        self.overflowed = False
        self._parts: list[str] = []

    def __call__(self, stream: str, text: str) -> None:
        """Monty's ``print_callback``: ``stream`` is ``'stdout'`` or ``'stderr'``."""
        size = len(text.encode())
        if self.used + size > self.max_bytes:
            self.overflowed = True
            raise MemoryError(
                f"print output exceeded the {self.max_bytes:,}-byte cap; print less "
                "(a summary, a count) or return a value"
            )
        self.used += size
        self._parts.append(text)

    @property
    def text(self) -> str:
        """Everything printed so far, stdout and stderr interleaved."""
        return "".join(self._parts)


@dataclass
class _PendingCall:
    entry: CatalogEntry
    py_name: str
    arguments: dict


def _sandbox_function(name: str) -> Any:
    """A host function the sandbox can hold by ``name``; calls to it arrive as snapshots."""

    async def catalog_function(**kwargs: Any) -> None:  # pragma: no cover - never called
        raise AssertionError("catalog functions are dispatched by the engine")

    catalog_function.__name__ = catalog_function.__qualname__ = name
    return catalog_function


def _exception(exc_type: str, message: str) -> ExternalExceptionData:
    known = typing.cast(ExcType, exc_type) if exc_type in _EXC_TYPES else "TypeError"
    return {"exc_type": known, "message": message}


class _Reset(Exception):
    """Stop driving; the checkout cannot be used again."""


class SnippetRun:
    """Drives one snippet (or the scope preamble) through a checked-out session."""

    def __init__(self, catalog: Catalog, limits: CodeModeLimits, nested: NestedCalls):
        self._catalog = catalog
        self._limits = limits
        self._nested = nested
        self.suspensions = 0
        self.nested_calls = 0
        self._pending: dict[int, _PendingCall] = {}  # called, not yet awaited
        # awaited, not yet delivered
        self._tasks: dict[int, asyncio.Task[ExternalSettledResult]] = {}

    async def drive(self, session: AsyncMontySession, code: str) -> SnippetOutcome:
        """Run ``code`` to completion or failure. Cancellation leaves the session unusable."""
        sink = PrintSink(self._limits.max_print_bytes)
        outcome = SnippetOutcome()
        try:
            snap = await session.feed_start(code, print_callback=sink)
            while not isinstance(snap, MontyComplete):
                self.suspensions += 1
                if self.suspensions > self._limits.max_suspensions:
                    raise _Reset(
                        "RuntimeError: suspension budget exceeded: more than "
                        f"{self._limits.max_suspensions:,} host round trips (tool calls, "
                        "awaits, name lookups) in one snippet"
                    )
                if isinstance(snap, AsyncFunctionSnapshot):
                    snap = await self._on_function(snap)
                elif isinstance(snap, AsyncFutureSnapshot):
                    snap = await self._on_future(snap)
                else:
                    snap = await self._on_name_lookup(snap)
            outcome.value = snap.output
            outcome.unawaited = [c.py_name for c in self._pending.values()]
        except _Reset as exc:
            outcome.error, outcome.reset = str(exc), True
        except MontySyntaxError as exc:
            outcome.error = exc.display()
        except MontyRuntimeError as exc:
            outcome.error, outcome.reset = self._runtime_error(exc, sink)
        except MontyCrashedError as exc:
            outcome.error, outcome.reset = f"the sandbox worker died: {exc}", True
        except MontyError as exc:
            # conversion and typing errors: the snippet did not run to completion,
            # the worker is fine
            outcome.error = f"{type(exc).__name__}: {exc}"
        except RuntimeError as exc:
            # pydantic_monty's own plain RuntimeErrors ("this checkout has already
            # been finished", protocol errors) mean the checkout is unusable
            log.warning("code_mode.session_error", error=str(exc))
            outcome.error, outcome.reset = f"the sandbox session failed: {exc}", True
        finally:
            await self._cancel_tasks()
        if outcome.error is not None:
            outcome.unawaited = [c.py_name for c in self._pending.values()]
            if not outcome.reset and session.worker_pid is None:
                outcome.reset = True  # Monty ended the checkout on its own
        outcome.prints = sink.text
        return outcome

    def _runtime_error(self, exc: MontyRuntimeError, sink: PrintSink) -> tuple[str, bool]:
        text = exc.display()
        inner = exc.exception()
        if isinstance(inner, MemoryError):
            if sink.overflowed:
                return text, False
            return (
                f"{text}\nThe sandbox heap is capped at {self._limits.max_memory:,} bytes.",
                True,
            )
        message = str(inner)
        if isinstance(inner, TimeoutError) and "limit exceeded" in message:
            return (
                f"{text}\nThe snippet ran longer than the {self._limits.max_feed_duration:g}s "
                "execution limit (time waiting for tools is not counted).",
                True,
            )
        return text, False

    async def _on_function(self, snap: AsyncFunctionSnapshot) -> Any:
        name = str(snap.function_name)
        if snap.is_os_function:
            if name in _AUTO_OS_CALLS:
                return await snap.resume_auto()
            return await snap.resume(_exception("PermissionError", OS_DENIED))
        entry = self._catalog.lookup(name)
        if entry is None:
            return await snap.resume(_exception("NameError", f"name '{name}' is not defined"))
        try:
            arguments = self._catalog.validate(entry, tuple(snap.args), dict(snap.kwargs))
        except CallRejected as exc:
            return await snap.resume(_exception(exc.exc_type, exc.message))
        if self.nested_calls >= self._limits.max_nested_calls:
            return await snap.resume(
                _exception(
                    "RuntimeError",
                    f"nested tool call budget exceeded: at most "
                    f"{self._limits.max_nested_calls} tool calls per snippet",
                )
            )
        self.nested_calls += 1
        self._pending[snap.call_id] = _PendingCall(entry, name, to_json_value(arguments))
        return await snap.resume({"future": ...})

    async def _on_future(self, snap: AsyncFutureSnapshot) -> Any:
        ids = list(snap.pending_call_ids)
        results: dict[int, ExternalSettledResult] = {}
        for cid in ids:
            if cid in self._tasks:
                continue
            call = self._pending.pop(cid, None)
            if call is None:
                # an awaitable kept from an earlier snippet: its call id is stale
                results[cid] = _exception(
                    "RuntimeError", "this call was made in an earlier snippet; call it again"
                )
                continue
            # the sandbox awaits it now: start it, alongside every other awaited call
            self._tasks[cid] = asyncio.create_task(
                self._nested.run(call.entry, call.arguments), name=f"code_mode:{call.py_name}"
            )
        if not results:
            waiting = [self._tasks[cid] for cid in ids if cid in self._tasks]
            done, _ = await asyncio.wait(
                waiting,
                timeout=self._limits.tool_timeout + _WAIT_SLACK,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                raise _Reset("RuntimeError: tool calls did not settle within their timeout")
        for cid in ids:
            task = self._tasks.get(cid)
            if task is not None and task.done():
                del self._tasks[cid]
                results[cid] = task.result()
        return await snap.resume(results)

    async def _on_name_lookup(self, snap: Any) -> Any:
        name = snap.variable_name
        if self._catalog.lookup(name) is not None:
            return await snap.resume(value=_sandbox_function(name))
        return await snap.resume()

    async def _cancel_tasks(self) -> None:
        """Drop calls still in flight (the snippet ended or was stopped without them)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
