"""Which addresses ``http_get`` may connect to. Pure functions, no I/O.

Always refused, with or without ``deny_private``: link-local addresses
(169.254.0.0/16 and fe80::/10, where most cloud metadata endpoints live, e.g.
169.254.169.254) and the metadata endpoints outside them
(:data:`METADATA_ADDRESSES`: Alibaba's 100.100.100.200, Oracle's 192.0.0.192,
AWS's IPv6 fd00:ec2::254), also when carried inside an IPv6 address (see
:func:`embedded_ipv4`). An IPv4 host spelled the old ``inet_aton`` way
(``2852039166``, ``0xA9FEA9FE``, ``0251.0376.0251.0376``, ``169.254.43518``)
is that address (:func:`literal_ip`), checked like any other.

With ``deny_private`` also refused: every address that is not globally
routable and multicast. The ranges are written out here from the IANA
special-purpose registries rather than taken from ``ipaddress``'s
``is_global``, whose answer changes between Python versions (3.11 calls
site-local ``fec0::/10`` and the local-use NAT64 prefix global). An IPv6
address outside global unicast ``2000::/3`` is refused unless it is a
translation of an IPv4 address, which is then judged by that IPv4 address.
"""

from __future__ import annotations

import ipaddress
import socket
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

__all__ = ["METADATA_ADDRESSES", "embedded_ipv4", "literal_ip", "parse_ip", "refusal"]

IPAddress = IPv4Address | IPv6Address

#: Cloud metadata endpoints outside the link-local ranges: refused even without
#: ``deny_private`` (the link-local ones, 169.254.169.254 among them, are refused
#: as link-local). Each is also in a range ``deny_private`` refuses.
METADATA_ADDRESSES: frozenset[IPv4Address | IPv6Address] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "100.100.100.200",  # Alibaba Cloud (inside carrier-grade NAT 100.64.0.0/10)
        "192.0.0.192",  # Oracle Cloud (inside IETF protocol assignments 192.0.0.0/24)
        "fd00:ec2::254",  # AWS's IMDS over IPv6 (unique-local)
    )
)
#: The characters of an IPv4 address in ``inet_aton``'s spellings (decimal, octal,
#: hex parts; one to four of them).
_ATON_CHARS = frozenset("0123456789abcdefxABCDEFX.")

_V4_LINK_LOCAL = IPv4Network("169.254.0.0/16")
_V6_LINK_LOCAL = IPv6Network("fe80::/10")

#: IPv4 ranges that are not globally routable, multicast included.
_V4_NOT_GLOBAL = tuple(
    IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local
        "172.16.0.0/12",  # RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # RFC 1918
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
    )
)

_V6_GLOBAL_UNICAST = IPv6Network("2000::/3")
#: Ranges inside 2000::/3 that are still not globally routable.
_V6_NOT_GLOBAL_IN_2000 = tuple(
    IPv6Network(net)
    for net in (
        "2001::/23",  # IETF protocol assignments, Teredo 2001::/32 among them
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
    )
)

# The IPv6 forms that carry an IPv4 address, and where it sits in them.
_V4_COMPATIBLE = IPv6Network("::/96")  # ::a.b.c.d (deprecated, still routed by some stacks)
_V4_TRANSLATED = IPv6Network("::ffff:0:0:0/96")  # ::ffff:0:a.b.c.d (SIIT, RFC 2765)
_NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")  # RFC 6052
_NAT64_LOCAL_USE = IPv6Network("64:ff9b:1::/48")  # RFC 8215
#: RFC 6052 prefix lengths an operator may use inside 64:ff9b:1::/48.
_NAT64_LOCAL_PREFIX_LENGTHS = (48, 56, 64, 96)
_ISATAP_MARKERS = (b"\x00\x00\x5e\xfe", b"\x02\x00\x5e\xfe")  # interface id ::[0|200]:5efe:a.b.c.d


def parse_ip(text: str) -> IPAddress:
    """An address from ``getaddrinfo`` (an IPv6 one may carry ``%scope``)."""
    return ipaddress.ip_address(text)


