"""asyncai-mcp-simple's fetch and address policy, in process.

The policy is pure; ``fetch`` runs against real HTTP servers on 127.0.0.1
(port 0). The
resolver is the one fake: DNS answers are the boundary, so a test can make a
name resolve to a metadata address or change its answer between lookups
(rebinding).
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servers.simple.fetch import FetchError, fetch
from servers.simple.policy import embedded_ipv4, parse_ip, refusal

OK, LINK_LOCAL, PRIVATE = "ok", "link-local", "private"
#: address -> (without --deny-private, with --deny-private)
POLICY_TABLE: dict[str, tuple[str, str]] = {
    # link-local and metadata, plain and carried inside IPv6: refused either way
    "169.254.169.254": (LINK_LOCAL, LINK_LOCAL),
    "169.254.0.1": (LINK_LOCAL, LINK_LOCAL),
    "fe80::1": (LINK_LOCAL, LINK_LOCAL),
    "fe80::1%1": (LINK_LOCAL, LINK_LOCAL),
    "fd00:ec2::254": (LINK_LOCAL, LINK_LOCAL),  # AWS IMDS over IPv6
    "::ffff:169.254.169.254": (LINK_LOCAL, LINK_LOCAL),  # IPv4-mapped
    "::169.254.169.254": (LINK_LOCAL, LINK_LOCAL),  # IPv4-compatible
    "::ffff:0:a9fe:a9fe": (LINK_LOCAL, LINK_LOCAL),  # IPv4-translated (SIIT)
    "64:ff9b::a9fe:a9fe": (LINK_LOCAL, LINK_LOCAL),  # NAT64 well-known prefix
    "64:ff9b:1::a9fe:a9fe": (LINK_LOCAL, LINK_LOCAL),  # NAT64 local-use, /96
    "64:ff9b:1:a9fe:a9:fe00::": (LINK_LOCAL, LINK_LOCAL),  # NAT64 local-use, /48
    "64:ff9b:1:0:a9:fea9:fe00:0": (LINK_LOCAL, LINK_LOCAL),  # NAT64 local-use, /64
    "2002:a9fe:a9fe::1": (LINK_LOCAL, LINK_LOCAL),  # 6to4
    "2001:0:a9fe:a9fe::1": (LINK_LOCAL, LINK_LOCAL),  # Teredo server
    "2001:0:808:808::5601:5601": (LINK_LOCAL, LINK_LOCAL),  # Teredo client (inverted)
    "2600::5efe:a9fe:a9fe": (LINK_LOCAL, LINK_LOCAL),  # ISATAP interface id
    # not globally routable: allowed by default, refused with --deny-private
    "127.0.0.1": (OK, PRIVATE),
    "10.1.2.3": (OK, PRIVATE),
    "172.16.0.1": (OK, PRIVATE),
    "192.168.1.1": (OK, PRIVATE),
    "100.64.0.1": (OK, PRIVATE),  # carrier-grade NAT
    "0.0.0.0": (OK, PRIVATE),
    "192.0.0.8": (OK, PRIVATE),
    "192.0.2.1": (OK, PRIVATE),  # documentation
    "198.18.0.1": (OK, PRIVATE),  # benchmarking
    "224.0.0.1": (OK, PRIVATE),  # multicast
    "240.0.0.1": (OK, PRIVATE),  # reserved
    "255.255.255.255": (OK, PRIVATE),
    "::": (OK, PRIVATE),
    "::1": (OK, PRIVATE),
    "fc00::1": (OK, PRIVATE),  # unique-local
    "fec0::1": (OK, PRIVATE),  # site-local (deprecated, still not global)
    "ff02::1": (OK, PRIVATE),  # multicast
    "ff0e::1": (OK, PRIVATE),  # global-scope multicast is still multicast
    "100::1": (OK, PRIVATE),  # discard-only
    "2001:db8::1": (OK, PRIVATE),  # documentation
    "3fff::1": (OK, PRIVATE),  # documentation (RFC 9637)
    "5f00::1": (OK, PRIVATE),  # SRv6 SIDs
    "::ffff:127.0.0.1": (OK, PRIVATE),
    "::ffff:10.0.0.1": (OK, PRIVATE),
    "::10.0.0.1": (OK, PRIVATE),
    "::ffff:0:a00:1": (OK, PRIVATE),
    "64:ff9b::a00:1": (OK, PRIVATE),
    "64:ff9b:1::a00:1": (OK, PRIVATE),  # 10.0.0.1 behind the local-use NAT64 prefix
    "64:ff9b:1::808:808": (OK, PRIVATE),  # the local-use prefix itself is not global
    "2002:a00:1::1": (OK, PRIVATE),  # 6to4 of 10.0.0.1
    "2001:0:a00:1::1": (OK, PRIVATE),  # Teredo, server 10.0.0.1
    # public: allowed either way
    "8.8.8.8": (OK, OK),
    "1.1.1.1": (OK, OK),
    "2606:4700:4700::1111": (OK, OK),
    "::ffff:8.8.8.8": (OK, OK),
    "64:ff9b::808:808": (OK, OK),
    "2002:808:808::1": (OK, OK),
}


def verdict(address: str, *, deny_private: bool) -> str:
    """The policy's answer as one of OK, LINK_LOCAL, PRIVATE."""
    reason = refusal(parse_ip(address), deny_private=deny_private)
    if reason is None:
        return OK
    if "link-local or cloud metadata" in reason:
        return LINK_LOCAL
    assert "not a public address (the server runs with --deny-private)" in reason
    return PRIVATE


