"""The client side: the ``Channel`` interface, its sans-I/O protocol and its websocket transport."""

from channels.client.backoff import Backoff, exponential_backoff
from channels.client.interface import Channel, PublishAck
from channels.client.websocket import DEFAULT_URL, WebSocketChannel
from channels.protocol import Message, Subscribed

__all__ = [
    "DEFAULT_URL",
    "Backoff",
    "Channel",
    "Message",
    "PublishAck",
    "Subscribed",
    "WebSocketChannel",
    "exponential_backoff",
]
