"""The web questions over three seeds, without a model: each case's expected answer passes
its checker, a non-answer fails unless the right reply is "no data", and the site serves
every URL a prompt names (except the one that must 404)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bench.questions import web
from bench.questions.core import SHAPES, Template, World
from bench.questions.servers import installed
from bench.questions.world import open_world
from daemon.code_mode.convert import nested_value
from daemon.mcp.executor import McpToolExecutor

SEEDS = (1, 2, 3)
BASE = "http://127.0.0.1:8765"
_URL_TAIL = r"[^\s,;)]*[^\s,;).?]"  # a URL in a prompt ends before its sentence's punctuation


def _world(seed: int, root: Path = Path("/nonexistent")) -> World:
    world = World(seed, root, BASE, root / "fixtures", root / "repo", root / "shop.db")
    web.build(world)
    return world


@pytest.fixture(scope="module")
def worlds() -> dict[int, World]:
    return {seed: _world(seed) for seed in SEEDS}


def _ids(template: Template) -> str:
    return template.id


@pytest.mark.parametrize("template", web.TEMPLATES, ids=_ids)
def test_expected_answer_passes_and_a_non_answer_fails(
    template: Template, worlds: dict[int, World]
) -> None:
    """In every seed the expected answer passes; "I do not know." fails all but the
    unanswerable cases; a number answer one off fails."""
    for world in worlds.values():
        case = template.make(world)
        assert case.check(case.answer), (world.seed, case.answer)
        if not case.no_data:
            assert not case.check("I do not know."), world.seed
        if template.shape == "unanswerable":
            assert case.no_data, world.seed
            assert case.check("I do not know."), world.seed
        if template.shape == "none":  # "none" is a finding, not a shrug
            assert case.no_data, world.seed
            assert not case.check("I do not know."), world.seed
        if case.answer.isdigit():
            assert not case.check(str(int(case.answer) + 1)), world.seed


@pytest.mark.parametrize("template", web.TEMPLATES, ids=_ids)
def test_each_seed_asks_or_answers_differently(
    template: Template, worlds: dict[int, World]
) -> None:
    """No template is the same question with the same answer in all three seeds."""
    cases = [template.make(world) for world in worlds.values()]
    assert len({(c.text, c.answer) for c in cases}) > 1


@pytest.mark.parametrize("template", web.TEMPLATES, ids=_ids)
def test_the_prompts_urls_are_served(template: Template, worlds: dict[int, World]) -> None:
    """Every URL a prompt names is a page of the site, but for an unanswerable case's."""
    for world in worlds.values():
        case = template.make(world)
        urls = re.findall(re.escape(BASE) + _URL_TAIL, case.text)
        assert urls, case.text
        served = [url.removeprefix(BASE) in world.http_files for url in urls]
        assert all(served) or (case.no_data and template.shape == "unanswerable"), urls


@pytest.mark.parametrize(
    ("template_id", "reply", "right"),
    [
        ("web.open-issues-closing-label", "No open issues carry that label.", True),
        ("web.open-issues-closing-label", "There are no such open issues.", True),
        ("web.open-issues-closing-label", "I could not find the tracker.", False),
        ("web.pricey-in-category", "No products in that category cost more than that.", True),
        ("web.pricey-in-category", "None of them.", True),
        ("web.missing-api", "That URL returns 404 Not Found, so I cannot say.", True),
        ("web.missing-api", "There were 12 returns.", False),
        ("web.product-warranty", "Its details don't mention a warranty.", True),
        ("web.product-warranty", "The warranty isn't listed on its page.", True),
        ("web.product-warranty", "It has a 2 year warranty.", False),
    ],
)
def test_no_data_checks_hear_usual_words(
    template_id: str, reply: str, right: bool, worlds: dict[int, World]
) -> None:
    """A none or unanswerable case accepts its answer in the words a model usually uses."""
    template = next(t for t in web.TEMPLATES if t.id == template_id)
    for world in worlds.values():
        assert template.make(world).check(reply) is right, (world.seed, reply)


