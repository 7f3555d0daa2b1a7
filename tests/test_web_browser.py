"""The console in a real browser (issue 30): headless Chromium against a real daemon.

A real hub, daemon, store, MCP server over stdio and Monty; only the model
is scripted. The tests log in, watch a run's nested calls appear live (no
reload: a marker set in the page survives), read the REPL page, and check
that no page works without a session or without the CSRF token. Each page's
screenshot goes into docs/console/.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.web.console import thread_path
from tests.fakes.fake_openai import Reply, ToolCalls
from tests.test_daemon import WAIT
from tests.web_browser import TOKEN, browser, console_world, log_in_page, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(120)]

__all__ = ["browser", "console_world"]  # the fixtures, used by name


async def calls_of(daemon, thread: str) -> list:
    """The thread's nested calls so far (oldest first)."""
    return list(reversed(await daemon.store.audit.entries(thread=thread, limit=None)))


async def until_calls(daemon, thread: str, predicate) -> list:
    """Poll the audit (bounded) until ``predicate(calls)``."""
    async with asyncio.timeout(WAIT):
        while True:
            calls = await calls_of(daemon, thread)
            if predicate(calls):
                return calls
            await asyncio.sleep(0.02)


async def test_log_in_with_a_token_and_see_the_threads(browser, console_world):
    """The login form takes the token; a wrong one is refused on the page; then the
    threads page, with the nick shown; logging out ends the session."""
    daemon, _, _, _ = console_world
    url = daemon.web_url
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(url)  # no session: the login page
    assert page.url.startswith(f"{url}login")
    await screenshot(page, "login")
    await page.fill("#token", "w" * 30)
    await page.click("button[type=submit]")
    assert "not in the tokens file" in await page.inner_text("[role=alert]")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(url)
    assert await page.inner_text("header .nick") == "operator"
    cookies = {c["name"]: c for c in await context.cookies()}
    session = cookies["asyncai_session"]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    assert await page.evaluate("document.cookie") == ""  # scripts cannot read it
    await page.click("header form.who button")
    await page.wait_for_url(f"{url}login")
    await page.goto(url)
    assert page.url.startswith(f"{url}login")
    await context.close()


async def test_a_runs_nested_calls_appear_live_on_the_thread_page(browser, console_world, tmp_path):
    """While a run works, the thread page shows its calls as they start and end, its
    status line, then the reply, without a reload; the threads page and the REPL page
    show the thread."""
    daemon, fake, alice, _ = console_world
    gate = tmp_path / "gate"
    code = (
        "first = await echo(text='first')\n"
        f"held = await wait_file(path={str(gate)!r})\n"
        "third = await echo(text='third')\n"
        "[first, third]"
    )
    fake.add(ToolCalls(("run_code", {"code": code})), Reply("first and third."))
    _, thread = await alice.say("Run the three steps.")
    await until_calls(daemon, thread, lambda c: [x.tool for x in c] == ["echo", "wait_file"])
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    page = await log_in_page(context, daemon.web_url)
    await page.goto(daemon.web_url.rstrip("/") + thread_path("#ops", thread))
    await page.wait_for_selector('.call[data-tool="wait_file"] .badge.started')
    assert await page.locator('.call[data-tool="echo"]').count() == 1
    await page.evaluate("window.__stayed = true")  # gone if the page were reloaded
    await screenshot(page, "thread-live")

    # threads page: the thread is running, with its live status line
    other = await context.new_page()
    await other.goto(f"{daemon.web_url}?status=running")
    row = other.locator(f'tr[data-thread="{thread}"]')
    assert "running" in await row.inner_text()
    await screenshot(other, "threads")

    gate.write_text("open")
    await page.wait_for_selector('.call[data-tool="echo"]:has-text("third")', timeout=WAIT * 1000)
    await page.wait_for_selector(".message.reply:has-text('first and third.')", timeout=WAIT * 1000)
    assert await page.evaluate("window.__stayed === true")
    assert await page.locator('.call[data-tool="echo"] .badge.ok').count() == 2
    # the threads page (filtered: running) drops the thread by itself once the run ended
    await other.evaluate("window.__stayed = true")
    await row.wait_for(state="detached", timeout=WAIT * 1000)
    assert await other.evaluate("window.__stayed === true")
    assert await page.locator("pre.code .tok-kw").count() >= 1  # the snippet, highlighted
    await screenshot(page, "thread")

    await page.click("a:has-text('REPL')")
    await page.wait_for_selector("h1:has-text('REPL')")
    names = await page.locator("tr[data-variable]").evaluate_all(
        "rows => rows.map(r => r.dataset.variable)"
    )
    assert {"first", "held", "third"} <= set(names)
    first = await page.inner_text('tr[data-variable="first"]')
    assert "str" in first
    assert "'first'" in first  # its preview
    await screenshot(page, "repl")
    await context.close()


async def test_no_page_works_without_a_session_or_without_the_csrf_token(browser, console_world):
    """Another browser without the cookie gets the login page for every page and 401 for
    the live stream; a logged-in page's POST without the CSRF token is refused (403),
    with it accepted."""
    daemon, _, _, _ = console_world
    url = daemon.web_url
    stranger = await browser.new_context()
    page = await stranger.new_page()
    for path in ["", "threads/%23ops/x", "threads/%23ops/x/repl"]:
        await page.goto(url + path)
        assert page.url.startswith(f"{url}login"), path
    events = await page.request.get(f"{url}threads/%23ops/x/events")
    assert events.status == 401
    await stranger.close()

    context = await browser.new_context()
    page = await log_in_page(context, url)
    # fetch() from the page itself: the cookie goes along (same origin), the token not
    refused = await page.evaluate(
        "fetch('/logout', {method: 'POST', redirect: 'manual'}).then(r => r.status)"
    )
    assert refused == 403
    csrf = await page.get_attribute("header form.who input[name=csrf]", "value")
    accepted = await page.evaluate(
        "token => fetch('/logout', {method: 'POST', redirect: 'manual',"
        " headers: {'X-CSRF-Token': token}}).then(r => r.type)",
        csrf,
    )
    assert accepted == "opaqueredirect"  # the 303 to /login: logged out
    await page.goto(url)
    assert page.url.startswith(f"{url}login")
    await context.close()


def test_the_screenshots_are_in_the_docs() -> None:
    """docs/console.md shows the pages these tests photograph."""
    docs = Path(__file__).resolve().parent.parent / "docs"
    text = (docs / "console.md").read_text()
    for name in ("login", "threads", "thread", "repl"):
        assert f"console/{name}.png" in text
