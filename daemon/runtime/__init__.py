"""Threads and runs: the scheduler between the channel and the model.

Holds the scheduler (:mod:`daemon.runtime.scheduler`: one run per thread,
coalescing, concurrency, ``!stop``, shutdown), the run request and result
(:mod:`daemon.runtime.runs`), the scheduler's store protocol over the
sessions store (:mod:`daemon.runtime.store`), the channel adapters
(:mod:`daemon.runtime.intake`) and the restart note
(:mod:`daemon.runtime.note`).

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.code_mode.note`` (the
note's words), ``channels`` and ``sessions``; never ``daemon.model``,
``daemon.mcp`` or ``daemon.cli``.
"""

from daemon.runtime.runs import HistoryTurn, Prompt, RunRequest, RunResult
from daemon.runtime.scheduler import InboundMessage, Runtime, RuntimeOptions

__all__ = [
    "HistoryTurn",
    "InboundMessage",
    "Prompt",
    "RunRequest",
    "RunResult",
    "Runtime",
    "RuntimeOptions",
]
