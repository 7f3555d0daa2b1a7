"""The client side: the ``Channel`` interface, its sans-I/O protocol and its websocket transport.

``protocol`` is the state machine without I/O (frames in, events and frames
to send out); ``websocket`` drives it over a connection (``handshake``), with
its waiting futures (``pending``) and reconnect ``backoff``.

May import: ``channels.inbox`` (the base its transport shares with NATS's),
``channels.protocol``, ``channels.errors``, ``channels.ids``,
``channels.split`` and websockets; never ``channels.hub``.
"""

from channels.client.backoff import Backoff, exponential_backoff
from channels.client.interface import Channel, PublishAck
from channels.client.protocol import check_publish, check_status, check_subscribe
from channels.client.websocket import DEFAULT_URL, WebSocketChannel
from channels.frames import Message, Subscribed

__all__ = [
    "DEFAULT_URL",
    "Backoff",
    "Channel",
    "Message",
    "PublishAck",
    "Subscribed",
    "WebSocketChannel",
    "check_publish",
    "check_status",
    "check_subscribe",
    "exponential_backoff",
]
