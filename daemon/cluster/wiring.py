"""How :class:`daemon.app.Daemon` wires the cluster in: each helper hands back what it is
given when there is no cluster (a ``ws://`` hub), and the cluster's version otherwise.

- :func:`mirror`: the approval desk's mirror, given to the desk as it is built
  (:class:`.approvals.ClusterApprovals`), or None;
- :func:`clustered`: the runtime's store (:meth:`.ClusterNode.wrap`);
- :func:`counted`: the per-sender limits (:mod:`.usage`);
- :func:`fenced`: the publisher (:mod:`.fence`);
- :func:`audited`: the audit observer, each mutating call recorded in its
  thread's entry first, fenced (:meth:`.ClusterNode.mutating_started`).
"""

from __future__ import annotations

from daemon.cluster.fence import FencedPublisher
from daemon.cluster.node import ClusterNode
from daemon.runtime.desk import ApprovalDesk, ApprovalMirror
from daemon.runtime.limits import SenderLimiter, SenderLimits, SenderUsage
from daemon.runtime.ports import RuntimePublisher, RuntimeStore
from daemon.runtime.store import SessionsRuntimeStore
from daemon.tools import AuditEntry, AuditObserver

__all__ = ["audited", "clustered", "counted", "fenced", "mirror"]


def mirror(node: ClusterNode | None) -> ApprovalMirror | None:
    """The approval desk's mirror: in a cluster, where the daemons share requests and
    take each decision once (:class:`daemon.cluster.approvals.ClusterApprovals`)."""
    return None if node is None else node.approvals


def clustered(
    node: ClusterNode | None,
    store: SessionsRuntimeStore,
    desk: ApprovalDesk | None,
    executor: object,
) -> RuntimeStore:
    """The runtime's store; in a cluster, one that tells the others what was answered
    (:meth:`ClusterNode.wrap`)."""
    return store if node is None else node.wrap(store, desk, executor)


def counted(
    node: ClusterNode | None,
    local: SenderUsage,
    limits: SenderLimits,
    *,
    channel: str | None = None,
) -> SenderLimiter:
    """The per-sender limits over ``local`` (this daemon's database); in a cluster,
    counted on the broker across the daemons (:meth:`ClusterNode.limiter`);
    ``channel``: a channel's own limits, counting its runs only."""
    if node is None:
        return SenderLimiter(local, limits, channel=channel)
    return node.limiter(local, limits, channel=channel)


def fenced(node: ClusterNode | None, publisher: RuntimePublisher) -> RuntimePublisher:
    """``publisher``, and in a cluster, publishing in a thread only while this daemon
    holds it (:class:`daemon.cluster.fence.FencedPublisher`)."""
    return publisher if node is None else FencedPublisher(publisher, node.leases)


def audited(node: ClusterNode | None, observer: AuditObserver) -> AuditObserver:
    """``observer``, and in a cluster, each mutating call recorded in its thread's entry
    first (:meth:`ClusterNode.mutating_started`)."""
    if node is None:
        return observer

    async def observe(thread_id: str | None, entry: AuditEntry) -> None:
        if entry.mutating and entry.outcome == "started":
            await node.mutating_started(entry)
        result = observer(thread_id, entry)
        if result is not None:
            await result

    return observe
