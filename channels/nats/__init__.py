"""The channel interface on NATS JetStream: ``nats://`` URLs.

``mapping`` is the pure part (a channel's stream and subjects, ids from
stream sequences, the headers of a message and a status, credentials);
``jetstream`` finds or creates a channel's stream and says where a consumer
starts; ``channel`` is :class:`NatsChannel`, the transport over nats-py.

May import: ``channels.client`` (the interface, the checks, the backoff),
``channels.errors``, ``channels.frames``, ``channels.inbox``, ``channels.ids``, ``channels.names``,
``channels.protocol``, ``channels.split``, nats-py and structlog; never
``channels.hub``.
"""

from channels.nats import mapping
from channels.nats.channel import NatsChannel
from channels.nats.mapping import credentials, decode_token, encode_token, stream_name

__all__ = [
    "NatsChannel",
    "credentials",
    "decode_token",
    "encode_token",
    "mapping",
    "stream_name",
]
