"""The cluster's own connection to the NATS broker (beside the channel's), with its credentials."""

from __future__ import annotations

import nats
import nats.errors
import structlog
from nats.aio.client import Client

from channels.errors import ChannelConfigError
from channels.nats import credentials
from daemon.cluster.errors import ClusterError

__all__ = ["CONNECT_TIMEOUT", "connect_nats"]

log = structlog.get_logger("asyncai.cluster")

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
        # One try now (nats-py would retry the first connection forever), then,
        # once connected, reconnects forever as the channel's own connection does.
        nc = await nats.connect(
            url,
            **auth,
            name=name,
            connect_timeout=CONNECT_TIMEOUT,
            max_reconnect_attempts=1,
            error_cb=_log_error,
        )
        nc.options["max_reconnect_attempts"] = -1
        return nc
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot connect to the NATS broker at {url}: {exc}") from exc


async def _log_error(exc: Exception) -> None:
    # nats-py prints a traceback for each error without a callback; a line is enough
    log.info("cluster.nats_error", error=f"{type(exc).__name__}: {exc}")