def test_answers_pass_in_other_spellings(worlds: dict[int, World]) -> None:
    """A version written "v1.2.3" and a title without its "The" are still the answer."""
    by_id = {t.id: t for t in web.TEMPLATES}
    for world in worlds.values():
        site: web.WebData = world.data["web"]
        best = max(site.releases, key=lambda r: r["downloads"])
        case = by_id["web.release-most-downloads"].make(world)
        assert case.check(f"v{best['version']}, codename {best['codename']}")
        oldest = min(site.books, key=lambda b: b["year"])
        case = by_id["web.library-oldest-book"].make(world)
        assert case.check(f"{oldest['title'].removeprefix('The ')}, {oldest['branch']} branch")


def test_templates_are_unique_and_shaped() -> None:
    """Ids are unique and in the web domain; every shape named is one of the set's."""
    ids = [t.id for t in web.TEMPLATES]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("web.") for i in ids)
    assert {t.shape for t in web.TEMPLATES} <= set(SHAPES)


def test_build_is_deterministic_and_varies_with_the_seed() -> None:
    """The same seed builds the same site; another seed builds another."""
    assert _world(7).http_files == _world(7).http_files
    assert _world(7).http_files != _world(8).http_files


def test_issue_pages_link_to_the_end(worlds: dict[int, World]) -> None:
    """Following next from page 1 visits every issue once, and no page holds a total."""
    for world in worlds.values():
        site: web.WebData = world.data["web"]
        url: str | None = BASE + "/api/tracker/issues?page=1"
        seen: list[int] = []
        while url:
            page = json.loads(world.http_files[url.removeprefix(BASE)][1])
            assert set(page) == {"page", "next", site.keys["issues"]}
            seen += [issue["number"] for issue in page[site.keys["issues"]]]
            url = page["next"]
        assert seen == [issue["number"] for issue in site.issues]
        assert site.issue_pages >= 3


def test_product_list_links_to_details(worlds: dict[int, World]) -> None:
    """Each product of the list has a url to a detail page holding the rating the list lacks."""
    for world in worlds.values():
        site: web.WebData = world.data["web"]
        listing = json.loads(world.http_files[site.shop + "/products"][1])
        for item in listing[site.keys["products"]]:
            assert "rating" not in item
            detail = json.loads(world.http_files[item["url"].removeprefix(BASE)][1])
            assert detail["id"] == item["id"]
            assert "rating" in detail


# ---- every question answered from what the tools really return -----------------------------
#
# A reference solution per template, reading only the prompt and the tools' output (http_get's
# dict, fetch's markdown in pieces): if a server's output changes so that a question can no
# longer be answered from it, this fails, not the model's score.

Solver = Callable[["_Tools", str, list[str]], Awaitable[object]]
SOLVERS: dict[str, Solver] = {}


def _solves(template_id: str) -> Callable[[Solver], Solver]:
    def register(solver: Solver) -> Solver:
        SOLVERS[template_id] = solver
        return solver

    return register


