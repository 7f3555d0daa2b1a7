"""Choosing the transport by URL: :func:`open_channel` for ``ws://``, ``wss://`` or ``nats://``.

The daemon and ``atirc pub/sub`` build their channel here, so both speak to a
hub or to NATS JetStream from the same ``[channels] url`` / ``ATIRC_URL``.
Ids of the two are different spaces (:func:`id_space`): a hub's are ULIDs,
NATS's come from stream sequences, so a cursor of one means nothing to the
other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit

from channels.client import WebSocketChannel, exponential_backoff
from channels.errors import ChannelConfigError
from channels.frames import Status
from channels.nats import NatsChannel

__all__ = ["AnyChannel", "id_space", "open_channel"]

AnyChannel = WebSocketChannel | NatsChannel
"""What :func:`open_channel` returns: a ``Channel`` that also has ``connect(retry=)``."""

_NATS = ("nats", "tls")
_HUB = ("ws", "wss")


def id_space(url: str) -> Literal["hub", "nats"]:
    """Whose ids a channel at ``url`` delivers: a hub's (``ws``/``wss``) or NATS's."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # urllib refuses an IPv6 address without its "]"
        raise ChannelConfigError(f"invalid channel URL {url!r}: {exc}") from None
    if scheme in _NATS:
        return "nats"
    if scheme in _HUB:
        return "hub"
    raise ChannelConfigError(
        f"unsupported channel URL {url!r}: ws://HOST:PORT/ (an atirc hub) or nats://HOST:PORT"
    )


def open_channel(
    url: str,
    *,
    token: str | None = None,
    nick: str | None = None,
    attempts: int | None = None,
    on_status: Callable[[Status], None] | None = None,
) -> AnyChannel:
    """A channel for ``url``, not connected yet: a WebSocketChannel or a NatsChannel.

    ``attempts`` bounds the reconnect attempts in a row (None: forever);
    ``token`` is the hub's bearer token or NATS's credentials (a token,
    ``USER:PASSWORD`` or a ``.creds`` file); ``on_status`` gets the statuses
    of subscribed channels.
    """
    if id_space(url) == "nats":
        return NatsChannel(
            url, token=token, nick=nick, reconnect_attempts=attempts, on_status=on_status
        )
    return WebSocketChannel(
        url,
        token=token,
        nick=nick,
        backoff=exponential_backoff(attempts=attempts),
        on_status=on_status,
    )
