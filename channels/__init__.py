"""atirc-style pub/sub channels: protocol, client, embedded hub, the `atirc` CLI."""

from channels.client import (
    DEFAULT_URL,
    Backoff,
    Channel,
    PublishAck,
    WebSocketChannel,
    exponential_backoff,
)
from channels.errors import (
    ChannelBrokenError,
    ChannelClosedError,
    ChannelConfigError,
    ChannelError,
    ChannelTimeoutError,
    HubStoreError,
    HubUnreachableError,
    ProtocolError,
    UnauthorizedError,
)
from channels.hub import Hub, HubStats
from channels.notify import notify, watchdog_interval
from channels.protocol import ZERO_ID, Message, Subscribed

__all__ = [
    "DEFAULT_URL",
    "ZERO_ID",
    "Backoff",
    "Channel",
    "ChannelBrokenError",
    "ChannelClosedError",
    "ChannelConfigError",
    "ChannelError",
    "ChannelTimeoutError",
    "Hub",
    "HubStats",
    "HubStoreError",
    "HubUnreachableError",
    "Message",
    "ProtocolError",
    "PublishAck",
    "Subscribed",
    "UnauthorizedError",
    "WebSocketChannel",
    "exponential_backoff",
    "notify",
    "watchdog_interval",
]
