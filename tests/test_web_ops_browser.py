"""The console's approvals and audit pages in headless Chromium (issue 30), against a real
daemon: a real hub, store, MCP server over stdio, Monty pool and backend in this process;
only the model is scripted.

A decision taken with the console's buttons goes through the desk's ``!approve`` /
``!deny`` code: the side effect (a line the test MCP server writes to a file) happens
exactly once and the thread reads who decided; a nick that may not decide sees the
buttons refused, and the server refuses its decision too. ``[approvals] approvers =
["alice"]``: alice decides, and may say "always"; bob may not.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
from pathlib import Path

import pytest

from channels.hub import Hub
from daemon.app import Daemon
from daemon.config import load_config
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCalls
from tests.test_daemon import Person, write_config
from tests.test_daemon_approval_rules import append
from tests.test_daemon_approvals import lines_of, request_id, settled

playwright = pytest.importorskip("playwright.async_api", reason="playwright is not installed")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on this machine (apt install chromium)"
    ),
]

# ASYNCAI_SCREENSHOTS=1 writes the pages' screenshots into docs/console/ (the docs show
# them); otherwise they go to the test's scratch directory
SCREENSHOTS = Path(__file__).parent.parent / "docs" / "console"

ALICE = "alice-console-token-0001"
BOB = "bob-console-token-000002"
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
async def world(tmp_path_factory):
    """Hub, scripted model, one daemon with its console, alice in #ops, and Chromium."""
    tmp = tmp_path_factory.mktemp("console")
    async with Hub(tmp / "hub.db", host="127.0.0.1", port=0) as hub, FakeOpenAI() as fake:
        path = write_config(
            tmp / "asyncai.toml",
            hub_url=hub.url,
            model_url=fake.base_url,
            runtime="max_runs_per_sender_per_hour = 50\nmax_tokens_per_sender_per_day = 100000",
        )
        path.write_text(
            path.read_text()
            + '\n[approvals]\nexpire_after = 600\napprovers = ["alice"]\n'
            + '\n[web]\nlisten = "127.0.0.1:0"\ntokens = "web.tokens"\n'
        )
        tokens = tmp / "web.tokens"
        tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
        tokens.chmod(0o600)
        daemon = Daemon(load_config(path, environ={}), env={})
        await daemon.start()
        alice = Person(hub.url)
        await alice.start()
        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                yield daemon, fake, alice, tmp, browser
            finally:
                await browser.close()
                await alice.close()
                await daemon.aclose()


