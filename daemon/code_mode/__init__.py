"""Code mode: one ``run_code`` tool whose Python runs in Monty workers and calls inner tools.

Three rooms, each a subpackage that hands on in ``__all__`` what the others
use (its face), one floor above the other:

- ``catalog/``: what the model is told about the inner tools (typed stubs,
  ``run_code``'s description, ``search_tools``/``describe``, learned return
  shapes); the face the small-model harness and the runtime's restart note
  import;
- ``sandbox/``: one snippet run in a Monty worker (the engine on both paths,
  its nested tool calls, their deadlines, a snippet paused for approval, the
  pool, the print cap, the hints for Monty's gaps);
- ``repl/``: each thread's REPL scope across snippets and restarts (the
  scopes, their dumps, the warm spare, the variables note, the hooks).

At the top, what the rooms share and what puts them together: the executor
(``executor``: one call's steps in order) and the catalog of the moment
(``offer``), the return contract and the result's text and audit
(``contract``, ``report``), the value conversion (``convert``), the tool
wrappers (``lazy``), the helpers (``helpers``, ``bindings``) and the errors.
Its limits (``CodeModeLimits``) live in the shared :mod:`daemon.limits`,
which the configuration reads too; they are handed on here.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.approvals`` (its
values), ``daemon.limits``,
``daemon.logging``, ``daemon.crashpoints`` and pydantic-monty;
nothing else of daemon/ (it knows tools only through the ``ToolExecutor``
interface).
"""

from daemon.code_mode.executor import CodeModeToolExecutor
from daemon.limits import CodeModeLimits

__all__ = ["CodeModeLimits", "CodeModeToolExecutor"]
