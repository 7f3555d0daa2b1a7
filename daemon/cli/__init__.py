"""The ``asyncai`` commands: argument parsing and wiring only, one module per command.

``main`` (the entry point, assembling the rest), ``up``, ``serve``, ``ask``,
``model`` and ``sessions`` (``threads``, ``audit``, ``transcript``). Each
imports the heavy parts (the daemon, the model, the pool) inside the command
that runs them, so ``asyncai --help`` and the store readers start quickly.

May import: anything of daemon/ (``daemon.app`` for the daemon),
``channels`` and ``sessions``; nothing imports ``daemon.cli``.
"""

from daemon.cli.main import main

__all__ = ["main"]
