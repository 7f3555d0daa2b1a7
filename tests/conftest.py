"""Shared fixtures. Area fixtures live in their test modules or tests/fakes/."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Generator
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from nats.aio.client import Client
    from pydantic_monty import AsyncMonty

_monty_pool_started = pytest.StashKey[bool]()
"""Set on the config when :func:`monty_pool` started its workers in this run."""


@pytest.fixture(autouse=True)
def _logging_as_found() -> Generator[None, None, None]:
    """Each test leaves the logging configuration as it found it.

    A CLI command run in-process (``main([...])`` under ``capsys``) configures the
    daemon's logging to the stderr of that moment, which pytest closes after the test:
    every later log line then raised ``ValueError`` (I/O on a closed file) wherever it
    was written, so a test far away failed (a guard task that logs before it acts, a
    tool call that logs before it runs) in the order of a whole run only.
    """
    import logging

    import structlog

    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
async def monty_pool(request: pytest.FixtureRequest) -> AsyncIterator[AsyncMonty]:
    """One Monty worker pool for the whole test session, sized for the default limits.

    Pass it as ``CodeModeToolExecutor(..., pool=monty_pool)``: the executor
    then uses it without closing it. Closing it lets the loop breathe before
    the interpreter exits (notes/monty.md §10).
    """
    from daemon.code_mode.sandbox.pool import close_pool, create_pool
    from daemon.limits import CodeModeLimits

    # First: a pool that fails halfway may already have started tokio threads.
    request.config.stash[_monty_pool_started] = True
    pool = create_pool(CodeModeLimits())
    await pool.__aenter__()
    try:
        yield pool
    finally:
        await close_pool(pool)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(
    config: pytest.Config,
) -> Generator[None, int | pytest.ExitCode, int | pytest.ExitCode]:
    """Exit without interpreter finalization once pytest has said everything, if Monty ran.

    pydantic-monty 1.4's tokio threads can abort (notes/monty.md §10) or hang
    in futex waits while CPython finalizes, after every test has passed and the
    summary is printed; a hung process would turn a green run into a CI
    timeout. Every fixture has closed its pools and processes by now, so
    skipping finalization loses nothing.

    Why this hook: pytest runs the whole session inside ``pytest_cmdline_main``,
    including ``pytest_unconfigure`` and the config's cleanups, where its
    unraisable-exception and thread-exception checks report what leaked at
    the end of the run. Wrapping it is the one place after all of them that
    still sees the exit status (or the error those checks raised). An exit
    from ``pytest_unconfigure`` would skip the cleanups and so hide a thread
    that raised after the last test. Only initial conftests get this hook;
    when it is missed, the run just finalizes normally.
    """
    try:
        status = yield
    except Exception as exc:
        if not config.stash.get(_monty_pool_started, False):
            raise
        # What the interpreter does with an uncaught exception: print it, exit 1.
        sys.excepthook(type(exc), exc, exc.__traceback__)
        _exit_now(1)
    if config.stash.get(_monty_pool_started, False):
        _exit_now(int(status))
    return status


def _exit_now(status: int) -> NoReturn:
    """Flush what pytest wrote, then leave without finalizing the interpreter."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@pytest.fixture(params=["direct", "snapshots"])
def engine_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once per path a snippet can take (issue 17, ``code_mode/sandbox/direct.py``).

    ``direct``: eligible snippets take Monty's own host-call path (the
    default); ``snapshots``: every snippet is driven snapshot by snapshot.
    A module opts in with ``pytestmark = pytest.mark.usefixtures("engine_path")``:
    its expectations then hold on both paths.
    """
    if request.param == "snapshots":
        monkeypatch.setattr("daemon.code_mode.executor.eligible", lambda *_: False)
    return str(request.param)


@pytest.fixture
async def nc() -> AsyncIterator[Client]:
    """A client of a real nats-server with JetStream (tests/fakes/nats_server.py), closed after."""
    # imported here: only the tests that use a broker pay for it
    import nats

    from tests.fakes.nats_server import NatsServer

    async with NatsServer() as server:
        client = await nats.connect(server.url)
        yield client
        await client.close()
