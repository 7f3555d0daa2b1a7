"""New scopes load one stored copy of the preamble's REPL instead of feeding it (issue 17).

Every new scope starts with the helpers and the tools' wrappers
(:func:`daemon.code_mode.hooks.scope_preamble`, :mod:`daemon.code_mode.lazy`):
a feed of a few hundred lines, about 0.7 ms on a 2-core machine, against
0.3 ms to load the session dumped after the first such feed (same REPL,
same feed count, so tracebacks name the same ``<python-input-N>``). The
first new scope feeds the preamble and keeps the dump; the next ones load it.

Only without an operator's preamble (``limits.preamble``): its code may call
tools or read the clock, and must run in each scope. A dump that fails to
load is dropped, and that scope feeds the preamble.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from pydantic_monty import AsyncMontySession, MontyError

if TYPE_CHECKING:
    from daemon.code_mode.engine import SnippetOutcome

__all__ = ["FreshScopes"]

log = structlog.get_logger("asyncai.code_mode")


class FreshScopes:
    """Prepares new checkouts: the preamble fed once, its REPL loaded after that."""

    def __init__(self, operator_preamble: str):
        self._enabled = not operator_preamble.strip()
        self._blob: bytes | None = None

    async def prepare(
        self, session: AsyncMontySession, feed: Callable[[], Awaitable[SnippetOutcome]]
    ) -> SnippetOutcome | None:
        """Give the new ``session`` the preamble's REPL; the feed's outcome, or None when loaded.

        ``feed()`` runs the preamble in ``session``.
        """
        if self._blob is not None:
            try:
                await session.load_session(self._blob)
                return None
            except (MontyError, RuntimeError, OSError) as exc:
                # the dump came from this process; failing to load it means a broken worker
                log.warning("code_mode.fresh_scope_load_failed", error=repr(exc))
                self._blob = None
        outcome = await feed()
        if self._enabled and outcome.ok and self._blob is None:
            try:
                self._blob = await session.dump()
            except (MontyError, RuntimeError, OSError) as exc:
                log.warning("code_mode.fresh_scope_dump_failed", error=repr(exc))
        return outcome
