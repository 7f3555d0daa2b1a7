"""The atirc hub: a pub/sub server on websockets, messages kept in SQLite (see ``server``)."""

from channels.hub.auth import is_loopback as _is_loopback
from channels.hub.connection import FLOOD_CLOSE, GOING_AWAY_CLOSE, SLOW_CLOSE
from channels.hub.server import DEFAULT_HOST, DEFAULT_PORT, Hub
from channels.hub.stats import HubStats

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FLOOD_CLOSE",
    "GOING_AWAY_CLOSE",
    "SLOW_CLOSE",
    "Hub",
    "HubStats",
    "_is_loopback",
]
