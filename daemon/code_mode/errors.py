"""Errors of the code-mode package (a part of ``daemon``; its root is ``AsyncaiError``).

The tree, split by who must act::

    AsyncaiError                     (daemon.errors)
    └── ToolTransportError           the system: a tool call could not be made
        └── SandboxUnavailable       the system: the Monty pool could not start,
                                     or the executor is closed

Everything the *model* must act on (an exception in its snippet, a blown
limit, a bad argument) is not raised: it becomes an error result of
``run_code`` with the traceback and what to do.
"""

from __future__ import annotations

from daemon.errors import ToolTransportError

__all__ = ["SandboxUnavailable"]


class SandboxUnavailable(ToolTransportError):
    """No sandbox to run in: the worker pool failed to start, or the executor is closed."""

    def __init__(self, message: str):
        super().__init__(message, tool="run_code")
