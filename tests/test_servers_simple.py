"""asyncai-mcp-simple's fetch and address policy, in process.

The policy is pure; ``fetch`` runs against a real HTTP server on 127.0.0.1
(port 0). The resolver is the one fake: DNS answers are the boundary, so a
test can make a name resolve to a metadata address or change its answer
between lookups (rebinding).
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from servers.simple.fetch import FetchError, fetch
from servers.simple.policy import parse_ip, refusal

ALWAYS_REFUSED = [
    "169.254.169.254",
    "169.254.0.1",
    "fe80::1",
    "fe80::1%1",
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::169.254.169.254",  # IPv4-compatible
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "2002:a9fe:a9fe::1",  # 6to4
    "fd00:ec2::254",  # AWS IMDS over IPv6
]
PRIVATE = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "fc00::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "224.0.0.1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"]


@pytest.mark.parametrize("address", ALWAYS_REFUSED)
@pytest.mark.parametrize("deny_private", [False, True])
def test_link_local_and_metadata_addresses_are_always_refused(
    address: str, deny_private: bool
) -> None:
    """Link-local and metadata addresses, in every IPv6 disguise, never pass."""
    reason = refusal(parse_ip(address), deny_private=deny_private)
    assert reason is not None
    assert "link-local or cloud metadata" in reason


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_pass_unless_denied(address: str) -> None:
    """Loopback and private ranges are allowed by default, refused with --deny-private."""
    ip = parse_ip(address)
    assert refusal(ip, deny_private=False) is None
    assert "not a public address" in (refusal(ip, deny_private=True) or "")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_always_pass(address: str) -> None:
    """Globally routable addresses pass either way."""
    assert refusal(parse_ip(address), deny_private=True) is None


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
