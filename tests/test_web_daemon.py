"""The console served by the daemon itself (issue 30): started with it, refused without tokens.

A real daemon (hub, scripted model, store) in this process with ``[web]
listen`` on a free loopback port; ``asyncai serve`` through its command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
import pytest

from channels.hub import Hub
from daemon.app import Daemon
from daemon.cli import main
from daemon.cli.up import _console_token, _instructions, _login_url
from daemon.config import Config, load_config
from tests.fakes.fake_openai import FakeOpenAI
from tests.test_daemon import write_config
from tests.test_web_auth import TOKEN, log_in, write_tokens


def web_config(path: Path, *, hub_url: str, model_url: str, tokens: bool = True) -> Path:
    """The test daemon's config with a console on a free port (and its tokens file)."""
    config = write_config(path, hub_url=hub_url, model_url=model_url, servers=False)
    config.write_text(
        config.read_text() + '\n[web]\nlisten = "127.0.0.1:0"\ntokens = "web.tokens"\n'
    )
    if tokens:
        write_tokens(path.parent / "web.tokens", f"{TOKEN} operator\n")
    return config


async def test_the_daemon_serves_the_console_on_its_loop_and_stops_it_first(tmp_path):
    """With [web] listen the daemon's start brings up the console; log in, see the page;
    after aclose nothing listens there."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        config = load_config(
            web_config(tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url),
            environ={},
        )
        daemon = Daemon(config, env={})
        await daemon.start()
        try:
            url = daemon.web_url
            assert url is not None
            assert url.startswith("http://127.0.0.1:")
            async with httpx2.AsyncClient(base_url=url) as client:
                assert (await client.get("/")).status_code == 401
                assert (await log_in(client)).status_code == 303
                assert (await client.get("/")).status_code == 200
        finally:
            await daemon.aclose()
        async with httpx2.AsyncClient(base_url=url) as client:
            with pytest.raises(httpx2.ConnectError):
                await client.get("/login")


async def test_without_its_tokens_file_the_daemon_does_not_start(tmp_path, capsys):
    """[web] listen and no tokens file: run() is 1 and says how to make one; nothing opened."""
    async with Hub(tmp_path / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = web_config(
            tmp_path / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url, tokens=False
        )
        daemon = Daemon(load_config(path, environ={}), env={})
        assert await daemon.run() == 1
    err = capsys.readouterr().err
    assert "web.tokens" in err
    assert "umask 077" in err
    assert not (tmp_path / "asyncai.db").exists()  # refused before the store was opened


def test_serve_refuses_without_the_tokens_file_and_says_how_to_make_one(tmp_path, capsys):
    """`asyncai serve` with [web] listen and no tokens file: exit 2, the how-to on stderr."""
    path = web_config(
        tmp_path / "asyncai.toml",
        hub_url="ws://127.0.0.1:9/",
        model_url="http://127.0.0.1:9/v1",
        tokens=False,
    )
    assert main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncai serve: [web] listen is set but the console's tokens file")
    assert str(tmp_path / "web.tokens") in err
    assert "token_hex" in err


def test_up_makes_the_tokens_file_once_and_prints_the_login_url(tmp_path):
    """up: listen 127.0.0.1:6690, STATE/web.tokens made with one token for operator (0600);
    a second up keeps the file and prints the same token; the banner has the login URL."""
    config = Config()
    token = _console_token(config, tmp_path)
    assert config.web.listen == "127.0.0.1:6690"
    assert config.web.tokens == tmp_path / "web.tokens"
    assert os.stat(config.web.tokens).st_mode & 0o777 == 0o600
    assert token is not None
    again = Config()
    assert _console_token(again, tmp_path) == token
    url = _login_url("http://127.0.0.1:6690/", token)
    assert url == f"http://127.0.0.1:6690/login#token={token}"
    from daemon.cli.up import ModelEndpoint

    banner = _instructions(
        "ws://127.0.0.1:6680/", ModelEndpoint("http://m/v1", "m"), config, console=url
    )
    assert f"console  {url}   (nick operator; tokens in {config.web.tokens})" in banner


async def test_a_console_address_in_use_fails_the_start_naming_the_key(tmp_path):
    """Another process on the console's port: the start fails with one line that names
    [web] listen and up's flag, not uvicorn's exit."""
    import socket

    from daemon.web import WebServer

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = WebServer(object(), f"127.0.0.1:{port}")
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1:\d+ .*\[web\] listen"):
            await server.start()
        await server.aclose()
