"""Errors of the channels package.

The tree, split by who must act::

    ChannelError                 root of everything channels/ raises
    ├── ProtocolError            a frame is invalid or refused; carries the protocol ``code``
    │                            (the sender must fix the frame, or slow down: rate_limited)
    ├── ChannelConfigError       a bad URL, nick, listen address or tokens file (the operator)
    ├── UnauthorizedError        the hub refused who we are: bad token, not loopback (operator)
    ├── ChannelTimeoutError      no ack or reply in time (also a ``TimeoutError``)
    ├── ChannelClosedError       you closed it (trio's ClosedResourceError)
    ├── ChannelBrokenError       the peer or the network broke it (trio's BrokenResourceError)
    │   └── HubUnreachableError  no connection: refused, handshake failed, backoff gave up
    └── HubStoreError            the hub's SQLite file failed (the system)
"""

from __future__ import annotations

__all__ = [
    "ChannelBrokenError",
    "ChannelClosedError",
    "ChannelConfigError",
    "ChannelError",
    "ChannelTimeoutError",
    "HubStoreError",
    "HubUnreachableError",
    "ProtocolError",
    "UnauthorizedError",
]


class ChannelError(Exception):
    """Root of every error raised by the channels package."""


class ProtocolError(ChannelError):
    """A frame is invalid or was refused. ``code`` is one of the protocol's error codes.

    ``client_id`` and ``channel`` name the publish or subscription the error is
    about, when the offending frame carried them, so a client can match an
    ``error`` frame to the call that is waiting for it.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        client_id: str | None = None,
        channel: str | None = None,
    ):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.client_id = client_id
        self.channel = channel


class ChannelConfigError(ChannelError):
    """A setting is wrong: the URL, a nick, the listen address, the tokens file."""


class UnauthorizedError(ChannelError):
    """The hub refused the client's identity (an unknown token, a ``hello`` from afar).

    Not retried: reconnecting with the same credentials cannot succeed.
    """


class ChannelTimeoutError(ChannelError, TimeoutError):
    """An ack, a subscription or a reply did not arrive within its timeout."""


class ChannelClosedError(ChannelError):
    """The channel was closed by its owner."""


class ChannelBrokenError(ChannelError):
    """The connection broke and could not be re-established."""

    @classmethod
    def of(cls, url: str, cause: BaseException | None) -> ChannelBrokenError:
        """The error each call raises on the channel to ``url`` that ``cause`` broke.

        A new one per call (one exception object is never raised twice), with
        ``cause`` as its ``__cause__``; a bug's cause is named as a failure.
        """
        if isinstance(cause, ChannelBrokenError):
            err = cls(str(cause))
        elif not isinstance(cause, ChannelError):
            err = cls(f"the client of {url} failed: {type(cause).__name__}: {cause}")
        else:
            err = cls(f"the connection to {url} is gone: {cause}")
        err.__cause__ = cause
        return err


class HubUnreachableError(ChannelBrokenError):
    """No connection to the hub: refused, unreachable, or the handshake failed."""


class HubStoreError(ChannelError):
    """The hub's message store (its SQLite file) failed."""