class _Tools:
    """http_get and fetch as a snippet calls them; fetch's pieces joined, each page once."""

    def __init__(self, executor: McpToolExecutor) -> None:
        self.executor = executor
        self.fetched: dict[str, str] = {}

    async def get(self, url: str) -> dict[str, Any]:
        value = nested_value(await self.executor.call_tool("http_get", {"url": url}))
        assert isinstance(value, dict)
        return value

    async def json_list(self, url: str) -> list[dict[str, Any]]:
        """The one list of a JSON object, whatever its key."""
        return _the_list((await self.get(url))["json"])

    async def pages(self, url: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while url:
            page = (await self.get(url))["json"]
            items += _the_list(page)
            url = page["next"]
        return items

    async def csv(self, url: str) -> list[dict[str, str]]:
        return list(csv.DictReader(io.StringIO((await self.get(url))["body"])))

    async def markdown(self, url: str) -> str:
        if url not in self.fetched:
            text, start = "", 0
            while True:
                out = await self.executor.call_tool("fetch", {"url": url, "start_index": start})
                assert not out.is_error, out.content
                piece = nested_value(out)
                assert isinstance(piece, str)
                body = piece.split(f"Contents of {url}:\n", 1)[1]
                more = re.search(r"\n\n<error>Content truncated\. .*start_index of (\d+)", body)
                if more is None:
                    break
                text += body[: more.start()]
                start = int(more.group(1))
            self.fetched[url] = text + body
        return self.fetched[url]

    async def table(self, url: str) -> list[dict[str, str]]:
        """The markdown table of a page, one dict per row."""
        lines = [ln for ln in (await self.markdown(url)).splitlines() if ln.startswith("|")]
        rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
        return [dict(zip(rows[0], row, strict=True)) for row in rows[2:]]


def _the_list(value: dict[str, Any]) -> list[dict[str, Any]]:
    return next(v for v in value.values() if isinstance(v, list))


def _find(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return found.group(1)


@_solves("web.products-low-stock")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    limit = int(_find(r"fewer than (\d+)", q))
    return sum(p["stock"] < limit for p in await tools.json_list(urls[0]))


@_solves("web.cheapest-in-category")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    cat = _find(r"in the (\w+) category", q)
    items = [p for p in await tools.json_list(urls[0]) if p["category"] == cat]
    best = min(items, key=lambda p: p["price"])
    return f"{best['name']} at {best['price']}"


@_solves("web.category-most-products")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    return Counter(p["category"] for p in await tools.json_list(urls[0])).most_common(1)[0]


@_solves("web.top-rated-product")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    details = [(await tools.get(p["url"]))["json"] for p in await tools.json_list(urls[0])]
    best = max(details, key=lambda d: d["rating"])
    return f"{best['name']}, rated {best['rating']}"


@_solves("web.top-supplier")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    details = [(await tools.get(p["url"]))["json"] for p in await tools.json_list(urls[0])]
    return Counter(d["supplier"] for d in details).most_common(1)[0]


@_solves("web.customer-spend")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    who = _find(r"How much did (.+?) spend", q)
    price = {p["id"]: p["price"] for p in await tools.json_list(urls[1])}
    orders = await tools.json_list(urls[0])
    return (
        f"{sum(o['quantity'] * price[o['product_id']] for o in orders if o['customer'] == who):.2f}"
    )


@_solves("web.orders-in-month")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    number = web._MONTHS.index(_find(r"placed in (\w+) 2026", q)) + 1
    month = f"{number:02d}"
    return sum(o["date"][5:7] == month for o in await tools.json_list(urls[0]))


@_solves("web.open-issues-total")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    return sum(i["state"] == "open" for i in await tools.pages(urls[0]))


@_solves("web.assignee-most-open-issues")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    issues = await tools.pages(urls[0])
    return Counter(
        i["assignee"] for i in issues if i["state"] == "open" and i["assignee"]
    ).most_common(1)[0]


@_solves("web.issues-with-label")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    label = _find(r'label "(\w+)"', q)
    return sum(label in i["labels"] for i in await tools.pages(urls[0]))


@_solves("web.open-issues-closing-label")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    label = _find(r'labeled "(\w+)"', q)
    issues = await tools.pages(urls[0])
    hits = [str(i["number"]) for i in issues if label in i["labels"] and i["state"] == "open"]
    return ", ".join(hits) or "There are none."


@_solves("web.sales-region-units")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    region = _find(r"in the (\w+) region", q)
    return sum(
        int(r["units"]) for r in await tools.csv(urls[0]) if r["region"] == region and r["units"]
    )


@_solves("web.sales-empty-units")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    return sum(not r["units"] for r in await tools.csv(urls[0]))


@_solves("web.sales-first-rows-units")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    k = int(_find(r"first (\d+) data rows", q))
    return sum(int(r["units"] or 0) for r in (await tools.csv(urls[0]))[:k])


@_solves("web.sales-top-revenue-product")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    revenue: Counter[str] = Counter()
    for r in await tools.csv(urls[0]):
        revenue[r["product"]] += int(r["units"] or 0) * float(r["unit_price"])
    return revenue.most_common(1)[0][0]


@_solves("web.release-most-downloads")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    best = max(await tools.table(urls[0]), key=lambda r: int(r["Downloads"].replace(",", "")))
    return f"{best['Version']} ({best['Codename']})"


@_solves("web.releases-in-year")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    year = _find(r"came out in (\d+)", q)
    return sum(r["Released"].startswith(year) for r in await tools.table(urls[0]))


@_solves("web.team-in-city")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    city = _find(r"works from (\w+)", q)
    return ", ".join(r["Name"] for r in await tools.table(urls[0]) if r["City"] == city)


@_solves("web.guides-by-maintainer")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    who = _find(r"Which guides does (.+?) maintain", q)
    links = re.findall(r"\[([^\]]+)\]\(([^)]+)\)", await tools.markdown(urls[0]))
    return ", ".join([t for t, link in links if f"Maintainer: {who}" in await tools.markdown(link)])


@_solves("web.warehouse-category-units")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    cat = _find(r"units of (\w+) products", q)
    warehouse = _find(r"in the (\w+) warehouse", q)
    cat_of = {p["id"]: p["category"] for p in await tools.json_list(urls[1])}
    rows = await tools.csv(urls[0])
    return sum(
        int(r["quantity"])
        for r in rows
        if r["warehouse"] == warehouse and cat_of[int(r["product_id"])] == cat
    )


@_solves("web.open-issues-by-city")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    city = _find(r"work from (\w+)\?", q)
    where = {r["Name"]: r["City"] for r in await tools.table(urls[0])}
    issues = await tools.pages(urls[1])
    return sum(i["state"] == "open" and where.get(i["assignee"]) == city for i in issues)


async def _books(tools: _Tools, url: str) -> list[dict[str, Any]]:
    catalog = (await tools.get(url))["json"]
    return [
        {**b, "branch": branch["name"]}
        for branch in catalog["library"]["branches"]
        for b in branch["books"]
    ]


@_solves("web.library-available-by-author")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    who = _find(r"books by (.+?) have", q)
    return sum(
        b["author"] == who and b["copies_available"] > 0 for b in await _books(tools, urls[0])
    )


@_solves("web.library-oldest-book")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    oldest = min(await _books(tools, urls[0]), key=lambda b: b["year"])
    return f"{oldest['title']}, at {oldest['branch']}"


@_solves("web.changelog-security-fixes")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    sections = (await tools.markdown(urls[0])).split("## Version")[1:]
    return sum("security fix" in s for s in sections)


@_solves("web.pricey-in-category")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    cat, limit = _find(r"in the (\w+) category", q), int(_find(r"more than (\d+)", q))
    items = await tools.json_list(urls[0])
    return ", ".join(p["name"] for p in items if p["category"] == cat and p["price"] > limit) or (
        "There are none."
    )


@_solves("web.missing-api")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    got = await tools.get(urls[0])
    return f"That API answers {got['status']} ({got['body']}), so I cannot tell."


@_solves("web.product-warranty")
async def _(tools: _Tools, q: str, urls: list[str]) -> object:
    got = await tools.get(urls[0])
    return "The details name no warranty." if "warranty" not in got["body"] else got["body"]


def test_every_template_has_a_reference_solution() -> None:
    """The slow test below answers every web template."""
    assert set(SOLVERS) == {t.id for t in web.TEMPLATES}


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_each_question_is_answered_from_the_real_tools_output() -> None:
    """Over seed 0's served world, each reference solution, reading only the prompt and
    what http_get and fetch return, gives a reply that passes the case's checker."""
    assert installed("fetch"), "run `python -m bench.questions --install-servers`"
    wrong: list[tuple[str, object, str]] = []
    async with open_world(0, http_port=0) as served:
        executor = McpToolExecutor(served.servers, call_timeout=60.0)
        try:
            await executor.start()
            tools = _Tools(executor)
            for template in web.TEMPLATES:
                case = template.make(served.world)
                urls = re.findall(re.escape(served.world.base_url) + _URL_TAIL, case.text)
                reply = await SOLVERS[template.id](tools, case.text, urls)
                if not case.check(str(reply)):
                    wrong.append((template.id, reply, case.answer))
        finally:
            await executor.aclose()
    assert not wrong
