"""Several daemons with the same nick sharing the threads of a NATS channel (issue 18).

Why leases in a key-value bucket and not a partitioned subject with one
consumer per partition: a thread must move as a whole (its queued prompts,
its REPL, its approvals) and exactly when its holder is gone, while the
channel itself (``channels.nats``) stays one ordered stream that every
daemon reads. A per-thread entry claimed with ``create`` and taken over
with a revision-checked ``update`` moves one thread at a time, needs no
rebalancing of partitions when a daemon joins or leaves, and keeps "who
answers this thread" as one value anybody can read.

- :mod:`.leases`: the members bucket (heartbeats the broker expires) and
  the threads bucket (owner, newest answered prompt);
- :mod:`.router`: for each inbound message, run it here or remember it;
  taking over the threads of a daemon that is gone;
- :mod:`.store`: the runtime's store, reporting answered prompts;
- :mod:`.fence`: a daemon that lost a thread (its lease lapsed) publishes
  nothing in it; its mutating calls are fenced in :mod:`.leases`;
- :mod:`.history`: a moved thread's earlier turns, and the prompts whose reply
  is out, read from the channel;
- :mod:`.scopes`: REPL dumps in an object store, HMAC-signed;
- :mod:`.approvals`: runs paused for approval, their state in an object store
  (signed the same way) and their decisions in the thread's entry, once;
- :mod:`.policies`: a daemon whose channel policies differ from the members'
  does not join;
- :mod:`.rules`: the ``!approve ID always`` rules on the broker, every
  daemon's SQLite copy kept in line;
- :mod:`.audit`: each finished run's rows on ``asyncai.audit``, and the
  collector behind ``asyncai audit-collect``;
- :mod:`.usage`: the per-sender limits counted on the broker, across the daemons;
- :mod:`.node`: one daemon's part, wired by :mod:`daemon.app` through :mod:`.wiring`;
- :mod:`.connect`, :mod:`.errors`.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.logging``,
``daemon.config``, ``daemon.runtime`` (its ports, the scope MAC and the limits' rule),
``daemon.code_mode.repl``'s face (the ``ScopeStore`` port its object store serves),
``sessions`` and ``channels``; never ``daemon.model``, ``daemon.mcp``, ``daemon.cli`` or
``daemon.app``.
"""

from daemon.cluster.approvals import ClusterApprovals, PausedStates
from daemon.cluster.audit import AuditExporter, collect
from daemon.cluster.connect import connect_nats
from daemon.cluster.errors import ClusterError
from daemon.cluster.leases import Claim, Leases
from daemon.cluster.node import ClusterNode, is_cluster_url, open_cluster
from daemon.cluster.router import ThreadRouter
from daemon.cluster.scopes import ObjectScopeStore
from daemon.cluster.store import ClusterRuntimeStore
from daemon.cluster.wiring import audited, clustered, counted, fenced, mirror

__all__ = [
    "AuditExporter",
    "Claim",
    "ClusterApprovals",
    "ClusterError",
    "ClusterNode",
    "ClusterRuntimeStore",
    "Leases",
    "ObjectScopeStore",
    "PausedStates",
    "ThreadRouter",
    "audited",
    "clustered",
    "collect",
    "connect_nats",
    "counted",
    "fenced",
    "is_cluster_url",
    "mirror",
    "open_cluster",
]
