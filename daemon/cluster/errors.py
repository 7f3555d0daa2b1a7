"""The cluster's errors: the broker could not be reached or refused what was asked.

::

    daemon.errors.AsyncaiError
    └── ClusterError            the NATS broker failed a cluster operation (leases,
                                scopes, audit); carries what was being done
"""

from __future__ import annotations

from daemon.errors import AsyncaiError

__all__ = ["ClusterError"]


class ClusterError(AsyncaiError):
    """A cluster operation on the NATS broker failed; the message says which one."""
