"""Snippets that await every tool call where they make it take Monty's own path (issue 17).

The engine (:mod:`daemon.code_mode.sandbox.engine`) drives a snippet snapshot by
snapshot: a tool call surfaces as a function snapshot, is answered
``future``, surfaces again when awaited, and is answered with its result. That
is two worker round trips per call, plus the Python of two resumes: about 1.8×
what Monty's own path costs (``feed_run`` with ``external_lookup``, where the
worker calls a host coroutine and waits for it in one round trip), whatever
the engine does around them (``bench/code_mode.py``'s floor rows).

Monty's own path cannot do two things the snapshot path does: a call it makes
runs at once, awaited or not (the spec says a call that is never awaited
never runs, and the return contract asks for the ``await``); and a run cannot
pause for a person's approval midway. So a snippet takes it only when neither
can arise, which :func:`direct_ok` decides from the snippet's syntax:

- every name of a catalog tool (public, or a scope wrapper's host name) it
  mentions is called, and that call is the operand of an ``await``, or an
  element (a list, a tuple, a starred or comprehension element) of an
  awaited ``asyncio.gather(...)``/``gather(...)``;
- when the approval gate may hold a tool: it mentions no such tool, no
  ``_asyncai_`` name, and none of :data:`DYNAMIC_NAMES` (``eval``,
  ``locals()``… reach a function by a name built at run time);
- every ``await`` it has awaits a call (``await x`` may hold a call made in
  an earlier snippet, which only the snapshot path can refuse);
- it is at most :data:`MAX_CHECKED_CHARS` long (parsed on the event loop).

These rules only choose the path, they never grant a call: every call asks
the gate where it is made, in :class:`~daemon.code_mode.sandbox.nested.NestedCalls`,
and a call the gate would hold for a person is refused on this path
(``PermissionError``), never made (issue 26).

A scope keeps to the direct path only while every snippet it ran was
eligible (:attr:`~daemon.code_mode.repl.scope.ScopeState.direct`): a function an
ineligible snippet defined may make a call that is never awaited, or one
that needs approval. Anything else (an ineligible snippet, a resumed pause,
the scope preamble, a stored REPL loaded into a new checkout) goes through
the snapshots, so every answer is exactly the engine's, as the tests of both
paths check.

:class:`DirectFeed` answers what the engine answers: the same validation,
budgets and messages, the same :class:`~daemon.code_mode.sandbox.nested.NestedCalls`
(its audit, logs and observer), the same refusal of OS calls and sleeps; a
call still in flight when the snippet ends is cancelled.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from pydantic_monty import AsyncMontySession

from daemon.code_mode.catalog import CallRejected, Catalog, CatalogEntry, helper_result, is_helper
from daemon.code_mode.convert import ConversionError, sandbox_text, to_json_value
from daemon.code_mode.helpers import PRIVATE_PREFIX
from daemon.code_mode.lazy import TOOL_PREFIX
from daemon.code_mode.sandbox.nested import NestedCalls
from daemon.code_mode.sandbox.prints import PrintSink
from daemon.limits import CodeModeLimits

__all__ = [
    "DYNAMIC_NAMES",
    "MAX_CHECKED_CHARS",
    "OS_DENIED",
    "SLEEP_DENIED",
    "SLEEP_OS_CALLS",
    "DirectFeed",
    "DirectReset",
    "cancel_all",
    "checked_call",
    "direct_names",
    "direct_ok",
    "eligible",
    "public_names",
    "suspension_budget_message",
]

OS_DENIED = "os access disabled in asyncai code mode"
SLEEP_DENIED = (
    "timed sleeps are not available in the asyncai sandbox (asyncio.sleep and time.sleep "
    "cannot wait here). To run tool calls at the same time, await asyncio.gather(...); "
    "to wait for something to change, end this snippet and check again in a later run_code call"
)
SLEEP_OS_CALLS = frozenset({"time.sleep", "asyncio.sleep", "system.sleep", "system.async_sleep"})

# Builtins that reach a function by a name given as text (``eval("append_" + "line")``,
# ``locals()["append_line"]``): with a gate, a snippet naming one takes the snapshots.
DYNAMIC_NAMES = frozenset({"eval", "exec", "locals", "globals", "vars", "getattr", "dir"})
_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
# Where a gathered call may sit between itself and ``gather(...)``.
_CONTAINERS = (ast.List, ast.Tuple, ast.Starred, ast.ListComp, ast.GeneratorExp)


def suspension_budget_message(limits: CodeModeLimits) -> str:
    """The error of a snippet past ``max_suspensions`` (both paths; the checkout is reset)."""
    return (
        "RuntimeError: suspension budget exceeded: more than "
        f"{limits.max_suspensions:,} host round trips (tool calls, "
        "awaits, name lookups) in one snippet"
    )


def checked_call(
    catalog: Catalog,
    limits: CodeModeLimits,
    made: int,
    entry: CatalogEntry,
    args: tuple,
    kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """The arguments of a call of ``entry`` as the snippet makes it, checked in order:
    the catalog's validation, the nested-call budget (``made`` calls so far), their
    conversion to JSON. A refusal is :class:`CallRejected`, raised in the sandbox (both paths).
    """
    arguments = catalog.validate(entry, args, kwargs)
    if made >= limits.max_nested_calls:
        raise CallRejected(
            "RuntimeError",
            f"nested tool call budget exceeded: at most "
            f"{limits.max_nested_calls} tool calls per snippet",
        )
    try:
        return to_json_value(arguments)
    except ConversionError as exc:
        raise CallRejected("ValueError", f"{entry.py_name}(): an argument: {exc}") from None


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` still running and wait for them to end (their audit says cancelled)."""
    running = [t for t in tasks if not t.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)


