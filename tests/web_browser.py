"""Shared by the console's browser tests: Debian's chromium through Playwright, and a daemon
with its console, a hub, the test MCP server and a scripted model, all in this process.

The browser is the system's ``chromium`` (``.ci/run`` installs it with apt;
Playwright downloads nothing). Without one, the tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from channels.hub import Hub
from daemon.app import Daemon
from daemon.config import load_config
from tests.fakes.fake_openai import FakeOpenAI
from tests.test_daemon import Person, write_config
from tests.test_web_auth import TOKEN, write_tokens

__all__ = ["DOCS", "TOKEN", "chromium_path", "console_world", "log_in_page", "screenshot"]

DOCS = Path(__file__).resolve().parent.parent / "docs" / "console"


def chromium_path() -> str | None:
    """The system's chromium (``CHROMIUM`` overrides), or None."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    """A headless Chromium for the module's tests (skipped without one)."""
    path = chromium_path()
    if path is None:
        pytest.skip("no chromium: apt-get install -y chromium (or set CHROMIUM=/path)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox"]
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture(scope="module")
async def console_world(tmp_path_factory) -> AsyncIterator[tuple[Daemon, FakeOpenAI, Person, Path]]:
    """Hub, scripted model, a daemon with the test MCP server and its console, and alice."""
    tmp = tmp_path_factory.mktemp("console")
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(tmp / "asyncai.toml", hub_url=hub.url, model_url=fake.base_url)
        path.write_text(
            path.read_text() + '\n[web]\nlisten = "127.0.0.1:0"\ntokens = "web.tokens"\n'
        )
        write_tokens(tmp / "web.tokens", f"{TOKEN} operator\n")
        daemon = Daemon(
            load_config(path, environ={}), env={}, progress_interval=0, progress_grace=0
        )
        await daemon.start()
        alice = Person(hub.url)
        try:
            await alice.start()
            yield daemon, fake, alice, tmp
        finally:
            await alice.close()
            await daemon.aclose()


async def log_in_page(context: Any, url: str, token: str = TOKEN) -> Any:
    """A new page of ``context``, logged in through the login form as a person would."""
    page = await context.new_page()
    await page.goto(f"{url}login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(url)
    return page


async def screenshot(page: Any, name: str) -> None:
    """The page as it looks now, as NAME.png: into docs/console/ (the docs show them) with
    ``ASYNCAI_SCREENSHOTS=1``, else into a scratch directory, so a test run leaves the
    checkout as it was."""
    if os.environ.get("ASYNCAI_SCREENSHOTS") == "1":
        target = DOCS
    else:
        target = Path(tempfile.gettempdir()) / f"asyncai-console-{os.getuid()}"
    target.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(target / f"{name}.png"), full_page=True)
