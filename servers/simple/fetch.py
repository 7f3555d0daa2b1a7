"""GET one URL with the standard library, checking every address first.

The host is resolved once, every address it resolves to is checked against
the policy (one refused address refuses the request), and the connection goes
to a checked address, never through a second lookup: a DNS answer that changes
between the check and the connect (rebinding) cannot reach a refused address.
TLS still verifies the certificate against the URL's host name. Redirects are
followed by hand (at most ``max_redirects``), each hop checked the same way.
No proxy is used, so the checked address is the one connected to.

The whole exchange has one deadline (``timeout``); the body is read in full,
never cut (tool output is unbounded, spec Decision 3).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from servers.simple.policy import parse_ip, refusal

__all__ = ["FetchError", "Response", "fetch"]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "asyncai-mcp-simple/0.1"

Resolver = Callable[..., Sequence[tuple[Any, ...]]]


class FetchError(Exception):
    """The URL could not be fetched; the message says why, for the model."""


@dataclass(frozen=True)
class Response:
    """A fetched response; any status, 2xx or not."""

    status: int
    content_type: str | None
    body: str


def fetch(
    url: str,
    *,
    deny_private: bool = False,
    timeout: float = 30.0,
    max_redirects: int = 10,
    resolver: Resolver = socket.getaddrinfo,
    ssl_context: ssl.SSLContext | None = None,
) -> Response:
    """GET ``url``, following redirects; raise :class:`FetchError` when it cannot."""
    deadline = time.monotonic() + timeout
    context = ssl_context or ssl.create_default_context()
    current = url
    for _ in range(max_redirects + 1):
        try:
            response, location = _get_once(
                current, deny_private, deadline, timeout, resolver, context
            )
        except FetchError as exc:
            if current != url:
                raise FetchError(f"redirect from {url} to {current}: {exc}") from exc
            raise
        if location is None:
            return response
        current = urljoin(current, location)
    raise FetchError(f"more than {max_redirects} redirects fetching {url}")


def _get_once(
    url: str,
    deny_private: bool,
    deadline: float,
    timeout: float,
    resolver: Resolver,
    context: ssl.SSLContext,
) -> tuple[Response, str | None]:
    """One request; returns the response, or the redirect target."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"unsupported URL scheme {parts.scheme!r} in {url} (use http or https)")
    host = parts.hostname
    if not host:
        raise FetchError(f"no host in URL {url}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise FetchError(f"bad port in URL {url}: {exc}") from exc
    addresses = _resolve_checked(host, port, deny_private, resolver)
    if scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=_remaining(deadline, timeout, url), context=context
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=_remaining(deadline, timeout, url))
    conn._create_connection = _pinned(addresses)  # type: ignore[attr-defined]  # http.client's hook
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request(
            "GET",
            path,
            headers={"User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity"},
        )
        resp = conn.getresponse()
        location = resp.getheader("Location")
        if resp.status in REDIRECT_STATUSES and location:
            return Response(resp.status, resp.getheader("Content-Type"), ""), location
        raw = _read_all(conn, resp, deadline, timeout, url)
        charset = resp.headers.get_content_charset() or "utf-8"
        try:
            body = raw.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            body = raw.decode("utf-8", errors="replace")
        return Response(resp.status, resp.getheader("Content-Type"), body), None
    except TimeoutError as exc:
        raise FetchError(f"timed out after {timeout:g}s fetching {url}") from exc
    except ssl.SSLError as exc:
        raise FetchError(f"TLS error talking to {host}: {exc}") from exc
    except http.client.HTTPException as exc:
        raise FetchError(f"bad HTTP response from {host}: {exc!r}") from exc
    except OSError as exc:
        raise FetchError(f"cannot connect to {host} port {port}: {exc}") from exc
    finally:
        conn.close()


def _resolve_checked(
    host: str, port: int, deny_private: bool, resolver: Resolver
) -> list[tuple[int, tuple[Any, ...]]]:
    """Every address of ``host``, each checked; one refusal refuses them all."""
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"cannot resolve {host}: {exc}") from exc
    addresses: list[tuple[int, tuple[Any, ...]]] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        ip = parse_ip(sockaddr[0])
        reason = refusal(ip, deny_private=deny_private)
        if reason is not None:
            via = "" if host == str(ip) else f" ({host} resolves to {ip})"
            raise FetchError(f"refused to fetch {host}{via}: {reason}")
        addresses.append((family, sockaddr))
    if not addresses:
        raise FetchError(f"cannot resolve {host}: no addresses")
    return addresses


def _pinned(addresses: list[tuple[int, tuple[Any, ...]]]) -> Callable[..., socket.socket]:
    """A replacement for ``socket.create_connection`` that only dials checked addresses."""

    def create_connection(
        _address: tuple[str, int], timeout: float | None = None, source_address: Any = None
    ) -> socket.socket:
        error: OSError | None = None
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            return sock
        assert error is not None
        raise error

    return create_connection


def _remaining(deadline: float, timeout: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"timed out after {timeout:g}s fetching {url}")
    return left


def _read_all(
    conn: http.client.HTTPConnection,
    resp: http.client.HTTPResponse,
    deadline: float,
    timeout: float,
    url: str,
) -> bytes:
    """The whole body, each read bounded by what is left of the deadline."""
    chunks: list[bytes] = []
    while True:
        if conn.sock is not None:
            conn.sock.settimeout(_remaining(deadline, timeout, url))
        chunk = resp.read(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
