"""GET one URL on asyncio, checking every address first.

The host is resolved once (a host that spells an address, in any of
``inet_aton``'s forms, is that address: no lookup), every address it resolves to is checked against
the policy (one refused address refuses the request), and the connection goes
to a checked address, never through a second lookup: a DNS answer that changes
between the check and the connect (rebinding) cannot reach a refused address.
TLS still verifies the certificate against the URL's host name. Redirects are
followed by hand (at most ``max_redirects``), each hop checked the same way.
No proxy is used, so the checked address is the one connected to.

One deadline (``timeout``) covers the whole fetch: resolving, connecting, the
TLS handshake, the status line, any number of ``1xx`` interim responses, the
headers, the body and every redirect. It is one ``asyncio.timeout`` around
all of it, so a server that drips bytes cannot stretch it, and a fetch holds
no thread while it waits (only a DNS lookup of a name borrows the loop's
executor), so many slow fetches cannot starve a fast one. The socket is
aborted however the fetch ends.

The body is bounded by ``max_bytes``: a declared ``Content-Length`` above it
is refused before the body is read, and a body that grows past it while
streaming ends the fetch with an error; it is never cut silently.

HTTP/1.1 is parsed by h11, a state machine without I/O; this module only
moves bytes between it and the socket.
"""

from __future__ import annotations

import asyncio
import email.message
import functools
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import h11

from servers.simple.policy import literal_ip, parse_ip, refusal

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT", "FetchError", "Resolver", "Response", "fetch"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "asyncai-mcp-simple/0.1"
READ_SIZE = 65536
# What may stay unquoted in a request target: RFC 3986's reserved and
# unreserved characters, plus "%" so existing escapes survive.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~"

#: ``getaddrinfo``'s answer for ``(host, port)``: ``(family, type, proto, canonname, sockaddr)``.
Resolver = Callable[[str, int], Awaitable[Sequence[tuple[Any, ...]]]]


class FetchError(Exception):
    """The URL could not be fetched; the message says why, for the model."""


@dataclass(frozen=True)
class Response:
    """A fetched response; any status, 2xx or not."""

    status: int
    content_type: str | None
    body: str


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """One context for every fetch: loading the CA store takes tens of
    milliseconds, on the loop, so a context per fetch would let 100 gathered
    fetches stall every other one for seconds."""
    return ssl.create_default_context()


