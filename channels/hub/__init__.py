"""The atirc hub: a pub/sub server on websockets, messages kept in SQLite.

One module per job: the server and its lifecycle (``server``), one client's
connection and bounded outbox (``connection``, ``outbox``), authentication
(``auth``), reading and dispatching frames (``dispatch``), the one writer and
its pruning (``writer``), fan-out to subscribers (``fanout``), replay after
``since`` (``replay``) and the counters (``stats``).

May import: the rest of ``channels`` (protocol, store, ids, notify) and
websockets; never ``channels.client``.
"""

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