def literal_ip(host: str) -> IPAddress | None:
    """The address a URL's host spells, or None for a name to resolve.

    Besides what ``ipaddress`` reads, an IPv4 address in any of the forms the
    C library's ``inet_aton`` (and so ``getaddrinfo``, and browsers) take: one
    to four parts, each decimal, octal (``0`` first) or hex (``0x``), the last
    filling the remaining bytes (``2852039166``, ``0xA9FEA9FE``,
    ``0251.0376.0251.0376``, ``169.254.43518`` are all 169.254.169.254). Read
    here, not left to a resolver, so no resolver (an injected one, another C
    library) can take such a host for a name; ``inet_aton`` is the reading the
    system's own lookup gives it.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not host or not set(host) <= _ATON_CHARS or not host[0].isdigit():
        return None  # a name (glibc's inet_aton also takes "1.2.3.4 junk": not here)
    try:
        return IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _rfc6052_ipv4(packed: bytes, prefix_length: int) -> IPv4Address:
    """The IPv4 address an RFC 6052 address of this prefix length carries.

    Bits 64-71 (the "u" octet) never carry address bits: drop them, and the
    IPv4 address follows the prefix directly.
    """
    if prefix_length == 96:
        return IPv4Address(packed[12:16])
    without_u = packed[:8] + packed[9:]
    start = prefix_length // 8
    return IPv4Address(without_u[start : start + 4])


def embedded_ipv4(ip: IPAddress) -> list[IPv4Address]:
    """Every IPv4 address an IPv6 address carries and may be routed to.

    IPv4-mapped ``::ffff:0:0/96``, IPv4-translated ``::ffff:0:0:0/96``,
    IPv4-compatible ``::/96``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``
    (at every prefix length RFC 6052 allows there, since the operator's is
    unknown), 6to4 ``2002::/16``, Teredo ``2001::/32`` (server and client)
    and ISATAP interface ids.
    """
    if isinstance(ip, IPv4Address):
        return []
    plain = IPv6Address(int(ip))  # without a scope id, for the range checks
    packed = plain.packed
    found: list[IPv4Address] = []
    if plain.ipv4_mapped is not None:
        found.append(plain.ipv4_mapped)
    if plain in _V4_TRANSLATED or plain in _NAT64_WELL_KNOWN:
        found.append(_rfc6052_ipv4(packed, 96))
    if plain in _V4_COMPATIBLE and int(plain) > 1:  # not :: or ::1
        found.append(_rfc6052_ipv4(packed, 96))
    if plain in _NAT64_LOCAL_USE:
        found.extend(_rfc6052_ipv4(packed, length) for length in _NAT64_LOCAL_PREFIX_LENGTHS)
    if plain.sixtofour is not None:
        found.append(plain.sixtofour)
    if plain.teredo is not None:
        found.extend(plain.teredo)
    if packed[8:12] in _ISATAP_MARKERS:
        found.append(IPv4Address(packed[12:16]))
    return found


def _is_translation(ip: IPv6Address) -> bool:
    """Whether ``ip`` stands for an IPv4 address and is judged by it alone."""
    return any(ip in net for net in (_V4_COMPATIBLE, _V4_TRANSLATED, _NAT64_WELL_KNOWN)) or (
        ip.ipv4_mapped is not None
    )


def _is_link_local(ip: IPAddress) -> bool:
    """Link-local or a cloud metadata endpoint: never fetched."""
    if isinstance(ip, IPv4Address):
        return ip in _V4_LINK_LOCAL or ip in METADATA_ADDRESSES
    plain = IPv6Address(int(ip))  # without a scope id
    return plain in _V6_LINK_LOCAL or plain in METADATA_ADDRESSES


def _is_not_global(ip: IPAddress) -> bool:
    """Whether ``ip`` itself (not what it carries) is not globally routable."""
    if isinstance(ip, IPv4Address):
        return any(ip in net for net in _V4_NOT_GLOBAL)
    plain = IPv6Address(int(ip))
    if _is_translation(plain):
        return int(plain) <= 1  # :: and ::1; the rest is judged by the IPv4 inside
    if plain not in _V6_GLOBAL_UNICAST:
        # unspecified, loopback, unique-local, link-local, site-local fec0::/10,
        # multicast, 100::/64, 64:ff9b:1::/48, 5f00::/16, and the unassigned rest
        return True
    return any(plain in net for net in _V6_NOT_GLOBAL_IN_2000)


def refusal(ip: IPAddress, *, deny_private: bool) -> str | None:
    """Why ``ip`` may not be fetched, or None when it may."""
    candidates: list[IPAddress] = [ip, *embedded_ipv4(ip)]
    for candidate in candidates:
        if _is_link_local(candidate):
            shown = str(ip) if candidate is ip else f"{ip} (carrying {candidate})"
            return f"{shown} is a link-local or cloud metadata address, which is never fetched"
    if deny_private:
        for candidate in candidates:
            if _is_not_global(candidate):
                shown = str(ip) if candidate is ip else f"{ip} (carrying {candidate})"
                return f"{shown} is not a public address (the server runs with --deny-private)"
    return None
