"""The console's skeleton (issue 30): tokens, sessions, the guard and its CSRF check.

Over a real uvicorn on loopback with a real SQLite store; the browser tests
(tests/test_web_browser.py) drive the same app in Chromium.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from daemon.config import Config, load_config
from daemon.errors import ConfigError
from daemon.web import (
    Console,
    Sessions,
    Sources,
    WebServer,
    console_app,
    create_tokens,
    read_tokens,
)
from daemon.web.auth import MAX_SESSIONS, SESSION_IDLE
from sessions.store import Store

TOKEN = "a" * 20 + "operator-token"


def write_tokens(path: Path, text: str, mode: int = 0o600) -> Path:
    """A tokens file with ``text`` and ``mode``."""
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
async def console_url(tmp_path: Path) -> AsyncIterator[str]:
    """A console on a free loopback port over a fresh store; tokens: operator and dave."""
    tokens = write_tokens(tmp_path / "web.tokens", f"{TOKEN} operator\n{'d' * 24} dave\n")
    config = Config()
    config.web.listen = "127.0.0.1:0"
    config.web.tokens = tokens
    async with Store(tmp_path / "a.db") as store:
        console = Console(Sources(config=config, store=store))
        server = WebServer(console_app(console), "127.0.0.1:0")
        await server.start()
        try:
            yield server.url
        finally:
            console.closing.set()
            await server.aclose()


async def log_in(client: httpx2.AsyncClient, token: str = TOKEN) -> httpx2.Response:
    """The login form as a browser fills it: its CSRF field from the page, the token typed."""
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    return await client.post("/login", data={"csrf": csrf.group(1), "token": token, "next": "/"})


def page_csrf(html: str) -> str:
    """The session's CSRF token as the page carries it (the logout form's field)."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


# ---- the tokens file --------------------------------------------------------------------


def test_a_missing_tokens_file_is_refused_with_how_to_make_one(tmp_path: Path) -> None:
    """No file: the error names [web] tokens, the path, and a command that makes one."""
    with pytest.raises(ConfigError) as err:
        read_tokens(tmp_path / "web.tokens")
    message = str(err.value)
    assert "[web] tokens" in message
    assert str(tmp_path / "web.tokens") in message
    assert "umask 077" in message
    assert "token_hex" in message


def test_the_tokens_file_is_the_hubs_format_private_and_with_long_tokens(tmp_path: Path) -> None:
    """Mode 0644, a short token or an empty file are refused; the token never in the message."""
    open_to_all = write_tokens(tmp_path / "a", f"{TOKEN} operator\n", 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_tokens(open_to_all)
    short = write_tokens(tmp_path / "b", "short operator\n")
    with pytest.raises(ConfigError, match="too short") as err:
        read_tokens(short)
    assert "short operator" not in str(err.value)
    empty = write_tokens(tmp_path / "c", "# nobody\n")
    with pytest.raises(ConfigError, match="no 'TOKEN NICK' line"):
        read_tokens(empty)
    assert read_tokens(write_tokens(tmp_path / "d", f"{TOKEN} operator\n")) == {TOKEN: "operator"}


def test_create_tokens_writes_one_random_token_mode_0600_and_never_overwrites(
    tmp_path: Path,
) -> None:
    """asyncai up's file: private, parseable, one token for the nick; a second call refuses."""
    path = tmp_path / "state" / "web.tokens"
    token = create_tokens(path, "operator")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_tokens(path) == {token: "operator"}
    assert len(token) >= 32
    with pytest.raises(FileExistsError):
        create_tokens(path, "operator")
    assert create_tokens(tmp_path / "other", "operator") != token


# ---- sessions (pure) --------------------------------------------------------------------


def test_a_session_is_started_only_by_a_known_token_and_ends_when_idle() -> None:
    """Login gives a session with the token's nick and its own CSRF token; idle too long, gone."""
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0])
    assert sessions.login("x" * 20, {TOKEN: "operator"}) is None
    session = sessions.login(TOKEN, {TOKEN: "operator"})
    assert session is not None
    assert session.nick == "operator"
    assert session.csrf != session.id
    assert sessions.get(session.id) is session
    now[0] += SESSION_IDLE - 1
    assert sessions.get(session.id) is session  # used: its idle time starts again
    now[0] += SESSION_IDLE + 1
    assert sessions.get(session.id) is None
    assert sessions.get(None) is None