@pytest.mark.parametrize(("address", "expected"), POLICY_TABLE.items())
def test_address_policy_table(address: str, expected: tuple[str, str]) -> None:
    """Each address is allowed or refused, for its stated reason, as the
    README promises: link-local and metadata never (in every IPv6 form that
    carries an IPv4 address), anything not globally routable only with
    --deny-private, public addresses always allowed."""
    assert (verdict(address, deny_private=False), verdict(address, deny_private=True)) == expected


def ipv6_forms(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    """Every IPv6 form that carries ``v4``."""
    n = int(v4)
    b = v4.packed
    nat64_local = int(ipaddress.IPv6Address("64:ff9b:1::"))

    def rfc6052(length: int) -> int:
        """``v4`` under 64:ff9b:1::/48 at an RFC 6052 prefix length below 64."""
        start = length // 8
        without_u = bytearray(ipaddress.IPv6Address(nat64_local).packed[:start] + b)
        without_u += bytes(15 - len(without_u))
        return int.from_bytes(without_u[:8] + b"\0" + without_u[8:], "big")

    return [
        ipaddress.IPv6Address(value)
        for value in (
            0xFFFF << 32 | n,  # mapped
            0xFFFF << 48 | n,  # translated
            n if n > 1 else None,  # compatible (::, ::1 are themselves)
            int(ipaddress.IPv6Address("64:ff9b::")) | n,
            nat64_local | n,
            nat64_local | n << 24,  # /64: bits 72-103
            rfc6052(48),
            rfc6052(56),
            0x2002 << 112 | n << 80 | 1,  # 6to4
            0x20010000 << 96 | n << 64 | 1,  # Teredo server
            0x20010000 << 96 | 0x08080808 << 64 | (~n & 0xFFFFFFFF),  # Teredo client
            0x2600 << 112 | 0x5EFE << 32 | n,  # ISATAP
        )
        if value is not None
    ]


@given(st.integers(0, 0xFFFF).map(lambda low: ipaddress.IPv4Address(0xA9FE0000 | low)))
def test_every_form_of_a_link_local_address_is_refused(v4: ipaddress.IPv4Address) -> None:
    """Any 169.254.0.0/16 address, in any IPv6 form that carries it, is
    refused without --deny-private."""
    for form in ipv6_forms(v4):
        assert v4 in embedded_ipv4(form), form
        assert verdict(str(form), deny_private=False) == LINK_LOCAL, form


@given(
    st.sampled_from(["10.0.0.0/8", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]).flatmap(
        lambda net: st.integers(0, ipaddress.IPv4Network(net).num_addresses - 1).map(
            lambda i: ipaddress.IPv4Network(net)[i]
        )
    )
)
def test_every_form_of_a_private_address_is_refused_with_deny_private(
    v4: ipaddress.IPv4Address,
) -> None:
    """Any RFC 1918 or loopback address, in any IPv6 form that carries it, is
    refused with --deny-private."""
    for form in ipv6_forms(v4):
        assert verdict(str(form), deny_private=True) != OK, form


@given(st.ip_addresses())
def test_policy_answers_every_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """Any address gets an answer (None or a reason), never an exception."""
    for deny_private in (False, True):
        reason = refusal(ip, deny_private=deny_private)
        assert reason is None or str(ip) in reason


REDIRECTS = {
    "/redirect": "/ok",
    "/to-metadata": "http://169.254.169.254/latest/meta-data/",
    "/loop": "/loop",
}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Pages for the fetch tests."""

    def do_GET(self) -> None:
        if self.path in REDIRECTS:
            self.send_response(302)
            self.send_header("Location", REDIRECTS[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, ctype, body = {
            "/ok": (200, "text/plain; charset=utf-8", "fine ✓".encode()),
            "/err": (500, "text/plain", b"server broke"),
            "/latin": (200, "text/plain; charset=iso-8859-1", "café".encode("latin-1")),
            "/host": (200, "text/plain", (self.headers["Host"] or "").encode()),
        }.get(self.path, (404, "text/html", b"<h1>missing</h1>"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def resolver_for(*answers: str, calls: list[str] | None = None) -> Any:
    """A getaddrinfo stand-in: the n-th lookup answers ``answers[n]`` (the
    last one repeats); each answer may list several addresses, comma-separated."""

    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        seen = calls if calls is not None else []
        answer = answers[min(len(seen), len(answers) - 1)]
        seen.append(host)
        infos = []
        for address in answer.split(","):
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
            infos.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return infos

    return resolve


def test_ok_and_non_2xx_are_results(port: int) -> None:
    """200 and 500 both come back as responses with status, type and body."""
    ok = fetch(f"http://127.0.0.1:{port}/ok")
    assert (ok.status, ok.content_type, ok.body) == (200, "text/plain; charset=utf-8", "fine ✓")
    err = fetch(f"http://127.0.0.1:{port}/err")
    assert (err.status, err.body) == (500, "server broke")
    missing = fetch(f"http://127.0.0.1:{port}/nowhere")
    assert missing.status == 404


def test_body_is_decoded_with_its_charset(port: int) -> None:
    """The Content-Type charset decides the decoding."""
    assert fetch(f"http://127.0.0.1:{port}/latin").body == "café"


def test_redirects_are_followed_and_rechecked(port: int) -> None:
    """A redirect is followed; one to a metadata address is refused, naming both URLs."""
    assert fetch(f"http://127.0.0.1:{port}/redirect").body == "fine ✓"
    with pytest.raises(FetchError) as refused:
        fetch(f"http://127.0.0.1:{port}/to-metadata")
    message = str(refused.value)
    assert "redirect from" in message
    assert "169.254.169.254 is a link-local or cloud metadata address" in message
    with pytest.raises(FetchError, match="more than 3 redirects"):
        fetch(f"http://127.0.0.1:{port}/loop", max_redirects=3)


def test_names_resolving_to_refused_addresses_are_refused(port: int) -> None:
    """A DNS name is refused when any of its addresses is link-local."""
    with pytest.raises(FetchError, match=r"metadata\.test resolves to 169\.254\.169\.254"):
        fetch("http://metadata.test/", resolver=resolver_for("169.254.169.254"))
    with pytest.raises(FetchError, match="link-local"):
        fetch(f"http://mixed.test:{port}/ok", resolver=resolver_for("127.0.0.1,169.254.169.254"))
    with pytest.raises(FetchError, match="not a public address"):
        fetch(
            f"http://internal.test:{port}/ok", deny_private=True, resolver=resolver_for("10.0.0.1")
        )


def test_connection_goes_to_the_checked_address(port: int) -> None:
    """The name is resolved once and the checked address dialled: a second
    answer pointing at the metadata service (rebinding) is never asked for,
    and the request still carries the name in its Host header."""
    calls: list[str] = []
    resolver = resolver_for("127.0.0.1", "169.254.169.254", calls=calls)
    page = fetch(f"http://rebind.test:{port}/host", resolver=resolver)
    assert page.body == f"rebind.test:{port}"
    assert calls == ["rebind.test"]


def test_unreachable_and_bad_urls_are_errors() -> None:
    """A refused connection, an unknown scheme, and a missing host are FetchErrors."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(FetchError, match=f"cannot connect to 127.0.0.1 port {dead_port}"):
        fetch(f"http://127.0.0.1:{dead_port}/")
    with pytest.raises(FetchError, match="unsupported URL scheme 'file'"):
        fetch("file:///etc/passwd")
    with pytest.raises(FetchError, match="no host"):
        fetch("http:///path")


def test_a_server_that_never_answers_times_out() -> None:
    """The deadline covers the whole exchange: a silent server ends in a FetchError."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        with pytest.raises(FetchError, match=r"timed out after 0\.3s"):
            fetch(url, timeout=0.3)
