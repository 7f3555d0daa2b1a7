"""The console's ASGI app: login, the session guard with its CSRF check, and the pages.

Starlette, not a larger framework: routing, requests, responses and static
files are all the console needs, and it comes with ``mcp`` already. Pages are
rendered on the server (Jinja2); htmx (one vendored file in ``static/``) and
Server-Sent Events make the live parts; nothing is loaded from another origin
(the Content-Security-Policy says so to the browser).

The guard (:class:`Guard`, an ASGI middleware) stands before every route but
``/login``, ``/static/`` and ``/metrics`` (counts, not content, which
Prometheus scrapes without a session):

- no session cookie, or one the console does not know: a page asked for by a
  browser is sent to ``/login``; anything else gets 401;
- a state-changing request (any method but GET, HEAD and OPTIONS) must carry
  the session's CSRF token, as the ``X-CSRF-Token`` header (htmx sends it on
  every request) or the ``csrf`` field of a form; without it, 403.

Login itself is a form guarded by a token of its own (a cookie and a field
that must match), so another site cannot log a browser in as someone else.

Every request's body, the login form's included, is at most
:data:`MAX_BODY_BYTES` (the console's forms are a few fields): a larger one is
refused with 413 as soon as its ``Content-Length`` says so or its bytes pass
the bound, so nobody, logged in or not, makes the daemon hold or spool more.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from daemon.errors import ConfigError
from daemon.web.auth import same_secret
from daemon.web.console import SESSION_KEY, STATIC, Console

__all__ = ["CSRF_HEADER", "LOGIN_COOKIE", "SESSION_COOKIE", "Guard", "build_app"]

SESSION_COOKIE = "asyncai_session"
LOGIN_COOKIE = "asyncai_login"  # the login form's own CSRF token
CSRF_HEADER = "x-csrf-token"
WRONG_TOKEN = "That token is not in the tokens file."
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = ("/login", "/static/", "/metrics")
MAX_BODY_BYTES = 1 << 20  # any request's body; larger ones get 413
SECURITY_HEADERS = [
    # scripts only from the console itself (htmx and console.js), no frames, no referrer
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def build_app(console: Console, routes: list[BaseRoute]) -> Guard:
    """The whole app: login and logout, the static files, ``routes`` (the pages), guarded."""
    everything: list[BaseRoute] = [
        Route("/login", _login_page(console), methods=["GET"]),
        Route("/login", _login(console), methods=["POST"]),
        Route("/logout", _logout(console), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *routes,
    ]
    return Guard(Starlette(routes=everything), console)


def _cookie_value(scope: Scope, name: str) -> str | None:
    """A cookie of the request, by name."""
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                if k == name:
                    return v
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


class Guard:
    """The session and CSRF check before every route (see the module docstring)."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            await _too_large(scope, receive, send)
            return
        receive = _bounded(receive)
        path = scope["path"]
        if path == "/login" or path.startswith(OPEN_PATHS[1:]):
            await self.app(scope, receive, send)
            return
        session = self.console.sessions.get(_cookie_value(scope, SESSION_COOKIE))
        if session is None:
            await self._refuse_anonymous(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS:
            given = _header(scope, CSRF_HEADER.encode())
            if given is None:
                try:
                    given, receive = await _form_field(scope, receive, "csrf")
                except HTTPException:  # past MAX_BODY_BYTES
                    await _too_large(scope, receive, send)
                    return
            if not same_secret(given, session.csrf):
                response = PlainTextResponse("missing or wrong CSRF token", status_code=403)
                await response(scope, receive, send)
                return
        scope[SESSION_KEY] = session
        await self.app(scope, receive, send)

    async def _refuse_anonymous(self, scope: Scope, receive: Receive, send: Send) -> None:
        """To the login page for a browser's GET of a page; 401 for anything else."""
        accept = _header(scope, b"accept") or ""
        response: Response
        if scope["method"] == "GET" and "text/html" in accept and not _header(scope, b"hx-request"):
            target = scope["path"] + (
                ("?" + scope["query_string"].decode()) if scope.get("query_string") else ""
            )
            response = RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        else:
            response = PlainTextResponse("log in first: no session", status_code=401)
        await response(scope, receive, send)


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    response = PlainTextResponse(
        f"request body over {MAX_BODY_BYTES} bytes",
        status_code=413,
        headers={"connection": "close"},
    )
    await response(scope, receive, send)


def _bounded(receive: Receive) -> Receive:
    """``receive`` that stops a body (one sent without a length) past :data:`MAX_BODY_BYTES`:
    an ``HTTPException`` the app answers with 413."""
    size = 0

    async def receiving() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"request body over {MAX_BODY_BYTES} bytes")
        return message

    return receiving


def _with_headers(send: Send) -> Send:
    """``send`` that adds the security headers to every response's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
        await send(message)

    return sending


async def _form_field(scope: Scope, receive: Receive, name: str) -> tuple[str | None, Receive]:
    """A field of a urlencoded form body, and a ``receive`` that replays the body read."""
    content_type = _header(scope, b"content-type") or ""
    if not content_type.startswith("application/x-www-form-urlencoded"):
        return None, receive
    chunks: list[bytes] = []
    while True:
        message = await receive()  # bounded: past MAX_BODY_BYTES, an HTTPException
        if message["type"] != "http.request":
            return None, receive
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(name)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return (values[0] if values else None), replay


def _safe_next(target: str | None) -> str:
    """Where to go after login: a path of this console only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _login_page(console: Console) -> Callable[[Request], Awaitable[Response]]:
    async def login_page(request: Request) -> Response:
        token = secrets.token_urlsafe(32)
        response = console.render(
            request,
            "login.html",
            {
                "login_csrf": token,
                "next": _safe_next(request.query_params.get("next")),
                "error": "",
            },
        )
        _set_cookie(response, LOGIN_COOKIE, token)
        return response

    return login_page


def _login(console: Console) -> Callable[[Request], Awaitable[Response]]:
    async def login(request: Request) -> Response:
        async with request.form() as form:  # closed: a file part is a spooled temporary file
            token = str(form.get("token", "")).strip()
            target = _safe_next(str(form.get("next", "")))
            given = str(form.get("csrf", ""))
        expected = request.cookies.get(LOGIN_COOKIE)  # none from another site's form
        if not expected or not same_secret(given, expected):
            return PlainTextResponse("missing or wrong CSRF token: reload the login page", 403)
        try:
            tokens = console.tokens()
        except ConfigError as exc:
            return PlainTextResponse(f"the console cannot read its tokens: {exc}", 503)
        session = console.sessions.login(token, tokens)
        if session is None:
            fresh = secrets.token_urlsafe(32)
            response: Response = console.render(
                request,
                "login.html",
                {
                    "login_csrf": fresh,
                    "next": target,
                    "error": "That token is not in the tokens file.",
                },
                status_code=403,
            )
            _set_cookie(response, LOGIN_COOKIE, fresh)
            return response
        response = RedirectResponse(target, status_code=303)
        _set_cookie(response, SESSION_COOKIE, session.id)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    return login


def _logout(console: Console) -> Callable[[Request], Awaitable[Response]]:
    async def logout(request: Request) -> Response:
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            console.sessions.logout(session_id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return logout


def _set_cookie(response: Response, name: str, value: str) -> None:
    """A cookie the page's scripts cannot read and no other site's request carries."""
    response.set_cookie(name, value, path="/", httponly=True, samesite="strict")
