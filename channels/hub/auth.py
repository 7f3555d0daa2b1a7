"""Who a connection is: the handshake maps a bearer token to a nick, or refuses it.

With tokens configured, a token is required and names the nick. Without
tokens, clients name themselves with ``hello`` and only loopback connections
are accepted. A refusal is a plain-text HTTP answer saying why.
"""

from __future__ import annotations

import hmac
import ipaddress
import urllib.parse
import weakref
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from channels.hub.connection import peer

__all__ = ["Authenticator", "is_loopback", "presented_token"]

log = structlog.get_logger("channels.hub")


def is_loopback(address: Any) -> bool:
    """True if ``address`` (a socket address tuple) is a loopback IP, IPv4-mapped included."""
    try:
        ip = ipaddress.ip_address(address[0])
    except (TypeError, ValueError, IndexError):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def presented_token(request: Request) -> str | None:
    """The bearer token of the handshake: ``Authorization: Bearer …`` first, then ``?token=``."""
    auth = request.headers.get("Authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    query = urllib.parse.urlsplit(request.path).query
    values = urllib.parse.parse_qs(query).get("token")
    return values[0] if values else None


def _refuse(status: HTTPStatus, text: str) -> Response:
    body = (text + "\n").encode()
    headers = Headers(
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return Response(status.value, status.phrase, headers, body)


class Authenticator:
    """The handshake's ``process_request``: accept (remembering the nick) or refuse.

    ``tokens`` maps bearer tokens to nicks. The nick a token names is kept
    until the connection's handler takes it with :meth:`pop`.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self.tokens = tokens
        self._identities: weakref.WeakKeyDictionary[ServerConnection, str] = (
            weakref.WeakKeyDictionary()
        )

    def pop(self, ws: ServerConnection) -> str | None:
        """The nick the token of ``ws`` named (once), or None (no tokens: hello decides)."""
        return self._identities.pop(ws, None)

    def __call__(self, ws: ServerConnection, request: Request) -> Response | None:
        """Map the bearer token to a nick, or refuse the handshake with a plain-text reason."""
        token = presented_token(request)
        if self.tokens:
            if token is None:
                return _refuse(
                    HTTPStatus.UNAUTHORIZED,
                    "a token is required: send 'Authorization: Bearer TOKEN' or ?token=TOKEN",
                )
            nick = None
            for known, who in self.tokens.items():
                # Compare every token in constant time, so timing tells nothing.
                if hmac.compare_digest(known.encode(), token.encode()):
                    nick = who
            if nick is None:
                log.warning("hub.unknown_token", peer=peer(ws))
                return _refuse(HTTPStatus.UNAUTHORIZED, "unknown token")
            self._identities[ws] = nick
            return None
        if token is not None:
            return _refuse(
                HTTPStatus.UNAUTHORIZED,
                "this hub has no tokens configured: connect without a token and send hello",
            )
        if not is_loopback(ws.remote_address):
            log.warning("hub.refused_remote_hello", peer=peer(ws))
            return _refuse(
                HTTPStatus.FORBIDDEN,
                "this hub has no tokens, so it accepts only loopback connections",
            )
        return None
