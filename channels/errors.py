"""Errors of the channels package.

The tree::

    ChannelError                 root of everything channels/ raises
    ├── ProtocolError            a frame is invalid; carries the protocol error ``code``
    ├── ChannelClosedError       you closed it (trio's ClosedResourceError)
    └── ChannelBrokenError       the peer or the network broke it (BrokenResourceError)
"""

from __future__ import annotations

__all__ = ["ChannelBrokenError", "ChannelClosedError", "ChannelError", "ProtocolError"]


class ChannelError(Exception):
    """Root of every error raised by the channels package."""


class ProtocolError(ChannelError):
    """A frame is invalid. ``code`` is one of the protocol's error codes."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ChannelClosedError(ChannelError):
    """The channel was closed by its owner."""


class ChannelBrokenError(ChannelError):
    """The connection broke and could not be re-established."""
