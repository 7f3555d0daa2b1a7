"""Code mode: one ``run_code`` tool whose Python runs in Monty workers and calls inner tools.

Holds the executor and its REPL scopes (``executor``, ``scope``, ``scopes``,
``thread_scope``, ``pool``), the scopes stored across restarts (``persistence``),
the snippet engine over a Monty session (``engine``, snapshot by snapshot;
``direct``, on Monty's own host-call path; ``outcome``) and its nested calls
(``nested``, ``deadlines``), the catalog of inner tools as typed stubs (``catalog``,
``schema``, ``description``; ``offer``: the catalog and ``run_code`` of the
moment), ``search_tools``/``describe`` for a catalog over its budget
(``search``), return shapes learned from results (``shapes``, ``learned``),
the value conversion and return contract
(``convert``, ``contract``), the helpers and hooks around each snippet
(``helpers``, ``hooks``, ``hints``, ``note``), a snippet paused for approval
and its resumption (``approval``), the result's text and audit (``report``),
and the limits.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.logging``,
``daemon.crashpoints`` and pydantic-monty; nothing else of daemon/ (it knows tools only through the
``ToolExecutor`` interface).
"""

from daemon.code_mode.executor import CodeModeToolExecutor
from daemon.code_mode.limits import CodeModeLimits

__all__ = ["CodeModeLimits", "CodeModeToolExecutor"]
