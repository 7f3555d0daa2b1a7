"""The cluster's own connection to the NATS broker (beside the channel's), with its credentials."""

from __future__ import annotations

import nats
import nats.errors
from nats.aio.client import Client

from channels.errors import ChannelConfigError
from channels.nats import credentials
from daemon.cluster.errors import ClusterError

__all__ = ["CONNECT_TIMEOUT", "connect_nats"]

CONNECT_TIMEOUT = 5.0  # seconds for the first connection; later ones reconnect forever


async def connect_nats(url: str, *, token: str | None = None, name: str = "asyncai") -> Client:
    """A connection to ``url`` that reconnects by itself; ClusterError if the first fails.

    ``token`` is ``[channels] token`` read as the channel reads it
    (:func:`channels.nats.credentials`: a ``.creds`` file, ``USER:PASSWORD``
    or a token), so the cluster needs no credentials of its own.
    """
    try:
        auth = credentials(token)
    except ChannelConfigError as exc:
        raise ClusterError(str(exc)) from exc
    try:
        return await nats.connect(
            url,
            **auth,
            name=name,
            connect_timeout=CONNECT_TIMEOUT,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
        )
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot connect to the NATS broker at {url}: {exc}") from exc