async def system_resolver(host: str, port: int) -> Sequence[tuple[Any, ...]]:
    """The system's ``getaddrinfo``, run on the loop's executor."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)


async def fetch(
    url: str,
    *,
    deny_private: bool = False,
    # the fetch's own deadline is its contract (the error names it), not a
    # caller's cancel scope: the callers here have none
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_redirects: int = 10,
    resolver: Resolver = system_resolver,
    ssl_context: ssl.SSLContext | None = None,
) -> Response:
    """GET ``url``, following redirects; raise :class:`FetchError` when it cannot."""
    context = ssl_context or _default_ssl_context()
    try:
        async with asyncio.timeout(timeout):
            return await _follow(url, deny_private, max_bytes, max_redirects, resolver, context)
    except TimeoutError as exc:
        raise FetchError(f"timed out after {timeout:g}s fetching {url}") from exc


async def _follow(
    url: str,
    deny_private: bool,
    max_bytes: int,
    max_redirects: int,
    resolver: Resolver,
    context: ssl.SSLContext,
) -> Response:
    current = url
    for _ in range(max_redirects + 1):
        try:
            response, location = await _get_once(
                current, deny_private, max_bytes, resolver, context
            )
        except FetchError as exc:
            if current != url:
                raise FetchError(f"redirect from {url} to {current}: {exc}") from exc
            raise
        if location is None:
            return response
        current = urljoin(current, location)
    raise FetchError(f"more than {max_redirects} redirects fetching {url}")


async def _get_once(
    url: str,
    deny_private: bool,
    max_bytes: int,
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
    addresses = await _resolve_checked(host, port, deny_private, resolver)
    tls = context if scheme == "https" else None
    reader, writer = await _connect(host, port, addresses, tls)
    target = quote(parts.path or "/", safe=_TARGET_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_TARGET_SAFE)
    try:
        return await _exchange(reader, writer, _host_header(host, parts.port), target, max_bytes)
    except ssl.SSLError as exc:
        raise FetchError(f"TLS error talking to {host}: {exc}") from exc
    except h11.RemoteProtocolError as exc:
        raise FetchError(f"bad HTTP response from {host}: {exc}") from exc
    except h11.LocalProtocolError as exc:
        raise FetchError(f"cannot request {url}: {exc}") from exc
    except OSError as exc:
        raise FetchError(f"connection to {host} port {port} broke: {exc}") from exc
    finally:
        # abort, not close: no TLS close_notify or buffered write to wait for,
        # so a fetch ended by its deadline frees its socket at once.
        writer.transport.abort()


async def _resolve_checked(
    host: str, port: int, deny_private: bool, resolver: Resolver
) -> list[tuple[int, str]]:
    """Every address of ``host``, each checked; one refusal refuses them all."""
    literal = literal_ip(host)
    if literal is None:
        try:
            infos = await resolver(host, port)
        except (socket.gaierror, UnicodeError) as exc:
            raise FetchError(f"cannot resolve {host}: {exc}") from exc
    else:  # an address in the URL (in any spelling) needs no lookup, so no executor thread
        family = socket.AF_INET6 if literal.version == 6 else socket.AF_INET
        infos = [(family, socket.SOCK_STREAM, 6, "", (str(literal), port))]
    addresses: list[tuple[int, str]] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        ip = parse_ip(sockaddr[0])
        reason = refusal(ip, deny_private=deny_private)
        if reason is not None:
            via = "" if host == str(ip) else f" ({host} resolves to {ip})"
            raise FetchError(f"refused to fetch {host}{via}: {reason}")
        addresses.append((family, str(ip)))
    if not addresses:
        raise FetchError(f"cannot resolve {host}: no addresses")
    return addresses


async def _connect(
    host: str, port: int, addresses: list[tuple[int, str]], tls: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first checked address that answers; TLS names ``host``."""
    error: OSError | None = None
    for family, address in addresses:
        try:
            return await asyncio.open_connection(
                address,
                port,
                family=family,
                ssl=tls,
                server_hostname=host if tls is not None else None,
            )
        except ssl.SSLError as exc:
            raise FetchError(f"TLS error talking to {host}: {exc}") from exc
        except OSError as exc:
            error = exc
    raise FetchError(f"cannot connect to {host} port {port}: {error}")


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host_header: str,
    target: str,
    max_bytes: int,
) -> tuple[Response, str | None]:
    """Send the GET and read the answer through h11, the body capped at ``max_bytes``."""
    conn = h11.Connection(our_role=h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=target,
        headers=[
            ("Host", host_header),
            ("User-Agent", USER_AGENT),
            ("Accept", "*/*"),
            ("Accept-Encoding", "identity"),
            ("Connection", "close"),
        ],
    )
    writer.write(conn.send(request) + (conn.send(h11.EndOfMessage()) or b""))
    await writer.drain()
    head: h11.Response | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ_SIZE))  # b"" tells h11 of EOF
        elif isinstance(event, h11.Response):
            head = event
            location = _header(event, b"location")
            if event.status_code in REDIRECT_STATUSES and location:
                return Response(event.status_code, _header(event, b"content-type"), ""), location
            declared = _header(event, b"content-length")
            if declared is not None and int(declared) > max_bytes:
                raise FetchError(
                    f"the body is {declared} bytes, more than the limit of {max_bytes} "
                    "bytes (the server's --max-bytes)"
                )
        elif isinstance(event, h11.Data):
            if len(body) + len(event.data) > max_bytes:
                raise FetchError(
                    f"the body is more than the limit of {max_bytes} bytes "
                    "(the server's --max-bytes)"
                )
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
        # InformationalResponse (1xx): skipped; an endless stream of them
        # only runs into the deadline.
    assert head is not None  # h11 yields a Response before any Data or EndOfMessage
    content_type = _header(head, b"content-type")
    return Response(head.status_code, content_type, _decode(body, content_type)), None


def _host_header(host: str, port: int | None) -> str:
    """The Host header: the URL's host (IDNA-encoded, IPv6 in brackets) and
    its port when the URL names one."""
    try:
        name = host.encode("idna").decode("ascii")
    except UnicodeError:  # checked by the lookup already; kept for a literal's sake
        name = host
    if ":" in name:
        name = f"[{name}]"
    return name if port is None else f"{name}:{port}"


def _header(event: h11.Response, name: bytes) -> str | None:
    """The first value of header ``name`` (h11 lowercases names), as Latin-1."""
    for key, value in event.headers:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _decode(body: bytearray, content_type: str | None) -> str:
    """The body decoded with its charset, UTF-8 otherwise, bad bytes replaced."""
    charset = "utf-8"
    if content_type:
        message = email.message.Message()
        message["Content-Type"] = content_type
        charset = message.get_content_charset() or "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")
