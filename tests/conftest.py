"""Shared fixtures. Area fixtures live in their test modules or tests/fakes/."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pydantic_monty import AsyncMonty


@pytest.fixture(scope="session")
async def monty_pool() -> AsyncIterator[AsyncMonty]:
    """One Monty worker pool for the whole test session, sized for the default limits.

    Pass it as ``CodeModeToolExecutor(..., pool=monty_pool)``: the executor
    then uses it without closing it. Closing it lets the loop breathe before
    the interpreter exits (notes/monty.md §10).
    """
    from daemon.code_mode.limits import CodeModeLimits
    from daemon.code_mode.pool import close_pool, create_pool

    pool = create_pool(CodeModeLimits())
    await pool.__aenter__()
    try:
        yield pool
    finally:
        await close_pool(pool)


_exit_status: int | None = None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remember the exit status for :func:`pytest_unconfigure`."""
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit without interpreter finalization once pytest has said everything.

    pydantic-monty 1.4's tokio threads can abort (notes/monty.md §10) or hang
    in futex waits while CPython finalizes, after every test has passed and the
    summary is printed; a hung process would turn a green run into a CI
    timeout. Every fixture has closed its pools and processes by now, so
    skipping finalization loses nothing.
    """
    if _exit_status is None:
        return
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
