"""Reaching the hub: one attempt (open the websocket, authenticate, wait for
``welcome``), and the retries around it that an injectable backoff paces (:class:`Dialer`).

This is the one place where websockets' connection errors become the
channels' own: a refused token is :class:`~channels.errors.UnauthorizedError`
(not retried), anything else that keeps us from the hub is
:class:`~channels.errors.HubUnreachableError` (the caller's backoff decides).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.uri import parse_uri

from channels.client.backoff import Backoff
from channels.client.protocol import ClientProtocol
from channels.errors import (
    ChannelClosedError,
    ChannelConfigError,
    HubUnreachableError,
    UnauthorizedError,
)
from channels.frames import Welcome
from channels.names import is_nick

__all__ = ["Dialer", "check_settings", "open_connection"]


def check_settings(url: str, token: str | None, nick: str | None) -> None:
    """Raise :class:`ChannelConfigError` if no connection could be made with these."""
    try:
        parse_uri(url)
    except (InvalidURI, ValueError) as exc:  # ValueError: urllib on a bad port or bracket
        raise ChannelConfigError(f"invalid hub URL {url!r}: {exc}") from exc
    if token is None and nick is None:
        raise ChannelConfigError("a nick is needed to connect without a token")
    if nick is not None and not is_nick(nick):
        raise ChannelConfigError(f"invalid nick {nick!r}: 1-64 of letters, digits, '-', '_', '.'")


def _abort(ws: ClientConnection | None) -> None:
    """Drop a connection that never became a session (no close handshake to wait for)."""
    if ws is not None:
        ws.transport.abort()


async def open_connection(
    protocol: ClientProtocol,
    *,
    token: str | None,
    connect_timeout: float,
    close_timeout: float,
    max_size: int,
    ping_interval: float | None,
) -> tuple[ClientConnection, Welcome]:
    """Connect to ``protocol.url`` and authenticate, within ``connect_timeout``.

    Returns the open connection and the hub's ``welcome``; the connection is
    aborted on any failure, cancellation included.
    """
    url = protocol.url
    headers = [("Authorization", f"Bearer {token}")] if token else []
    ws: ClientConnection | None = None
    try:
        async with asyncio.timeout(connect_timeout):
            ws = await connect(
                url,
                additional_headers=headers,
                compression=None,
                max_size=max_size,
                open_timeout=None,  # the enclosing timeout bounds the whole attempt
                close_timeout=close_timeout,
                ping_interval=ping_interval,
                ping_timeout=ping_interval,
            )
            greeting = protocol.greeting()
            if greeting is not None:
                await ws.send(greeting)
            welcome = protocol.expect_welcome(await ws.recv())
    except InvalidStatus as exc:
        status = exc.response.status_code
        body = exc.response.body.decode("utf-8", "replace").strip() if exc.response.body else ""
        if status in (401, 403):
            raise UnauthorizedError(f"the hub at {url} refused us ({status}): {body}") from exc
        raise HubUnreachableError(f"the hub at {url} answered HTTP {status}: {body}") from exc
    except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
        _abort(ws)
        reason = str(exc) or type(exc).__name__
        raise HubUnreachableError(f"cannot reach the hub at {url}: {reason}") from exc
    except BaseException:
        _abort(ws)  # refused, a bad first frame, or cancelled (closed) while connecting
        raise
    return ws, welcome


@dataclass(frozen=True)
class Dialer:
    """Everything one connection to the hub needs, and the retries with ``backoff``."""

    protocol: ClientProtocol
    token: str | None
    backoff: Backoff
    connect_timeout: float
    close_timeout: float
    max_size: int
    ping_interval: float | None

    async def once(self) -> tuple[ClientConnection, Welcome]:
        """One attempt: see :func:`open_connection`."""
        return await open_connection(
            self.protocol,
            token=self.token,
            connect_timeout=self.connect_timeout,
            close_timeout=self.close_timeout,
            max_size=self.max_size,
            ping_interval=self.ping_interval,
        )

    async def establish(
        self, *, retry: bool, closed: Callable[[], bool]
    ) -> tuple[ClientConnection, Welcome]:
        """Connect; with ``retry``, try again while the backoff says so.

        ``closed`` is asked after every wait: once the channel is closed, the
        wait ends with :class:`ChannelClosedError` (close() promises pending
        calls an end). Raises :class:`HubUnreachableError` when the backoff gives up.
        """
        attempt = 0
        while True:
            try:
                return await self.once()
            except HubUnreachableError as exc:
                if not retry:
                    raise
                attempt += 1
                if not await self.backoff(attempt):
                    raise HubUnreachableError(
                        f"gave up on the hub at {self.protocol.url} after {attempt} attempts: {exc}"
                    ) from exc
                if closed():
                    raise ChannelClosedError("the channel was closed") from exc
