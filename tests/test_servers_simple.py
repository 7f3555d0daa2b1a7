"""asyncai-mcp-simple's fetch and address policy, in process.

The policy is pure; ``fetch`` runs against real HTTP servers on 127.0.0.1
(port 0): a threaded ``http.server`` for well-behaved pages, and asyncio
servers that drip, stall or overfeed for the deadline and size limits. The
resolver is the one fake: DNS answers are the boundary, so a test can make a
name resolve to a metadata address or change its answer between lookups
(rebinding).
"""

from __future__ import annotations

import asyncio
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
from servers.simple.policy import embedded_ipv4, literal_ip, parse_ip, refusal
from servers.simple.server import build_server, parsed_json
from tests.fakes.loopback_http import Handler, serving

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
    # the metadata endpoints outside link-local, plain and carried: refused either way
    "100.100.100.200": (LINK_LOCAL, LINK_LOCAL),  # Alibaba Cloud
    "192.0.0.192": (LINK_LOCAL, LINK_LOCAL),  # Oracle Cloud
    "::ffff:100.100.100.200": (LINK_LOCAL, LINK_LOCAL),
    "::ffff:192.0.0.192": (LINK_LOCAL, LINK_LOCAL),
    "::100.100.100.200": (LINK_LOCAL, LINK_LOCAL),  # IPv4-compatible
    "64:ff9b::6464:64c8": (LINK_LOCAL, LINK_LOCAL),  # NAT64 of 100.100.100.200
    "64:ff9b::c000:c0": (LINK_LOCAL, LINK_LOCAL),  # NAT64 of 192.0.0.192
    "2002:6464:64c8::": (LINK_LOCAL, LINK_LOCAL),  # 6to4 of 100.100.100.200
    "2002:c000:c0::1": (LINK_LOCAL, LINK_LOCAL),  # 6to4 of 192.0.0.192
    "2001:0:c000:c0::1": (LINK_LOCAL, LINK_LOCAL),  # Teredo, server 192.0.0.192
    "fd00:ec2::254%1": (LINK_LOCAL, LINK_LOCAL),
    # their neighbours are only private
    "100.100.100.201": (OK, PRIVATE),
    "192.0.0.191": (OK, PRIVATE),
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
    docs/mcp.md promises: link-local and metadata never (in every IPv6 form that
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
            "/data.json": (200, "application/json", b'{"items": [{"name": "a"}]}'),
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

    async def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
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


async def test_ok_and_non_2xx_are_results(port: int) -> None:
    """200 and 500 both come back as responses with status, type and body."""
    ok = await fetch(f"http://127.0.0.1:{port}/ok")
    assert (ok.status, ok.content_type, ok.body) == (200, "text/plain; charset=utf-8", "fine ✓")
    err = await fetch(f"http://127.0.0.1:{port}/err")
    assert (err.status, err.body) == (500, "server broke")
    missing = await fetch(f"http://127.0.0.1:{port}/nowhere")
    assert missing.status == 404


async def test_body_is_decoded_with_its_charset(port: int) -> None:
    """The Content-Type charset decides the decoding."""
    assert (await fetch(f"http://127.0.0.1:{port}/latin")).body == "café"


async def test_redirects_are_followed_and_rechecked(port: int) -> None:
    """A redirect is followed; one to a metadata address is refused, naming both URLs."""
    assert (await fetch(f"http://127.0.0.1:{port}/redirect")).body == "fine ✓"
    with pytest.raises(FetchError) as refused:
        await fetch(f"http://127.0.0.1:{port}/to-metadata")
    message = str(refused.value)
    assert "redirect from" in message
    assert "169.254.169.254 is a link-local or cloud metadata address" in message
    with pytest.raises(FetchError, match="more than 3 redirects"):
        await fetch(f"http://127.0.0.1:{port}/loop", max_redirects=3)


async def test_names_resolving_to_refused_addresses_are_refused(port: int) -> None:
    """A DNS name is refused when any of its addresses is link-local."""
    with pytest.raises(FetchError, match=r"metadata\.test resolves to 169\.254\.169\.254"):
        await fetch("http://metadata.test/", resolver=resolver_for("169.254.169.254"))
    with pytest.raises(FetchError, match="link-local"):
        await fetch(
            f"http://mixed.test:{port}/ok", resolver=resolver_for("127.0.0.1,169.254.169.254")
        )
    with pytest.raises(FetchError, match="not a public address"):
        await fetch(
            f"http://internal.test:{port}/ok", deny_private=True, resolver=resolver_for("10.0.0.1")
        )


#: 169.254.169.254 as ``inet_aton`` (so getaddrinfo, and browsers) also read it.
METADATA_SPELLINGS = (
    "2852039166",
    "0xA9FEA9FE",
    "0xa9fea9fe",
    "0251.0376.0251.0376",
    "169.254.43518",
    "169.16689662",
    "0xa9.0xfe.0xa9.0xfe",
    "0251.254.169.0376",
)


@pytest.mark.parametrize("host", METADATA_SPELLINGS)
def test_every_spelling_of_an_ipv4_host_is_that_address(host: str) -> None:
    """A host in any of inet_aton's forms is read as the address it spells; a name
    (even one of hex digits, or with junk after a space) is not an address."""
    assert literal_ip(host) == ipaddress.IPv4Address("169.254.169.254")
    assert literal_ip("::ffff:169.254.169.254") == ipaddress.IPv6Address("::ffff:a9fe:a9fe")
    for name in ("example.com", "deadbeef", "a9fe.a9fe", "1.2.3.4 x", "", "1.2.3.4.5"):
        assert literal_ip(name) is None, name


async def test_metadata_addresses_are_refused_in_every_spelling_without_a_lookup() -> None:
    """Without --deny-private: every metadata endpoint, spelled as an integer, in hex,
    in octal, with short parts, or carried in IPv6, is refused before any lookup;
    a resolver that would answer a harmless address is never asked."""
    calls: list[str] = []
    harmless = resolver_for("127.0.0.1", calls=calls)
    hosts = [
        *METADATA_SPELLINGS,
        "100.100.100.200",
        "1684301000",  # 100.100.100.200
        "0x64.0x64.100.200",
        "192.0.0.192",
        "3221225664",  # 192.0.0.192
        "0300.0.0.0300",
        "[fd00:ec2::254]",
        "[::ffff:169.254.169.254]",
        "[::169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]",
        "[2002:a9fe:a9fe::]",
        "[2001:0:a9fe:a9fe::1]",
        "[::ffff:100.100.100.200]",
        "[64:ff9b::c000:c0]",
    ]
    for host in hosts:
        with pytest.raises(FetchError, match="link-local or cloud metadata address") as refused:
            await fetch(f"http://{host}/latest/meta-data/", resolver=harmless, timeout=5)
        assert "refused to fetch" in str(refused.value), host
    assert calls == []


async def test_names_resolving_to_any_metadata_endpoint_are_refused() -> None:
    """A name whose lookup answers a metadata endpoint (in any family or form) is
    refused after the lookup, without --deny-private, naming what it resolved to."""
    for address in ("100.100.100.200", "192.0.0.192", "fd00:ec2::254", "64:ff9b::a9fe:a9fe"):
        with pytest.raises(FetchError, match="link-local or cloud metadata address") as refused:
            await fetch("http://metadata.test/", resolver=resolver_for(address), timeout=5)
        assert f"metadata.test resolves to {address}" in str(refused.value)


async def test_connection_goes_to_the_checked_address(port: int) -> None:
    """The name is resolved once and the checked address dialled: a second
    answer pointing at the metadata service (rebinding) is never asked for,
    and the request still carries the name in its Host header."""
    calls: list[str] = []
    resolver = resolver_for("127.0.0.1", "169.254.169.254", calls=calls)
    page = await fetch(f"http://rebind.test:{port}/host", resolver=resolver)
    assert page.body == f"rebind.test:{port}"
    assert calls == ["rebind.test"]


async def test_unreachable_and_bad_urls_are_errors() -> None:
    """A refused connection, an unknown scheme, and a missing host are FetchErrors."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(FetchError, match=f"cannot connect to 127.0.0.1 port {dead_port}"):
        await fetch(f"http://127.0.0.1:{dead_port}/")
    with pytest.raises(FetchError, match="unsupported URL scheme 'file'"):
        await fetch("file:///etc/passwd")
    with pytest.raises(FetchError, match="no host"):
        await fetch("http:///path")


async def test_a_server_that_never_answers_times_out() -> None:
    """The deadline covers the whole exchange: a silent server ends in a FetchError."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        with pytest.raises(FetchError, match=r"timed out after 0\.3s"):
            await fetch(url, timeout=0.3)


async def drip(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send ``data`` one byte at a time, 20 bytes a second."""
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0.05)


async def drip_status_line(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A status line that never ends (its reason phrase keeps growing)."""
    await drip(writer, b"HTTP/1.1 200 " + b"O" * 10_000)


async def drip_headers(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A status line, then header lines one byte at a time."""
    writer.write(b"HTTP/1.1 200 OK\r\n")
    await drip(writer, b"X-Drip: a\r\n" * 1000)


async def endless_continue(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``100 Continue`` after ``100 Continue``, each one whole and prompt."""
    while True:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.02)


async def drip_body(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Headers at once, then a long body one byte at a time."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n")
    await drip(writer, b"x" * 10_000)


@pytest.mark.parametrize(
    "handler",
    [drip_status_line, drip_headers, endless_continue, drip_body],
    ids=["status-line", "headers", "100-continue", "body"],
)
async def test_a_dripping_server_cannot_stretch_the_deadline(handler: Handler) -> None:
    """--timeout is one deadline for the whole fetch: a server that keeps
    sending a little of the status line, the headers, interim 100 responses
    or the body still ends the fetch at its deadline with a timeout error."""
    async with serving(handler) as port:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(FetchError, match=r"timed out after 0\.5s fetching http://127"):
            async with asyncio.timeout(15):  # the bug: far longer than the deadline
                await fetch(f"http://127.0.0.1:{port}/", timeout=0.5)
        assert loop.time() - started < 0.5 + 5  # generous: a loaded 2-core machine


async def test_many_slow_fetches_do_not_starve_a_fast_one(port: int) -> None:
    """60 fetches stalled on a server that never answers are all in flight at
    once; a fetch to a fast host still succeeds while they wait, and every
    stalled one ends at its deadline and closes its connection."""
    accepted = 0
    all_in = asyncio.Event()
    closed: list[bool] = []
    all_closed = asyncio.Event()

    async def stall(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        if accepted == 60:
            all_in.set()
        try:
            closed.append(await reader.read(1) == b"")
        except ConnectionResetError:  # an abort may arrive as a reset
            closed.append(True)
        if len(closed) == 60:
            all_closed.set()

    async with serving(stall) as slow_port:
        slow = [
            asyncio.create_task(fetch(f"http://127.0.0.1:{slow_port}/{i}", timeout=2))
            for i in range(60)
        ]
        async with asyncio.timeout(10):
            await all_in.wait()
        fast = await fetch(f"http://127.0.0.1:{port}/ok", timeout=2)
        assert fast.body == "fine ✓"
        assert not any(task.done() for task in slow)
        results = await asyncio.gather(*slow, return_exceptions=True)
        assert all(isinstance(r, FetchError) and "timed out after 2s" in str(r) for r in results)
        async with asyncio.timeout(5):
            await all_closed.wait()
        assert all(closed)


async def headers_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Declares a 5000-byte body and never sends it."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
    await writer.drain()
    await reader.read()  # until the client leaves


async def chunked_5000(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """5000 bytes in 500-byte chunks, no length declared."""
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _chunk in range(10):
        writer.write(b"1f4\r\n" + b"x" * 500 + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def until_close_5000(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """5000 bytes ended by closing the connection (HTTP/1.0 style)."""
    writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000)
    await writer.drain()


async def exactly_1000(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A body of exactly the limit, chunked."""
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n")
    writer.write(b"y" * 1000 + b"\r\n0\r\n\r\n")
    await writer.drain()


async def test_a_declared_length_over_max_bytes_is_refused_before_the_body() -> None:
    """A Content-Length above --max-bytes is an error at once, naming both
    sizes; the body is never waited for (the server never sends it)."""
    async with serving(headers_only) as port:
        with pytest.raises(FetchError, match="5000 bytes, more than the limit of 1000 bytes"):
            await fetch(f"http://127.0.0.1:{port}/", max_bytes=1000, timeout=10)


@pytest.mark.parametrize("handler", [chunked_5000, until_close_5000], ids=["chunked", "eof"])
async def test_a_body_growing_past_max_bytes_is_an_error(handler: Handler) -> None:
    """A body without a declared length that grows past --max-bytes ends the
    fetch with an error that says so; it is never cut silently."""
    async with serving(handler) as port:
        with pytest.raises(FetchError, match="more than the limit of 1000 bytes"):
            await fetch(f"http://127.0.0.1:{port}/", max_bytes=1000, timeout=10)


async def test_a_body_of_exactly_max_bytes_is_whole() -> None:
    """A body of exactly --max-bytes comes back whole."""
    async with serving(exactly_1000) as port:
        page = await fetch(f"http://127.0.0.1:{port}/", max_bytes=1000, timeout=10)
    assert page.body == "y" * 1000


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        ('{"a": [1, 2]}', "application/json", (True, {"a": [1, 2]})),
        ("[1, 2]", "application/problem+json; charset=utf-8", (True, [1, 2])),
        ("42", "application/json", (True, 42)),
        ("null", "text/json", (True, None)),
        ('  {"a": 1}', "text/plain", (True, {"a": 1})),  # JSON labelled as text
        ("[1, 2]", None, (True, [1, 2])),
        ("42", "text/plain", (False, None)),  # a number in a text page stays text
        ("item,stock\nbolts,120\n", "text/csv", (False, None)),
        ("{not json", "application/json", (False, None)),
        ("", "application/json", (False, None)),
    ],
)
def test_http_get_parses_a_json_body(
    body: str, content_type: str | None, expected: tuple[bool, Any]
) -> None:
    """``json`` is present when the body is JSON: a JSON media type whatever it holds,
    another type only for an object or an array; anything else leaves it out."""
    assert parsed_json(body, content_type) == expected


@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=40)))
def test_parsed_json_answers_any_body(body: str, content_type: str | None) -> None:
    """Any body and content type: a parsed value or (False, None), never an exception."""
    ok, value = parsed_json(body, content_type)
    assert ok or value is None


async def test_http_get_result_has_json_only_for_a_json_body(port: int) -> None:
    """Through the MCP server: a JSON page's result carries the parsed body as ``json``
    beside the body text; a text page's has no ``json`` key."""
    server = build_server()
    data = await server.call_tool("http_get", {"url": f"http://127.0.0.1:{port}/data.json"})
    text = await server.call_tool("http_get", {"url": f"http://127.0.0.1:{port}/ok"})
    assert data.structured_content == {
        "status": 200,
        "content_type": "application/json",
        "body": '{"items": [{"name": "a"}]}',
        "json": {"items": [{"name": "a"}]},
    }
    assert text.structured_content is not None
    assert "json" not in text.structured_content