def test_the_session_table_is_bounded_and_logout_ends_one() -> None:
    """A login loop cannot grow the table past MAX_SESSIONS: the oldest go first."""
    sessions = Sessions(clock=lambda: 0.0)
    first = sessions.login(TOKEN, {TOKEN: "operator"})
    assert first is not None
    for _ in range(MAX_SESSIONS):
        sessions.login(TOKEN, {TOKEN: "operator"})
    assert len(sessions) == MAX_SESSIONS
    assert sessions.get(first.id) is None
    last = sessions.login(TOKEN, {TOKEN: "operator"})
    assert last is not None
    sessions.logout(last.id)
    assert sessions.get(last.id) is None


# ---- the config -------------------------------------------------------------------------


def test_web_listen_must_be_host_port_and_the_error_names_the_key(tmp_path: Path) -> None:
    """[web] listen = "6690" fails at load naming web.listen; tokens is relative to the file."""
    path = tmp_path / "asyncai.toml"
    path.write_text('[web]\nlisten = "6690"\n')
    with pytest.raises(ConfigError, match=r"key 'web.listen' in .* must be HOST:PORT"):
        load_config(path, environ={})
    path.write_text('[web]\nlisten = "[::1]:6690"\ntokens = "w.tokens"\n')
    config = load_config(path, environ={})
    assert config.web.listen == "[::1]:6690"
    assert config.web.tokens == tmp_path / "w.tokens"
    assert Config().web.listen is None  # no console unless asked for


# ---- the guard, over HTTP ---------------------------------------------------------------


async def test_no_page_without_a_session(console_url: str) -> None:
    """A browser's page request goes to /login (keeping where it was going); others get 401."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        page = await client.get("/?channel=%23ops", headers={"accept": "text/html"})
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2F%3Fchannel%3D%2523ops"
        assert (await client.get("/")).status_code == 401
        assert (await client.post("/logout")).status_code == 401
        forged = {"cookie": "asyncai_session=made-up"}
        assert (await client.get("/", headers=forged)).status_code == 401


async def test_login_starts_a_session_in_an_httponly_samesite_strict_cookie(
    console_url: str,
) -> None:
    """The right token: 303 to next, the cookie HttpOnly and SameSite=Strict; the page
    names the nick."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        answer = await log_in(client)
        assert answer.status_code == 303
        cookie = next(
            h for h in answer.headers.get_list("set-cookie") if h.startswith("asyncai_session=")
        )
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        page = await client.get("/")
        assert page.status_code == 200
        assert "operator" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]


async def test_a_wrong_token_or_a_login_without_its_csrf_field_starts_nothing(
    console_url: str,
) -> None:
    """A token not in the file: 403 and the form again; no CSRF field or cookie: 403."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        wrong = await log_in(client, "z" * 30)
        assert wrong.status_code == 403
        assert "not in the tokens file" in wrong.text
        assert "asyncai_session" not in client.cookies
        bare = await client.post("/login", data={"token": TOKEN})
        assert bare.status_code == 403
        assert "asyncai_session" not in client.cookies


async def test_a_state_changing_request_without_the_csrf_token_is_refused(
    console_url: str,
) -> None:
    """With a session, POST needs the session's CSRF token (header or form field)."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        await log_in(client)
        csrf = page_csrf((await client.get("/")).text)
        assert (await client.post("/logout")).status_code == 403
        assert (await client.post("/logout", data={"csrf": "wrong"})).status_code == 403
        assert (await client.post("/logout", headers={"x-csrf-token": "x"})).status_code == 403
        assert (await client.post("/logout", data={"csrf": csrf})).status_code == 303
        # logged out: the old cookie opens nothing
        assert (await client.get("/")).status_code == 401


async def test_the_csrf_header_is_as_good_as_the_field(console_url: str) -> None:
    """htmx sends the token as X-CSRF-Token on every request."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        await log_in(client)
        csrf = page_csrf((await client.get("/")).text)
        answer = await client.post("/logout", headers={"x-csrf-token": csrf})
        assert answer.status_code == 303


async def test_the_assets_are_the_packages_own_files(console_url: str) -> None:
    """htmx and the console's script come from the console; the page loads nothing else."""
    async with httpx2.AsyncClient(base_url=console_url) as client:
        htmx = await client.get("/static/htmx.min.js")
        assert htmx.status_code == 200
        assert "htmx" in htmx.text
        login = await client.get("/login")
        sources = re.findall(r'(?:src|href)="([^"]+)"', login.text)
        assert sources
        assert all(s.startswith("/") and not s.startswith("//") for s in sources)
