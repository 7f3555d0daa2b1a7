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