async def screenshot(page, tmp: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    """The page, whole, as ``name``.png (see SCREENSHOTS)."""
    where = SCREENSHOTS if os.environ.get("ASYNCAI_SCREENSHOTS") == "1" else tmp
    await page.screenshot(path=str(where / f"{name}.png"), full_page=True)


async def logged_in(browser, daemon: Daemon, token: str):  # type: ignore[no-untyped-def]
    """A fresh browser context logged in with ``token``; its page."""
    context = await browser.new_context(base_url=daemon.web_url)
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    await page.goto("/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/")
    return page


async def test_approve_in_the_console_makes_the_call_once_and_the_thread_says_so(world):
    """The pending request shows every argument; Approve: the call is made once, the
    thread reads "alice approved request ID from the console." then the answer; the
    request is listed among the decided ones."""
    daemon, fake, alice, tmp, browser = world
    target = tmp / "approved.txt"
    fake.add(append(target, "one"), Reply("Appended one line."))
    mid, asked = await alice.ask("append a line")
    rid = request_id(asked.text)
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/approvals")
    request = page.locator(f"#request-{rid}")
    call = await request.locator("pre.call-text").inner_text()
    assert call == f'test.append_line({{"path": "{target}", "line": "one"}})'
    await screenshot(page, tmp, "approvals")
    no_csrf = await page.request.post(f"/approvals/{rid}/decide", form={"action": "approve"})
    assert no_csrf.status == 403  # the guard: no decision without the session's CSRF token
    assert lines_of(target) == []
    href = await request.locator("a").first.get_attribute("href")
    assert href == f"/threads/%23ops/{mid}"  # the request's thread, on its page
    assert (await page.request.get(href)).status == 200
    await request.get_by_role("button", name="Approve", exact=True).click()
    said = page.locator(".said")
    await said.wait_for()
    assert (await said.inner_text()).strip() == f"alice approved request {rid} from the console."
    [_, decided, answer] = await alice.reply_in(mid, 3)
    assert decided.text == f"alice approved request {rid} from the console."
    assert answer.text == "Appended one line."
    await settled(daemon, mid)
    assert lines_of(target) == ["one"]
    assert await page.locator(f"#request-{rid}").count() == 0  # no longer pending
    # the same decision posted again (a reload, a second tab) decides nothing
    csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
    again = await page.request.post(
        f"/approvals/{rid}/decide", form={"csrf": csrf or "", "action": "approve"}
    )
    assert again.status == 403
    assert f"Request {rid} was already approved by alice." in await again.text()
    assert lines_of(target) == ["one"]
    await page.fill("input[name=q]", rid)
    await page.click("form.filters button[type=submit]")
    row = page.locator(f'table.decided tr[data-request="{rid}"]')
    assert "approved" in await row.inner_text()
    await page.context.close()


async def test_deny_in_the_console_with_a_reason(world):
    """Deny with a reason: the call is never made, the model reads the chat's refusal."""
    daemon, fake, alice, tmp, browser = world
    target = tmp / "denied.txt"
    fake.add(
        ToolCalls(("run_code", {"code": f"await erase(path={str(target)!r})"})),
        Reply("Not erased."),
    )
    mid, asked = await alice.ask("erase the file")
    rid = request_id(asked.text)
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/approvals")
    request = page.locator(f"#request-{rid}")
    await request.locator("input[name=reason]").fill("not today")
    await request.get_by_role("button", name="Deny").click()
    await page.locator(".said").wait_for()
    line = f"alice denied request {rid} from the console: not today"
    assert (await page.locator(".said").inner_text()).strip() == line
    [_, decided, answer] = await alice.reply_in(mid, 3)
    assert decided.text == line
    assert "PermissionError: denied by alice: not today" in answer.text
    await settled(daemon, mid)
    assert lines_of(target) == []
    await page.context.close()


async def test_a_nick_that_may_not_decide_sees_the_buttons_refused(world):
    """bob: the buttons are disabled and the page says who may decide; a decision posted
    anyway is refused with the chat's line (403) and the thread hears nothing; then
    alice's Always leaves a rule, listed, and revoked from the page."""
    daemon, fake, alice, tmp, browser = world
    target = tmp / "refused.txt"
    fake.add(append(target, "x"), Reply("Done."))
    mid, asked = await alice.ask("append x")
    rid = request_id(asked.text)
    page = await logged_in(browser, daemon, BOB)
    await page.goto("/approvals")
    request = page.locator(f"#request-{rid}")
    refused = await request.locator(".refused").inner_text()
    assert refused == "bob may not decide this request: only alice may."
    for name in ("Approve", "Approve for this run", "Always", "Deny"):
        assert await request.get_by_role("button", name=name, exact=True).is_disabled()
    csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
    forced = await page.request.post(
        f"/approvals/{rid}/decide", form={"csrf": csrf or "", "action": "approve"}
    )
    assert forced.status == 403
    assert f"bob may not decide request {rid}: only alice may." in await forced.text()
    assert len(alice.replies[mid]) == 1  # the request only
    assert lines_of(target) == []
    await page.context.close()

    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/approvals")
    await page.locator(f"#request-{rid}").get_by_role("button", name="Always").click()
    await page.locator(".said").wait_for()
    said = await page.locator(".said").inner_text()
    assert f"alice approved request {rid} always from the console." in said
    assert "From now on test.append_line (rule " in said
    [*_, answer] = await alice.reply_in(mid, 4)
    assert answer.text == "Done."
    await settled(daemon, mid)
    assert lines_of(target) == ["x"]
    desk = daemon.desk
    assert desk is not None
    rule = desk.rules.find("#ops", "test.append_line")
    assert rule is not None
    row = page.locator(f'table.rules tr[data-rule="{rule.id}"]')
    await row.get_by_role("button", name="Revoke").click()
    await page.locator(".said").wait_for()
    assert f"Rule {rule.id} revoked" in await page.locator(".said").inner_text()
    assert desk.rules.find("#ops", "test.append_line") is None
    assert await page.locator(f'table.rules tr[data-rule="{rule.id}"]').count() == 0
    await page.context.close()


async def test_the_audit_is_filtered_and_exported(world):
    """Filter by tool and mutating, outcome and sender; the CSV link exports the same
    rows."""
    daemon, fake, alice, tmp, browser = world
    target = tmp / "audited.txt"
    fake.add(append(target, "audit"), Reply("ok"))
    mid, asked = await alice.ask("append audit")
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/approvals")
    await (
        page.locator(f"#request-{request_id(asked.text)}")
        .get_by_role("button", name="Approve", exact=True)
        .click()
    )
    await alice.reply_in(mid, 3)
    await settled(daemon, mid)
    await page.goto("/audit")
    await page.select_option("select[name=server]", "test")
    await page.fill("input[name=tool]", "append_line")
    await page.select_option("select[name=mutating]", "yes")
    await page.select_option("select[name=outcome]", "ok")
    await page.fill("input[name=sender]", "alice")
    await page.click("form.filters button[type=submit]")
    rows = page.locator("table.audit tbody tr[data-call]")
    tools = await rows.locator("td.tool").all_inner_texts()
    assert tools
    assert set(tools) == {"append_line"}
    await page.fill("input[name=sender]", "nobody")
    await page.click("form.filters button[type=submit]")
    assert await rows.count() == 0
    assert "No call matches." in await page.locator("table.audit").inner_text()
    await page.fill("input[name=sender]", "alice")
    await page.select_option("select[name=outcome]", "error")
    await page.click("form.filters button[type=submit]")
    assert await rows.count() == 0
    await page.select_option("select[name=outcome]", "ok")
    await page.click("form.filters button[type=submit]")
    href = await page.locator("a.csv").get_attribute("href")
    assert href is not None
    assert "tool=append_line" in href
    exported = await page.request.get(href)
    assert exported.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(await exported.text())))
    assert len(table) == len(tools)
    assert {row["tool"] for row in table} == {"append_line"}
    assert any('"line":"audit"' in row["arguments"] for row in table)
    await screenshot(page, tmp, "audit")
    await page.context.close()


