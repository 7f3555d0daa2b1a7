"""atirc-style pub/sub channels: protocol, client, embedded hub, the `atirc` CLI.

Holds the pure protocol (``protocol``, ``ids``, ``names``, ``split``, ``tokens``,
``ratelimit``), the client (``client/``: a sans-I/O protocol and its websocket
transport), the same interface on NATS JetStream (``nats/``), what both transports
share (``inbox``: the lifecycle, the inbox wait, ``on_status``), the choice
between them by URL (``transport``: :func:`open_channel`), the hub (``hub/``:
one module per job, over ``store``), systemd's notify protocol (``notify``)
and the ``atirc`` command (``cli``).

May import: websockets, aiosqlite, nats-py, structlog and the standard library;
nothing of ``daemon``, ``sessions`` or ``servers``: it stands alone.
"""

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
from channels.frames import ErrorCode, Message, Subscribed
from channels.hub import Hub, HubStats
from channels.ids import ZERO_ID, id_for_time
from channels.names import is_channel, is_nick
from channels.nats import NatsChannel
from channels.notify import notify, watchdog_interval
from channels.tokens import load_tokens
from channels.transport import AnyChannel, id_space, open_channel

__all__ = [
    "DEFAULT_URL",
    "ZERO_ID",
    "AnyChannel",
    "Backoff",
    "Channel",
    "ChannelBrokenError",
    "ChannelClosedError",
    "ChannelConfigError",
    "ChannelError",
    "ChannelTimeoutError",
    "ErrorCode",
    "Hub",
    "HubStats",
    "HubStoreError",
    "HubUnreachableError",
    "Message",
    "NatsChannel",
    "ProtocolError",
    "PublishAck",
    "Subscribed",
    "UnauthorizedError",
    "WebSocketChannel",
    "exponential_backoff",
    "id_for_time",
    "id_space",
    "is_channel",
    "is_nick",
    "load_tokens",
    "notify",
    "open_channel",
    "watchdog_interval",
]
