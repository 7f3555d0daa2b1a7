"""The sandbox room: one snippet run in a Monty worker, and the calls it makes out of it.

Holds the Monty worker pool (``pool``), the snippet engine over a Monty
session (``engine``, snapshot by snapshot; ``direct``, on Monty's own
host-call path; ``outcome``, how a snippet ended; ``prints``, the print cap),
valid Python that Monty runs otherwise rewritten before it runs (``compat``),
its nested tool calls (``nested``, gated, logged and audited; ``deadlines``,
their timeouts), a snippet paused for approval and its resumption
(``approval``), and the ``Hint:`` lines for Monty's known gaps (``hints``,
here because they are knowledge of the sandbox's Python subset, which the
small-model harness reads too).

May import: ``daemon.code_mode``'s shared modules (``contract``, ``convert``,
``helpers``, ``lazy``), ``daemon.code_mode.catalog``'s face, ``daemon.limits``,
``daemon.tools``, ``daemon.approvals`` (the gate and the pause),
``daemon.logging`` and pydantic-monty; never
``daemon.code_mode.repl``, which stands above it.
"""

from daemon.code_mode.sandbox.approval import render_paused, stamping_observer
from daemon.code_mode.sandbox.direct import eligible
from daemon.code_mode.sandbox.engine import SnippetRun
from daemon.code_mode.sandbox.hints import MISSING_MODULE_ADVICE, SANDBOX_MODULES, hints_for
from daemon.code_mode.sandbox.nested import NestedCalls
from daemon.code_mode.sandbox.outcome import SnippetOutcome
from daemon.code_mode.sandbox.pool import (
    CLOSE_TIMEOUT,
    close_pool,
    create_pool,
    new_checkout,
    pool_options,
)

__all__ = [
    "CLOSE_TIMEOUT",
    "MISSING_MODULE_ADVICE",
    "SANDBOX_MODULES",
    "NestedCalls",
    "SnippetOutcome",
    "SnippetRun",
    "close_pool",
    "create_pool",
    "eligible",
    "hints_for",
    "new_checkout",
    "pool_options",
    "render_paused",
    "stamping_observer",
]
