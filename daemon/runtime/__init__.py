"""Threads and runs: the scheduler between the channel and the model.

Holds the scheduler (:mod:`daemon.runtime.scheduler`: one run per thread,
coalescing, concurrency, ``!stop``, shutdown), the run request and result
(:mod:`daemon.runtime.runs`), the scheduler's store protocol over the
sessions store (:mod:`daemon.runtime.store`), the channel adapters
(:mod:`daemon.runtime.intake`), the restart note
(:mod:`daemon.runtime.note`), the notice of a run not run again after an
interruption (:mod:`daemon.runtime.interrupted`), the shield around the
reply and the run's record (:mod:`daemon.runtime.complete`), the per-sender
limits (:mod:`daemon.runtime.limits`) and the tokens a run spends
(:mod:`daemon.runtime.usage`), the nested-call audit rows
(:mod:`daemon.runtime.audit`) and systemd's watchdog
(:mod:`daemon.runtime.watchdog`).

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.crashpoints``, the
faces of ``daemon.code_mode.catalog`` and ``daemon.code_mode.repl`` (the
restart note's catalog and words), ``channels`` and ``sessions``; never
``daemon.model``, ``daemon.mcp`` or ``daemon.cli``.
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
