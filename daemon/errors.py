"""Errors of the daemon package.

The tree, split by who must act::

    AsyncaiError                    root of everything daemon/ raises
    ├── ConfigError                 the operator: a bad config file, flag or variable
    ├── ToolTransportError          the system: a tool call could not be made or finish
    │                               (server died, pipe closed, timed out)
    ├── BackendError                the system: the model endpoint failed after retries
    └── ScopeRejected               the system: a stored REPL dump must not be loaded
                                    (bad MAC, another Monty version, over the size limit)

Errors the *model* must act on (a bad snippet, a bad tool argument) are not
exceptions on the host: they become error results the model reads.
"""

from __future__ import annotations

__all__ = ["AsyncaiError", "BackendError", "ConfigError", "ScopeRejected", "ToolTransportError"]


class AsyncaiError(Exception):
    """Root of every error raised by the daemon package."""


class ConfigError(AsyncaiError):
    """The configuration is invalid; the message names the key or flag."""


class ToolTransportError(AsyncaiError):
    """The call could not be made or did not finish: server died, pipe closed,
    timed out. The sandbox sees ``RuntimeError("tool error: ...")``."""

    def __init__(self, message: str, *, tool: str | None = None, server: str | None = None):
        super().__init__(message)
        self.tool = tool
        self.server = server


class BackendError(AsyncaiError):
    """The model endpoint could not answer (unreachable, misconfigured, retries spent)."""


class ScopeRejected(AsyncaiError):
    """A stored REPL dump exists but must not be loaded (issue 14).

    Raised by :meth:`daemon.code_mode.repl.ScopeStore.load`; the message is the reason
    in one line (``"its MAC does not match"``, ``"saved by Monty dump version
    3, this worker has 4"``), shown to the model in the variables note.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
