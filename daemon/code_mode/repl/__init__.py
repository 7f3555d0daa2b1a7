"""The REPL room: each conversation thread's Python scope, kept across snippets and restarts.

Holds the scope itself (``scope``: one Monty checkout and its lock), the LRU
of scopes an executor keeps (``scopes``) and the handle a thread gets on its
own (``thread_scope``), scopes stored across evictions and restarts
(``persistence``, through the ``ScopeStore`` port of ``store``), new scopes
started from a warm copy of the preamble's REPL
(``fresh``), the variables note that tells the model what its REPL still
holds (``note``), and the seams where the helpers, hints and note plug into
each snippet (``hooks``, handed on as a module so that a patch of one seam
takes effect everywhere).

May import: ``daemon.code_mode``'s shared modules (``bindings``, ``helpers``,
``lazy``), ``daemon.code_mode.sandbox``'s face, ``daemon.limits``,
``daemon.tools``, ``daemon.errors``, ``daemon.crashpoints``, ``daemon.logging``
and pydantic-monty.
"""

from daemon.code_mode.repl import hooks
from daemon.code_mode.repl.fresh import FreshScopes
from daemon.code_mode.repl.note import reset_note
from daemon.code_mode.repl.persistence import ScopePersistence
from daemon.code_mode.repl.scope import ScopeState
from daemon.code_mode.repl.scopes import ScopeTable
from daemon.code_mode.repl.store import ScopeStore, StoredScopeDump
from daemon.code_mode.repl.thread_scope import ThreadScope

__all__ = [
    "FreshScopes",
    "ScopePersistence",
    "ScopeState",
    "ScopeStore",
    "ScopeTable",
    "StoredScopeDump",
    "ThreadScope",
    "hooks",
    "reset_note",
]
