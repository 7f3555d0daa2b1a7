"""The "REPL is empty" note after a restart.

The code-mode executor remembers evicted scopes, so the next run of such a
thread is told its variables are gone. A restarted daemon has a new
executor that never saw the thread, so it would say nothing, and the model
would reach for variables that no longer exist. :class:`RestartNoteExecutor`
wraps the executor the backend is handed and adds the executor's own reset
note to the first run of every thread that had runs before this process
started (its history is not empty), unless the executor has a note itself.
Threads are :class:`~daemon.tools.ThreadKey` values (channel and thread id),
as the executor keys its scopes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from daemon.approvals import Decision, Pause
from daemon.code_mode.catalog import Catalog, CatalogSource
from daemon.code_mode.repl import reset_note
from daemon.errors import ToolTransportError
from daemon.tools import Resumable, ThreadKey, ToolCallOutput, ToolDefinition, ToolExecutor

__all__ = ["RestartNoteExecutor"]

# Threads remembered as seen by this process; an old one forgotten can at
# worst get the (true) "REPL is empty" note once more.
_SEEN_MEMORY = 4096


class RestartNoteExecutor:
    """A :class:`~daemon.tools.ToolExecutor` proxy whose ``context_note`` knows about restarts."""

    def __init__(self, inner: ToolExecutor):
        self.inner = inner
        # asked at every run; an isinstance of a runtime-checkable Protocol walks the
        # protocol's members each time (about 60 µs: bench/daemon.py's profile)
        self._catalogs = inner if isinstance(inner, CatalogSource) else None
        self._seen: OrderedDict[ThreadKey, None] = OrderedDict()
        self._empty: set[ThreadKey] = set()

    def before_run(self, thread: ThreadKey, *, had_earlier_runs: bool) -> None:
        """Call before each run: the first run of a thread with earlier runs gets the note."""
        if thread in self._seen:
            self._seen.move_to_end(thread)
            return
        self._seen[thread] = None
        while len(self._seen) > _SEEN_MEMORY:
            self._seen.popitem(last=False)
        if had_earlier_runs:
            self._empty.add(thread)

    def context_note(self, thread: ThreadKey) -> str | None:
        """The executor's note; else, once after a restart, that the REPL is empty."""
        note = self.inner.context_note(thread)
        if thread in self._empty:
            self._empty.discard(thread)
            return note or reset_note("reset")
        return note

    @property
    def catalog(self) -> Catalog | None:
        """The inner executor's catalog when it is code mode, else None."""
        return self._catalogs.catalog if self._catalogs is not None else None

    def channel_catalog(self, channel: str) -> Catalog | None:
        """The inner executor's catalog for ``channel`` when it is code mode, else None."""
        if self._catalogs is not None:
            return self._catalogs.channel_catalog(channel)
        return None

    @property
    def hidden_functions(self) -> list[str]:
        """The inner executor's (code mode's): the sandbox names of the tools it hides."""
        hidden: list[str] = getattr(self.inner, "hidden_functions", None) or []
        return hidden

    def definitions(self) -> list[ToolDefinition]:
        """The inner executor's tools."""
        return self.inner.definitions()

    async def start(self) -> None:
        """Start the inner executor."""
        await self.inner.start()

    async def call_tool(self, name: str, arguments: dict) -> ToolCallOutput:
        """Call on the inner executor."""
        return await self.inner.call_tool(name, arguments)

    def thread_scope(self, thread: ThreadKey) -> ToolExecutor | None:
        """The inner executor's scope of the thread."""
        return self.inner.thread_scope(thread)

    async def resume(
        self, thread: ThreadKey | None, pause: Pause, decisions: Mapping[int, Decision]
    ) -> ToolCallOutput:
        """Resume a paused call on the inner executor (code mode's)."""
        if not isinstance(self.inner, Resumable):
            raise ToolTransportError("this executor cannot resume a paused call")
        return await self.inner.resume(thread, pause, decisions)

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()
