"""A counter of the jobs a real ``Store`` hands its writer's thread (one per transaction).

Not a fake: it wraps the store's own hand-off and lets every job through, so a test
can say how many transactions a prompt cost (issue 31) on the real database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sessions import Store

__all__ = ["count_jobs", "trace_statements"]


def count_jobs(store: Store) -> list[Any]:
    """The jobs that go to the writer's thread from now on (one hand-off each)."""
    db = store.connection._writer
    assert db is not None
    calls: list[Any] = []
    queue = db._execute

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await queue(fn, *args, **kwargs)

    db._execute = counted  # type: ignore[method-assign]  # count what goes to the thread
    return calls


async def trace_statements(store: Store) -> list[str]:
    """The SQL statements the store's writer runs from now on (sqlite3's trace callback,
    set on the writer's own thread)."""
    db = store.connection._writer
    assert db is not None
    statements: list[str] = []
    await db.set_trace_callback(statements.append)
    return statements
