"""The console's state: what it reads, who is logged in, and how a page is rendered.

:class:`Console` is built once by the daemon (:mod:`daemon.app`) with its
:class:`Sources`, the live parts of the running daemon the pages read (the
sessions store, each thread's status line, a REPL's variables, the approvals
desk). Each page module adds its routes and, if it has one, its entry in the
nav (:meth:`Console.page`); :meth:`Console.render` gives every template the
session's nick, its CSRF token and the nav.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from daemon.config import Config
from daemon.web.auth import Session, Sessions
from daemon.web.tokens import read_tokens
from sessions.store import Store

__all__ = [
    "SESSION_KEY",
    "STATIC",
    "TEMPLATES",
    "Console",
    "Sources",
    "session_of",
    "thread_path",
]

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
SESSION_KEY = "asyncai.session"  # where the guard leaves a request's session in its scope


def thread_path(channel: str, thread_id: str) -> str:
    """The thread page's path: ``/threads/%23ops/THREAD``."""
    return f"/threads/{quote(channel, safe='')}/{quote(thread_id, safe='')}"


def session_of(request: Request) -> Session:
    """The session the guard found for this request (every page but login has one)."""
    session = request.scope.get(SESSION_KEY)
    if not isinstance(session, Session):
        raise RuntimeError("a page reached without a session: the guard was bypassed")
    return session


def _no_variables(channel: str, thread_id: str) -> list[tuple[str, str, str]] | None:
    return None


@dataclass
class Sources:
    """What the console reads from the running daemon, filled by :mod:`daemon.app`.

    ``status(thread_key)`` is the live status line of a thread's run (None:
    no run is working there now). ``variables(channel, thread_id)`` the REPL's
    variables in memory as ``(name, description, preview)`` (``("rows",
    "list[3]", "[1, 2, 3]")``; None: no REPL of that thread is live here), from
    the probe that writes the variables note. ``desk`` is the approvals desk
    (:class:`daemon.runtime.desk.ApprovalDesk`), for the approvals page.
    ``server_tools()`` the tools each MCP server serves now, by server (the
    audit's server filter: its rows name the tool only). ``health()`` the
    Health page's :class:`daemon.web.health.HealthReport`, gathered now.
    """

    config: Config
    store: Store
    status: Callable[[str], str | None] = lambda _thread: None
    variables: Callable[[str, str], list[tuple[str, str, str]] | None] | None = _no_variables
    desk: Any = None
    server_tools: Callable[[], Mapping[str, list[str]]] = dict
    health: Callable[[], Awaitable[Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # what later pages need


class Console:
    """One console: its sources, its sessions, its templates and its nav."""

    def __init__(self, sources: Sources, *, sessions: Sessions | None = None) -> None:
        self.sources = sources
        self.sessions = sessions or Sessions()
        self.nav: list[tuple[str, str]] = []  # (title, path), in the order pages were added
        self.closing = asyncio.Event()  # set at shutdown: live streams end
        self.templates = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            enable_async=False,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals["thread_path"] = thread_path  # every page may link a thread

    @property
    def tokens_path(self) -> Path:
        """``[web] tokens``."""
        return self.sources.config.web.tokens

    def tokens(self) -> dict[str, str]:
        """The tokens file, read now (a token added or removed counts at the next login)."""
        return read_tokens(self.tokens_path)

    def page(self, title: str, path: str) -> None:
        """Add a page to the nav."""
        self.nav.append((title, path))

    def fragment(self, name: str, context: Mapping[str, Any]) -> str:
        """A template rendered to text (the live parts send these over SSE)."""
        return self.templates.get_template(name).render(**context)

    def render(
        self, request: Request, name: str, context: Mapping[str, Any], status_code: int = 200
    ) -> HTMLResponse:
        """A page: ``name`` with ``context``, the session's nick and CSRF token, and the nav."""
        session = request.scope.get(SESSION_KEY)
        full = {
            "request": request,
            "session": session,
            "csrf": session.csrf if isinstance(session, Session) else "",
            "nav": self.nav,
            "path": request.url.path,
            **context,
        }
        return HTMLResponse(self.fragment(name, full), status_code=status_code)
