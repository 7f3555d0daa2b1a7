"""systemd's notify protocol, the small part services need (``sd_notify(3)``).

A state such as ``READY=1`` is one datagram to the unix socket named by
``$NOTIFY_SOCKET`` (a path, or ``@name`` for an abstract socket). Without the
variable (not under systemd, or ``Type=simple``) everything here is a no-op,
so callers need no checks. Used by the hub and by the daemon.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

__all__ = ["notify", "watchdog_interval"]

log = structlog.get_logger("channels.notify")


def _address(env: Mapping[str, str]) -> str | None:
    addr = env.get("NOTIFY_SOCKET")
    if not addr:
        return None
    if addr.startswith("@"):
        # An abstract socket: the name starts with a NUL byte on the wire.
        return "\0" + addr[1:]
    return addr


def notify(state: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (``"READY=1"``, ``"WATCHDOG=1"``, ``"STATUS=…"``, several joined by newlines).

    Returns whether a datagram was sent. A failure is logged, never raised:
    a service must not die because its supervisor's socket went away.
    """
    addr = _address(os.environ if env is None else env)
    if addr is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(addr)
            sock.sendall(state.encode("utf-8"))
    except OSError as exc:
        log.warning("notify.failed", state=state, error=str(exc))
        return False
    return True


def watchdog_interval(*, env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings, or ``None`` when no watchdog is asked for.

    That is half of ``$WATCHDOG_USEC``, as ``sd_watchdog_enabled(3)``
    recommends. ``$WATCHDOG_PID``, when set, must be this process.
    """
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    if value <= 0:
        return None
    return value / 1_000_000 / 2