class DirectReset(Exception):
    """The snippet blew its suspension budget: it was stopped; the checkout cannot be used again."""


@functools.lru_cache(maxsize=4)
def direct_names(catalog: Catalog, gated: bool) -> tuple[frozenset[str], frozenset[str]]:
    """:func:`direct_ok`'s ``names`` and ``gated`` for ``catalog`` (``gated``: there is a gate).

    Cached: a catalog is built once per tool listing and never changes.
    """
    names = public_names(catalog.entries)
    if not gated:
        return names, frozenset()
    mutating = public_names(n for n, e in catalog.entries.items() if e.definition.mutating)
    return names, mutating


def eligible(code: str, catalog: Catalog, gate: bool) -> bool:
    """:func:`direct_ok` for ``catalog``'s tools (``gate``: an approval gate judges calls)."""
    names, gated = direct_names(catalog, gate)
    return direct_ok(code, names, gated)


# A longer snippet is not parsed here, on the event loop (the pre-run check parses long
# ones in a thread): it takes the snapshots, whose cost per call matters less beside it.
MAX_CHECKED_CHARS = 16_384


@functools.lru_cache(maxsize=64)
def direct_ok(code: str, names: frozenset[str], gated: frozenset[str]) -> bool:
    """Whether ``code`` may run on Monty's own host-call path (the module docstring's rules).

    ``names``: every sandbox name that reaches a tool (public and wrapper
    names); ``gated``: those of tools an approval gate judges. A snippet that
    does not parse is not eligible (the snapshot path reports its error).
    """
    if len(code) > MAX_CHECKED_CHARS:
        return False
    try:
        tree = compile(code, "<snippet>", "exec", flags=_FLAGS, dont_inherit=True)
        return _Checker(names, gated).ok(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


class _Checker:
    """One walk of a snippet's tree with each node's parent (``ast`` keeps none)."""

    def __init__(self, names: frozenset[str], gated: frozenset[str]):
        self._names = names
        self._gated = gated
        self._parent: dict[ast.AST, ast.AST] = {}

    def ok(self, tree: ast.AST) -> bool:
        nodes: list[ast.AST] = [tree]
        while nodes:
            node = nodes.pop()
            for child in ast.iter_child_nodes(node):
                self._parent[child] = node
                nodes.append(child)
            if isinstance(node, ast.Await) and not isinstance(node.value, ast.Call):
                return False
            if not isinstance(node, ast.Name):
                continue
            if node.id in self._names and (node.id in self._gated or not self._awaited_call(node)):
                return False
            if self._gated and (node.id in DYNAMIC_NAMES or node.id.startswith(PRIVATE_PREFIX)):
                return False
        return True

    def _awaited_call(self, name: ast.Name) -> bool:
        call = self._parent.get(name)
        if not (isinstance(call, ast.Call) and call.func is name):
            return False
        above = self._parent.get(call)
        if isinstance(above, ast.Await):
            return True
        node: ast.AST = call
        while isinstance(above, _CONTAINERS):
            if isinstance(above, (ast.ListComp, ast.GeneratorExp)) and above.elt is not node:
                return False  # in a comprehension's `for`/`if`, not its element
            node, above = above, self._parent.get(above)
        return (
            isinstance(above, ast.Call)
            and node in above.args
            and _is_gather(above.func)
            and isinstance(self._parent.get(above), ast.Await)
        )


def _is_gather(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return (
            func.attr == "gather"
            and isinstance(func.value, ast.Name)
            and (func.value.id == "asyncio")
        )
    return isinstance(func, ast.Name) and func.id == "gather"


def _raise(answer: Mapping[str, Any]) -> Any:
    """The value of a settled answer, or its exception raised (it crosses by type name)."""
    if "return_value" in answer:
        return answer["return_value"]
    exc_type = getattr(builtins, str(answer.get("exc_type")), None)
    if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
        exc_type = TypeError
    raise exc_type(answer.get("message", ""))


class DirectFeed:
    """Runs one eligible snippet with ``feed_run``; answers as the snapshot engine would.

    ``suspensions`` and ``nested_calls`` count as the engine's do (host
    round trips; tool calls made).
    """

    def __init__(
        self, catalog: Catalog, limits: CodeModeLimits, nested: NestedCalls, sink: PrintSink
    ):
        self._catalog = catalog
        self._limits = limits
        self._nested = nested
        self._sink = sink
        self.suspensions = 0
        self.nested_calls = 0
        self._blown: str | None = None
        self._feed: asyncio.Future[Any] | None = None
        self._calls: set[asyncio.Task[Any]] = set()

    async def run(self, session: AsyncMontySession, code: str) -> Any:
        """The snippet's value; Monty's errors raise as from the snapshot path."""
        lookup = self._lookup(session)
        feed = self._feed = asyncio.ensure_future(
            session.feed_run(code, external_lookup=lookup, print_callback=self._sink, os=self._os)
        )
        try:
            return await feed
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._blown is None or (task is not None and task.cancelling()):
                raise  # stopped from outside (max_wall, !stop, shutdown)
            raise DirectReset(self._blown) from None
        finally:
            await self._cancel_calls()

    def _lookup(self, session: AsyncMontySession) -> dict[str, Callable[..., Any]]:
        """A host function for every name that reaches a tool, or a helper."""
        lookup: dict[str, Callable[..., Any]] = {}
        for name in self._catalog.entries:
            lookup[name] = self._tool(name, False)
            lookup[TOOL_PREFIX + name] = self._tool(name, True)
        for helper in _HELPERS:
            if is_helper(self._catalog, helper):
                lookup[helper] = self._helper(helper)
        return lookup

    # The sandbox's arguments are the function's whole signature (a tool may take a
    # keyword called `name`), so each host function closes over what it stands for.
    # A host function that returns a coroutine is awaited like an ``async def`` one; checking
    # before the coroutine exists raises a refused call where it is made, as the snapshots do.
    def _tool(self, name: str, wrapped: bool) -> Callable[..., Any]:
        entry, call = self._catalog.lookup(name), self._call
        assert entry is not None  # the lookup holds only catalog names

        def tool(*args: Any, **kwargs: Any) -> Any:
            return call(entry, wrapped, args, kwargs)

        return tool

    def _helper(self, helper: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._count()
            return _raise(helper_result(self._catalog, helper, args, kwargs))

        return call

    def _count(self) -> None:
        """One more host round trip: refused past the budget or the print cap."""
        self.suspensions += 1
        if self.suspensions > self._limits.max_suspensions and self._blown is None:
            self._blown = suspension_budget_message(self._limits)
        if self._blown is not None:
            raise RuntimeError(self._blown)
        if self._sink.overflowed:
            raise MemoryError(self._sink.message)

    def _os(self, *, name: str, **_: Any) -> Any:
        self._count()
        if name in SLEEP_OS_CALLS:
            raise NotImplementedError(SLEEP_DENIED)
        raise PermissionError(OS_DENIED)

    def _call(
        self, entry: CatalogEntry, wrapped: bool, args: tuple, kwargs: dict[str, Any]
    ) -> Coroutine[Any, Any, Any]:
        """The checks the engine makes when a call is made; then the call, to be awaited."""
        if (
            self.suspensions < self._limits.max_suspensions
            and self._blown is None
            and not self._sink.overflowed
        ):
            self.suspensions += 1  # _count(), inline: nearly every call
        else:
            try:
                self._count()
            except RuntimeError:
                if self._blown is None:
                    raise
                # A snippet may catch the error and loop on, and a feed cancelled from
                # inside a host function runs on in the worker: hold the sandbox at this
                # call while the feed is stopped from a task of its own.
                return self._stop()
        try:
            arguments = checked_call(
                self._catalog, self._limits, self.nested_calls, entry, args, kwargs
            )
        except CallRejected as exc:
            return _raise({"exc_type": exc.exc_type, "message": sandbox_text(exc.message)})
        self.nested_calls += 1
        return self._nested.value(entry, arguments, text=wrapped, calls=self._calls)

    async def _stop(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._calls.add(task)  # cancelled at the end, with the calls in flight
        if self._feed is not None:
            self._feed.cancel()
        await asyncio.Event().wait()

    async def _cancel_calls(self) -> None:
        """Drop calls still in flight (the snippet ended, failed or was stopped without them)."""
        calls, self._calls = self._calls, set()
        await cancel_all(calls)


_HELPERS = ("search_tools", "describe")


def public_names(names: Iterable[str]) -> frozenset[str]:
    """Every sandbox name that reaches one of the tools ``names``: public and wrapper names."""
    return frozenset(n for name in names for n in (name, TOOL_PREFIX + name))
