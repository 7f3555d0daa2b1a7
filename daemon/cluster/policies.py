"""Every daemon of a cluster has the same channel policies, or it does not join.

Each daemon's member key (:mod:`.leases`, rewritten at every heartbeat)
carries the digest of each of its channel policies
(``ChannelPolicy.digest()``, by channel name; ``""`` is the global policy a
channel without a section gets)::

    {"policies": {"": "9f2c…", "#ops": "41ab…"}}

A daemon about to join reads the live members' keys before its first beat
and compares (:func:`differing`): a channel whose digest differs from a
member's, or that has a section on one side only, makes it refuse to join
(:class:`PolicyMismatch`, which names the channel and the member), so a
thread that moves never meets other tools, approvers or limits. A member
whose key carries no digests (an older asyncai) is logged and not compared.
Two daemons with different policies that start within one heartbeat of each
other may both join: the check is at join, not a consensus.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog

from daemon.cluster.errors import ClusterError

__all__ = [
    "PolicyMismatch",
    "check_join",
    "differing",
    "presence",
    "read_presence",
    "read_started",
]

log = structlog.get_logger("asyncai.cluster")


class PolicyMismatch(ClusterError):
    """This daemon's channel policies differ from a live member's: it does not join."""


def presence(digests: Mapping[str, str], started: float | None = None) -> bytes:
    """A member key's value: the daemon's policy digests by channel, and when it started
    (epoch seconds; the console's Health page shows each member's uptime)."""
    data: dict[str, Any] = {"policies": dict(sorted(digests.items()))}
    if started is not None:
        data["started"] = round(started, 3)
    return json.dumps(data).encode()


def read_started(value: bytes | None) -> float | None:
    """When the member whose key carries ``value`` started; None when it does not say."""
    try:
        started = json.loads(value or b"")["started"]
    except (ValueError, TypeError, KeyError):
        return None
    return float(started) if isinstance(started, int | float) else None


def read_presence(value: bytes | None) -> dict[str, str] | None:
    """The digests a member key carries; None when it carries none (an older daemon)."""
    try:
        data: Any = json.loads(value or b"")
        policies = data["policies"]
        return {str(k): str(v) for k, v in policies.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def differing(mine: Mapping[str, str], theirs: Mapping[str, str]) -> list[str]:
    """The channels whose policy differs, sorted (``""``: the global one). A channel with
    a section on one side only is compared with the other side's global policy."""
    names = set(mine) | set(theirs)
    return sorted(
        name for name in names if mine.get(name, mine.get("")) != theirs.get(name, theirs.get(""))
    )


def _channel(name: str) -> str:
    return f"channel {name}" if name else "the global policy (channels without a section)"


def check_join(mine: Mapping[str, str], members: Mapping[str, bytes | None], *, me: str) -> None:
    """Raise :class:`PolicyMismatch` when a live member's policies differ from ``mine``."""
    for member, value in sorted(members.items()):
        if member == me:
            continue
        theirs = read_presence(value)
        if theirs is None:
            log.warning("cluster.policies_unknown", member=member, action="not compared")
            continue
        diff = differing(mine, theirs)
        if diff:
            raise PolicyMismatch(
                f"not joining the cluster: {', '.join(_channel(n) for n in diff)} "
                f"differ{'s' if len(diff) == 1 else ''} from member {member[:8]}'s "
                "(every daemon of a cluster must have the same channel policies: "
                "compare `asyncai config show` on both hosts)"
            )