async def test_usage_shows_charts_and_how_close_each_sender_is(world):
    """After the runs above: a chart per measure and grouping (inline SVG, drawn on the
    server), the sums per sender, and alice's runs against [runtime]'s limits."""
    daemon, _, _, tmp, browser = world
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/usage")
    for label in (
        "tokens per day",
        "runs per sender",
        "nested calls per channel",
        "bytes kept out of the context per day",
    ):
        assert await page.locator(f'svg.chart[aria-label="{label}"]').count() == 1
    runs = await daemon.store.queries.usage("sender")
    [mine] = [r for r in runs if r.key == "alice"]
    row = page.locator("#per-sender tbody tr", has_text="alice")
    assert str(mine.runs) in await row.inner_text()
    limit = page.locator("table.limits tr[data-sender=alice]")
    text = await limit.inner_text()
    assert "[runtime]" in text
    assert "of 50" in text
    assert "of 100000" in text
    await screenshot(page, tmp, "usage")
    await page.context.close()


async def test_health_shows_the_daemon_its_channel_servers_pool_and_endpoint(world):
    """The daemon up and healthy, #ops connected, the test MCP server up with its tools,
    the pool's workers and the model endpoint's latency measured now."""
    daemon, fake, _, tmp, browser = world
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/health")
    assert "Healthy" in await page.locator("#daemon").inner_text()
    assert "connected" in await page.locator("#channels tr", has_text="#ops").inner_text()
    server = await page.locator("#servers tr[data-server=test]").inner_text()
    assert "up" in server
    pools = await page.locator("#pools tbody").inner_text()
    assert "#ops" in pools
    endpoint = await page.locator("#endpoints tbody tr", has_text=fake.base_url).inner_text()
    assert " ms" in endpoint
    await screenshot(page, tmp, "health")
    await page.context.close()


async def test_a_new_request_appears_without_a_reload_and_a_typed_reason_stays(world):
    """The pending list is fetched again every few seconds: a request made while the page
    is open appears in it; a reason being typed survives the refresh; the denial with it
    then goes through."""
    daemon, fake, alice, tmp, browser = world
    target = tmp / "live.txt"
    fake.add(append(target, "live"), Reply("Not now."))
    page = await logged_in(browser, daemon, ALICE)
    await page.goto("/approvals")
    mid, asked = await alice.ask("append live")
    rid = request_id(asked.text)
    request = page.locator(f"#request-{rid}")
    await request.wait_for()  # no reload: the section was fetched again
    reason = request.locator("input[name=reason]")
    await reason.fill("typed before a refresh")
    await page.wait_for_timeout(4000)  # at least one refresh
    assert await reason.input_value() == "typed before a refresh"
    await request.get_by_role("button", name="Deny").click()
    await page.locator(".said").wait_for()
    line = f"alice denied request {rid} from the console: typed before a refresh"
    assert (await page.locator(".said").inner_text()).strip() == line
    [*_, answer] = await alice.reply_in(mid, 3)
    assert "PermissionError" in answer.text
    await settled(daemon, mid)
    assert lines_of(target) == []
    await page.context.close()
