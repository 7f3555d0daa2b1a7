"""Which addresses ``http_get`` may connect to. Pure functions, no I/O.

Always refused: link-local addresses (169.254.0.0/16 and fe80::/10, where the
cloud metadata endpoints live, e.g. 169.254.169.254) and AWS's IPv6 metadata
address fd00:ec2::254, also when written inside an IPv6 address (IPv4-mapped
``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``, Teredo).

With ``deny_private`` also refused: every address that is not globally
routable (loopback, RFC 1918 and unique-local ranges, carrier-grade NAT,
unspecified, reserved and documentation ranges) and multicast.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address

__all__ = ["embedded_ipv4", "parse_ip", "refusal"]

IPAddress = IPv4Address | IPv6Address

#: AWS's IMDS over IPv6; a unique-local address, so not caught as link-local.
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254")})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def parse_ip(text: str) -> IPAddress:
    """An address from ``getaddrinfo`` (an IPv6 one may carry ``%scope``)."""
    return ipaddress.ip_address(text)


def embedded_ipv4(ip: IPAddress) -> list[IPv4Address]:
    """IPv4 addresses an IPv6 address carries and may be routed to."""
    if isinstance(ip, IPv4Address):
        return []
    found: list[IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    plain = IPv6Address(int(ip))  # without a scope id, for the range checks
    if plain in _NAT64 or (1 < int(plain) < 2**32):  # NAT64, or IPv4-compatible ::a.b.c.d
        found.append(IPv4Address(int(plain) & 0xFFFFFFFF))
    return found


def refusal(ip: IPAddress, *, deny_private: bool) -> str | None:
    """Why ``ip`` may not be fetched, or None when it may."""
    candidates = [ip, *embedded_ipv4(ip)]
    for candidate in candidates:
        if candidate.is_link_local or candidate in METADATA_ADDRESSES:
            shown = str(ip) if candidate == ip else f"{ip} (carrying {candidate})"
            return f"{shown} is a link-local or cloud metadata address, which is never fetched"
    if deny_private:
        for candidate in candidates:
            if not candidate.is_global or candidate.is_multicast:
                shown = str(ip) if candidate == ip else f"{ip} (carrying {candidate})"
                return f"{shown} is not a public address (the server runs with --deny-private)"
    return None
