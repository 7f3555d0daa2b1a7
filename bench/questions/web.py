"""The web domain: JSON APIs, a paginated API, CSV files and HTML pages on the loopback server.

``build`` generates one seed's site and adds it to ``world.http_files``; both
``http_get`` (the body, and the parsed JSON) and ``mcp-server-fetch``'s
``fetch`` (HTML turned into markdown, long pages cut into pieces) read it.

- a shop API: a product list whose items link to their detail pages (rating,
  supplier: two hops), and an order list that names products by id (a join);
- an issue tracker whose pages link by a ``next`` URL (no page holds a total);
- two CSV files: sales with empty cells, and stock per warehouse by product id;
- HTML pages: releases and a team in tables, a guide index linking to guides,
  and a changelog longer than one ``fetch`` piece;
- a library catalog whose lists sit two levels deep.

The list keys (``results``, ``data``, ``entries``, ...) and the API's path
change with the seed, as do names, values, sizes and order.
"""

from __future__ import annotations

import csv
import html
import io
import json
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.questions.core import (
    Case,
    Template,
    World,
    exactly,
    has_number,
    has_words,
    lacks_words,
    number_case,
    says_cannot,
    says_none,
)

__all__ = ["TEMPLATES", "WebData", "build"]

_ADJECTIVES = [
    "Copper", "Walnut", "Granite", "Linen", "Amber", "Cobalt", "Maple", "Slate", "Cedar",
    "Ivory", "Onyx", "Birch", "Coral", "Indigo", "Saffron", "Juniper", "Pewter", "Willow",
]  # fmt: skip
_NOUNS = [
    "Kettle", "Lamp", "Backpack", "Notebook", "Mug", "Blanket", "Chair", "Clock", "Vase",
    "Skillet", "Lantern", "Satchel", "Teapot", "Easel", "Stool", "Tray", "Basket", "Desk",
]  # fmt: skip
_CATEGORIES = ["kitchen", "garden", "office", "outdoor", "bedroom", "lighting", "travel", "crafts"]
_SUPPLIERS = ["Nordvik", "Halden Co", "Brightwell", "Tamsin & Sons", "Okafor Trading", "Lumen"]
_FIRST = [
    "Amara", "Bjorn", "Chiara", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas",
    "Kalani", "Lucia", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Talia",
    "Umar", "Vera", "Wendell", "Yara",
]  # fmt: skip
_LAST = [
    "Abbott", "Brandt", "Castillo", "Dubois", "Eriksen", "Fontaine", "Gallo", "Haddad",
    "Ivanova", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Ortega", "Petrov",
]  # fmt: skip
_CITIES = ["Lisbon", "Oslo", "Toronto", "Nairobi", "Osaka", "Denver", "Krakow", "Porto", "Lyon"]
_ROLES = ["engineer", "designer", "support", "product manager", "data analyst", "writer"]
_REGIONS = ["north", "south", "east", "west", "central"]
_WAREHOUSES = ["Rotterdam", "Leipzig", "Gdansk", "Valencia", "Tampere"]
_LABELS = ["bug", "feature", "docs", "performance", "ui", "security", "question"]
_VERBS = ["crashes", "hangs", "fails", "is slow", "shows the wrong total", "loses data"]
_PLACES = [
    "on login", "when exporting", "after an update", "on the settings page", "in dark mode",
    "with long names", "on startup", "during sync", "in the search box", "on mobile",
]  # fmt: skip
_CODENAMES = [
    "Aurora", "Basalt", "Cirrus", "Dune", "Ember", "Fjord", "Glacier", "Harbor", "Iris",
    "Jasper", "Kestrel", "Lagoon", "Mistral", "Nimbus", "Obsidian", "Pinnacle", "Quartz",
]  # fmt: skip
_AUTHORS = [
    "Ada Whitlock", "Bruno Salas", "Clara Oyelaran", "Diego Marsh", "Elif Demir",
    "Farah Quinn", "Gustav Lund", "Hana Sato",
]  # fmt: skip
_TITLE_A = ["Silent", "Northern", "Hidden", "Last", "Paper", "Glass", "Winter", "Crimson"]
_TITLE_B = ["Harbor", "Orchard", "Atlas", "Garden", "Letters", "Tides", "Lantern", "Compass"]
_BRANCHES = ["Riverside", "Old Town", "Hillcrest", "Eastgate", "Meadowbrook"]
_GUIDES = [
    "Installing", "Upgrading", "Backups", "Monitoring", "Networking", "Permissions",
    "Troubleshooting", "Scaling", "Logging", "Migrations",
]  # fmt: skip
_CHANGES = [
    "improved the start-up time", "fixed a crash in the report view", "added an export to PDF",
    "reduced memory use during imports", "updated the translations", "fixed broken links",
    "made the sidebar resizable", "removed a deprecated setting", "sped up search",
    "fixed a rounding error in totals", "added keyboard shortcuts", "cleaned up the logs",
]  # fmt: skip


@dataclass
class WebData:
    """One seed's site: the records behind every page (the source of every answer)."""

    base: str  # the server's base URL, no trailing /
    shop: str  # the shop API's path prefix, e.g. "/api/store"
    products: list[dict[str, Any]] = field(default_factory=list)  # list fields + detail fields
    orders: list[dict[str, Any]] = field(default_factory=list)
    issues: list[dict[str, Any]] = field(default_factory=list)
    issue_pages: int = 0
    sales: list[dict[str, Any]] = field(default_factory=list)  # units None for an empty cell
    stock: list[dict[str, Any]] = field(default_factory=list)  # product_id, warehouse, quantity
    releases: list[dict[str, Any]] = field(default_factory=list)
    team: list[dict[str, Any]] = field(default_factory=list)
    guides: list[dict[str, Any]] = field(default_factory=list)
    changelog: list[dict[str, Any]] = field(default_factory=list)
    books: list[dict[str, Any]] = field(default_factory=list)  # with their branch
    keys: dict[str, str] = field(default_factory=dict)  # endpoint: the key of its list
    closing_label: str = "wontfix"  # the label only closed issues carry

    def url(self, path: str) -> str:
        return self.base + path

    def product(self, pid: int) -> dict[str, Any]:
        return next(p for p in self.products if p["id"] == pid)


def _names(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct "First Last" names, no first name twice (so either alone identifies)."""
    firsts = rng.sample(_FIRST, n)
    return [f"{f} {rng.choice(_LAST)}" for f in firsts]


def _unique_max(values: dict[str, float], step: float) -> None:
    """Raise the largest of ``values`` by ``step`` until no other equals it."""
    top = max(values, key=lambda k: values[k])
    while sum(1 for v in values.values() if v == values[top]) > 1:
        values[top] = round(values[top] + step, 2)


def _one_leads(items: list[dict[str, Any]], key: str, keep: int) -> None:
    """Make one value of ``key`` the most common among ``items`` (a group-by has one answer):
    on a tie, one item of another group joins the leader, from a group left with at least
    ``keep`` items."""
    counts = Counter(i[key] for i in items)
    top, n = counts.most_common(1)[0]
    if list(counts.values()).count(n) > 1:
        donor = next(i for i in items if i[key] != top and counts[i[key]] > keep)
        donor[key] = top


def build(world: World) -> None:
    """Generate this seed's site into ``world.http_files``; keep it as ``world.data["web"]``."""
    rng = random.Random(f"web:{world.seed}")
    data = WebData(base=world.base_url, shop="/api/" + rng.choice(["shop", "store", "market"]))
    data.keys = {
        "products": rng.choice(["results", "products", "items"]),
        "orders": rng.choice(["entries", "orders", "records"]),
        "issues": rng.choice(["data", "issues", "page_items"]),
    }
    _build_shop(rng, data)
    _build_issues(rng, data)
    _build_sales(rng, data)
    _build_pages(rng, data)
    _build_library(rng, data)
    world.http_files.update(_render(data))
    world.data["web"] = data


def _build_shop(rng: random.Random, data: WebData) -> None:
    categories = rng.sample(_CATEGORIES, 4)
    names = [f"{a} {n}" for a in _ADJECTIVES for n in _NOUNS]
    n = rng.randint(12, 18)
    ids = rng.sample(range(101, 999), n)
    for i, (pid, name) in enumerate(zip(ids, rng.sample(names, n), strict=True)):
        data.products.append(
            {
                "id": pid,
                "name": name,
                # every category at least twice, so "cheapest in" has a contest
                "category": categories[i % 4] if i < 8 else rng.choice(categories),
                "price": round(rng.uniform(4, 240), 2),
                "stock": rng.choice([0, 0, 1, 2, 3, 5, 8, 12, 15, 20, 27, 34, 41, 58]),
                "supplier": rng.choice(_SUPPLIERS),
                "rating": round(rng.uniform(2.0, 4.9), 1),
                "weight_kg": round(rng.uniform(0.1, 9.5), 1),
            }
        )
    rng.shuffle(data.products)
    ratings = {p["name"]: p["rating"] for p in data.products}
    _unique_max(ratings, 0.1)
    for p in data.products:
        p["rating"] = min(ratings[p["name"]], 5.0)
    _one_leads(data.products, "category", keep=2)  # and "cheapest in" still has a contest
    _one_leads(data.products, "supplier", keep=0)
    customers = _names(rng, 5)
    for k in range(rng.randint(16, 24)):
        p = rng.choice(data.products)
        data.orders.append(
            {
                "order_id": f"SO-{rng.randint(10000, 99999)}-{k}",
                "customer": rng.choice(customers),
                "product_id": p["id"],
                "quantity": rng.randint(1, 5),
                "date": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}",
            }
        )
    for p in data.products:
        for wh in rng.sample(_WAREHOUSES, rng.randint(1, 3)):
            data.stock.append(
                {"product_id": p["id"], "warehouse": wh, "quantity": rng.randint(0, 90)}
            )
    rng.shuffle(data.stock)


def _build_issues(rng: random.Random, data: WebData) -> None:
    people = _names(rng, 5)
    data.closing_label = rng.choice(["wontfix", "duplicate", "invalid", "obsolete"])
    n = rng.randint(26, 40)
    start = rng.randint(100, 900)
    for k in range(n):
        labels = rng.sample(_LABELS, rng.choice([0, 1, 1, 2]))
        state = rng.choice(["open", "open", "closed"])
        if rng.random() < 0.15:
            labels.append(data.closing_label)
            state = "closed"  # such an issue is always closed: "open and wontfix" is empty
        data.issues.append(
            {
                "number": start + k,
                "title": f"{rng.choice(['Export', 'Search', 'Sync', 'Login', 'Report'])} "
                f"{rng.choice(_VERBS)} {rng.choice(_PLACES)}",
                "state": state,
                "labels": labels,
                "assignee": rng.choice([*people, None]),
                "comments": rng.randint(0, 14),
            }
        )
    _one_leads(
        [i for i in data.issues if i["state"] == "open" and i["assignee"]], "assignee", keep=0
    )
    data.issue_pages = -(-n // rng.randint(7, 9))


def _build_sales(rng: random.Random, data: WebData) -> None:
    regions = rng.sample(_REGIONS, 4)
    products = rng.sample([p["name"] for p in data.products], 5)
    prices = {name: round(rng.uniform(3, 80), 2) for name in products}
    rows = rng.randint(24, 36)
    empty = set(rng.sample(range(rows), rng.randint(3, 6)))
    for k in range(rows):
        name = rng.choice(products)
        data.sales.append(
            {
                "date": f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d}",
                "region": rng.choice(regions),
                "product": name,
                "units": None if k in empty else rng.randint(1, 60),
                "unit_price": prices[name],
            }
        )
    revenue = {name: _revenue(data.sales, name) for name in products}
    top = max(revenue, key=lambda k: revenue[k])
    if sorted(revenue.values())[-2] == revenue[top]:
        row = next(r for r in data.sales if r["product"] == top and r["units"] is not None)
        row["units"] += 1


def _revenue(sales: list[dict[str, Any]], product: str) -> float:
    return round(
        sum(r["units"] * r["unit_price"] for r in sales if r["product"] == product and r["units"]),
        2,
    )


def _build_pages(rng: random.Random, data: WebData) -> None:
    major = rng.randint(1, 6)
    codenames = rng.sample(_CODENAMES, rng.randint(8, 12))
    year, month = rng.randint(2019, 2021), rng.randint(1, 12)
    for k, code in enumerate(codenames):
        data.releases.append(
            {
                "version": f"{major + k // 4}.{k % 4}.{rng.randint(0, 3)}",
                "date": f"{year}-{month:02d}-{rng.randint(1, 28):02d}",
                "codename": code,
                "downloads": rng.randint(1200, 98000),
            }
        )
        month += rng.randint(3, 7)
        year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    downloads = {r["codename"]: r["downloads"] for r in data.releases}
    _unique_max(downloads, 1)
    for r in data.releases:
        r["downloads"] = int(downloads[r["codename"]])
    cities = rng.sample(_CITIES, 4)
    # the issue assignees are people of the team, so the team page joins the tracker
    assignees = sorted({i["assignee"] for i in data.issues if i["assignee"]})
    taken = {name.split()[0] for name in assignees}
    firsts = rng.sample([f for f in _FIRST if f not in taken], rng.randint(4, 9))
    for name in assignees + [f"{f} {rng.choice(_LAST)}" for f in firsts]:
        data.team.append(
            {
                "name": name,
                "role": rng.choice(_ROLES),
                "city": rng.choice(cities),
                "joined": rng.randint(2015, 2025),
            }
        )
    rng.shuffle(data.team)
    maintainers = _names(rng, 3)
    for topic in rng.sample(_GUIDES, rng.randint(5, 7)):
        data.guides.append(
            {
                "slug": topic.lower(),
                "title": f"{topic} guide",
                "maintainer": rng.choice(maintainers),
                "reviewed": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}",
            }
        )
    if len({g["maintainer"] for g in data.guides}) == 1:  # the question needs a contrast
        data.guides[0]["maintainer"] = next(
            m for m in maintainers if m != data.guides[1]["maintainer"]
        )
    v = [rng.randint(2, 4), 0, 0]
    # long enough that fetch's markdown (5000 characters a piece) takes two or three pieces
    for _ in range(rng.randint(60, 80)):
        v[2] += 1
        if rng.random() < 0.2:
            v[1], v[2] = v[1] + 1, 0
        changes = rng.sample(_CHANGES, rng.randint(2, 3))
        security = rng.random() < 0.25
        if security:
            changes.insert(rng.randint(0, 2), "shipped a security fix for the session cookies")
        data.changelog.append(
            {"version": ".".join(map(str, v)), "changes": changes, "security": security}
        )


def _build_library(rng: random.Random, data: WebData) -> None:
    titles = rng.sample([f"The {a} {b}" for a in _TITLE_A for b in _TITLE_B], rng.randint(16, 24))
    authors = rng.sample(_AUTHORS, 5)
    branches = rng.sample(_BRANCHES, 3)
    for title in titles:
        data.books.append(
            {
                "branch": rng.choice(branches),
                "title": title,
                "author": rng.choice(authors),
                "year": rng.randint(1890, 2024),
                "copies_available": rng.choice([0, 0, 1, 2, 3]),
            }
        )
    years = Counter(b["year"] for b in data.books)
    oldest = min(data.books, key=lambda b: b["year"])
    if years[oldest["year"]] > 1:
        oldest["year"] -= 1


# ---- rendering: the records as the server serves them ----------------------------------


def _render(data: WebData) -> dict[str, tuple[str, str]]:
    files: dict[str, tuple[str, str]] = {}
    js = "application/json"
    public = ("id", "name", "category", "price", "stock")
    files[f"{data.shop}/products"] = (
        js,
        _json(
            {
                data.keys["products"]: [
                    {
                        **{k: p[k] for k in public},
                        "url": data.url(f"{data.shop}/products/{p['id']}"),
                    }
                    for p in data.products
                ],
                "count": len(data.products),
            }
        ),
    )
    for p in data.products:
        files[f"{data.shop}/products/{p['id']}"] = (js, _json(p))
    files[f"{data.shop}/orders"] = (
        js,
        _json({"shop": data.shop.rsplit("/", 1)[1], data.keys["orders"]: data.orders}),
    )
    per_page = -(-len(data.issues) // data.issue_pages)
    for page in range(1, data.issue_pages + 1):
        chunk = data.issues[(page - 1) * per_page : page * per_page]
        more = page < data.issue_pages
        body = _json(
            {
                "page": page,
                data.keys["issues"]: chunk,
                "next": data.url(f"/api/tracker/issues?page={page + 1}") if more else None,
            }
        )
        files[f"/api/tracker/issues?page={page}"] = (js, body)
        if page == 1:
            files["/api/tracker/issues"] = (js, body)
    files["/data/sales.csv"] = ("text/csv", _sales_csv(data))
    files["/data/warehouse-stock.csv"] = (
        "text/csv",
        _csv(["product_id", "warehouse", "quantity"], [list(s.values()) for s in data.stock]),
    )
    files["/releases.html"] = (
        "text/html",
        _page(
            "Releases",
            "<p>Every release of the desktop app, with its download count to date.</p>"
            + _table(
                ["Version", "Released", "Codename", "Downloads"],
                [
                    [r["version"], r["date"], r["codename"], f"{r['downloads']:,}"]
                    for r in data.releases
                ],
            ),
        ),
    )
    files["/team.html"] = (
        "text/html",
        _page(
            "Our team",
            "<p>The people behind the app and where they work from.</p>"
            + _table(
                ["Name", "Role", "City", "Joined"],
                [[p["name"], p["role"], p["city"], str(p["joined"])] for p in data.team],
            ),
        ),
    )
    files["/docs/index.html"] = (
        "text/html",
        _page(
            "Operator guides",
            "<p>These guides cover running the app in production. Each guide page names its "
            "maintainer.</p><ul>"
            + "".join(
                f'<li><a href="{data.url("/docs/" + g["slug"] + ".html")}">'
                f"{html.escape(g['title'])}</a></li>"
                for g in data.guides
            )
            + "</ul>",
        ),
    )
    for g in data.guides:
        files[f"/docs/{g['slug']}.html"] = (
            "text/html",
            _page(
                g["title"],
                f"<p>This guide explains {g['slug']} for operators of the app, step by step, "
                "with the settings that matter and the mistakes to avoid.</p>"
                f"<p>Maintainer: {html.escape(g['maintainer'])}</p>"
                f"<p>Last reviewed: {g['reviewed']}</p>",
            ),
        )
    files["/changelog.html"] = (
        "text/html",
        _page(
            "Changelog",
            "<p>All changes, newest last.</p>"
            + "".join(
                f"<h2>Version {c['version']}</h2><p>In this version we "
                + "; we ".join(c["changes"])
                + ".</p>"
                for c in data.changelog
            ),
        ),
    )
    branches: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in data.books:
        branches[b["branch"]].append({k: v for k, v in b.items() if k != "branch"})
    files["/api/library/catalog"] = (
        js,
        _json(
            {
                "library": {
                    "name": "City Library",
                    "branches": [
                        {"name": name, "books": books} for name, books in branches.items()
                    ],
                },
                "generated": "2026-11-30",
            }
        ),
    )
    return files


def _json(value: Any) -> str:
    return json.dumps(value, indent=1)


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _sales_csv(data: WebData) -> str:
    return _csv(
        ["date", "region", "product", "units", "unit_price"],
        [
            [
                r["date"],
                r["region"],
                r["product"],
                "" if r["units"] is None else r["units"],
                f"{r['unit_price']:.2f}",
            ]
            for r in data.sales
        ],
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(title: str, body: str) -> str:
    t = html.escape(title)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{t}</title></head>"
        f"<body><main><article><h1>{t}</h1>{body}</article></main></body></html>"
    )


# ---- templates ----------------------------------------------------------------------------


def _site(world: World) -> WebData:
    site: WebData = world.data["web"]
    return site


def _pick(world: World, name: str) -> random.Random:
    """A template's own choices (which category, which threshold) for this seed."""
    return random.Random(f"web:{world.seed}:{name}")


_MISSING = re.compile(
    r"\b(404|not found|no such|"
    r"(?:do|does|did) ?n[o']t (?:exist|include|contain|list|mention|have|say|show|state)|"
    r"(?:not|isn't|aren't) (?:listed|mentioned|included|present|given|specified|stated|available)|"
    r"no (?:warranty|mention|field|record|information|info|data))\b",
    re.IGNORECASE,
)


def _says_missing(reply: str) -> bool:
    """Whether ``reply`` says the page or the fact is not there (404, not listed, cannot)."""
    return says_cannot(reply) or _MISSING.search(reply) is not None


def _says_none_of(reply: str, noun: str) -> bool:
    """``says_none``, or "no ... <noun>s" in a few words ("No open issues are labeled ...",
    "there are no products in ...")."""
    return says_none(reply) or (
        re.search(rf"\bno\b[\w\s\"'-]{{0,40}}?\b{noun}s?\b", reply, re.IGNORECASE) is not None
    )


def _names_or_none(wanted: list[str], others: list[str], noun: str) -> tuple[str, Any]:
    """The answer text and check for a list of ``noun``s that may be empty in some seed; a
    reply naming one of ``others`` is wrong either way."""
    if not wanted:
        return "None.", lambda reply: _says_none_of(reply, noun) and lacks_words(reply, *others)
    return ", ".join(wanted), lambda reply: exactly(reply, wanted, others)


def _has_version(reply: str, version: str) -> bool:
    """Whether ``reply`` states ``version`` ("3.1.2", "v3.1.2"), not a longer one ("13.1.2")."""
    return re.search(rf"(?<![\d.]){re.escape(version)}(?!\d|\.\d)", reply) is not None


def _low_stock(world: World) -> Case:
    site = _site(world)
    limit = _pick(world, "low-stock").choice([3, 5, 8, 12, 15])
    n = sum(1 for p in site.products if p["stock"] < limit)
    return number_case(
        f"Our shop's product list is at {site.url(site.shop + '/products')}. How many products "
        f"have fewer than {limit} units in stock? Reply with the number.",
        n,
    )


def _cheapest_in_category(world: World) -> Case:
    site = _site(world)
    cats = sorted({p["category"] for p in site.products})
    cat = _pick(world, "cheapest").choice(cats)
    items = [p for p in site.products if p["category"] == cat]
    best = min(items, key=lambda p: p["price"])
    others = [p["name"] for p in items if p is not best]
    return Case(
        f"Looking at {site.url(site.shop + '/products')}, which product in the {cat} category "
        "is the cheapest? Reply with its name and price.",
        f"{best['name']} ({best['price']:.2f})",
        lambda reply: exactly(reply, [best["name"]], others) and has_number(reply, best["price"]),
    )


def _biggest_category(world: World) -> Case:
    site = _site(world)
    counts = Counter(p["category"] for p in site.products)
    top, n = counts.most_common(1)[0]
    others = [c for c in counts if c != top]
    return Case(
        f"Which category has the most products in our catalog at "
        f"{site.url(site.shop + '/products')}? Reply with the category and how many products "
        "it has.",
        f"{top} ({n})",
        lambda reply: exactly(reply, [top], others) and has_number(reply, n),
    )


def _top_rated(world: World) -> Case:
    site = _site(world)
    best = max(site.products, key=lambda p: p["rating"])
    others = [p["name"] for p in site.products if p is not best]
    return Case(
        f"The product list at {site.url(site.shop + '/products')} does not show ratings, but each "
        "product has a url to its detail page, which does. Which product has the highest rating? "
        "Reply with the product name and its rating.",
        f"{best['name']} ({best['rating']})",
        lambda reply: (
            exactly(reply, [best["name"]], others) and has_number(reply, best["rating"], 1)
        ),
    )


def _customer_spend(world: World) -> Case:
    site = _site(world)
    customer = _pick(world, "spend").choice(sorted({o["customer"] for o in site.orders}))
    total = round(
        sum(
            o["quantity"] * site.product(o["product_id"])["price"]
            for o in site.orders
            if o["customer"] == customer
        ),
        2,
    )
    return Case(
        f"Our orders are at {site.url(site.shop + '/orders')} (each names a product_id and a "
        f"quantity) and the product prices at {site.url(site.shop + '/products')}. How much did "
        f"{customer} spend in total, summing quantity times price over all their orders? Reply "
        "with the amount.",
        f"{total:.2f}",
        lambda reply: has_number(reply, total, 2),
    )


_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip


def _orders_in_month(world: World) -> Case:
    site = _site(world)
    per_month = Counter(int(o["date"][5:7]) for o in site.orders)
    # a month with a few orders, where one exists: a count of 1 is too easy to hit by chance
    months = sorted(m for m, k in per_month.items() if k > 1) or sorted(per_month)
    month = _pick(world, "orders-month").choice(months)
    n = sum(1 for o in site.orders if int(o["date"][5:7]) == month)
    return number_case(
        f"How many orders were placed in {_MONTHS[month - 1]} 2026? Our orders are listed at "
        f"{site.url(site.shop + '/orders')}. Reply with the number.",
        n,
    )


def _top_supplier(world: World) -> Case:
    site = _site(world)
    counts = Counter(p["supplier"] for p in site.products)
    top, n = counts.most_common(1)[0]
    others = [name for name in counts if name != top]
    return Case(
        f"Which supplier supplies the most of the products listed at "
        f"{site.url(site.shop + '/products')}? The list does not name suppliers; each item's "
        "url leads to its detail page, which does. Reply with the supplier and how many "
        "products it supplies.",
        f"{top} ({n})",
        lambda reply: exactly(reply, [top], others) and has_number(reply, n),
    )


def _issues_url(site: WebData) -> str:
    return site.url("/api/tracker/issues?page=1")


def _open_issues(world: World) -> Case:
    site = _site(world)
    n = sum(1 for i in site.issues if i["state"] == "open")
    return number_case(
        f"Our issue tracker's API returns issues one page at a time, starting at "
        f"{_issues_url(site)}; each page has a next link to the following page. How many issues "
        "are open across all pages? Reply with the number.",
        n,
    )


def _busiest_assignee(world: World) -> Case:
    site = _site(world)
    counts = Counter(i["assignee"] for i in site.issues if i["state"] == "open" and i["assignee"])
    top, n = counts.most_common(1)[0]
    others = sorted({i["assignee"] for i in site.issues if i["assignee"] and i["assignee"] != top})
    return Case(
        f"Who has the most open issues assigned to them in the tracker at {_issues_url(site)}? "
        "The API is paginated: follow each page's next link to the end. Reply with the person's "
        "name and their number of open issues.",
        f"{top} ({n})",
        lambda reply: exactly(reply, [top], others) and has_number(reply, n),
    )


def _label_count(world: World) -> Case:
    site = _site(world)
    labels = sorted({lab for i in site.issues for lab in i["labels"] if lab != site.closing_label})
    label = _pick(world, "label").choice(labels)
    n = sum(1 for i in site.issues if label in i["labels"])
    return number_case(
        f'How many issues, open or closed, carry the label "{label}" in the tracker at '
        f"{_issues_url(site)}? It returns a page at a time with a next link; count over every "
        "page. Reply with the number.",
        n,
    )


def _open_closing_label(world: World) -> Case:
    site = _site(world)
    label = site.closing_label
    hits = [str(i["number"]) for i in site.issues if i["state"] == "open" and label in i["labels"]]
    # no "others": "#184 and #190 carry it, but both are closed, so none" is a right reply
    answer, check = _names_or_none(hits, [], "issue")
    return Case(
        f'Which issues labeled "{label}" are still open in our tracker at {_issues_url(site)}? '
        "Look at every page (follow the next links). Reply with their numbers, or say that "
        "there are none.",
        answer,
        check,
        no_data=not hits,
    )


def _csv_url(site: WebData) -> str:
    return site.url("/data/sales.csv")


def _region_units(world: World) -> Case:
    site = _site(world)
    region = _pick(world, "region").choice(sorted({r["region"] for r in site.sales}))
    n = sum(r["units"] or 0 for r in site.sales if r["region"] == region)
    return number_case(
        f"Our sales export is a CSV file at {_csv_url(site)}. How many units were sold in the "
        f"{region} region in total? Some units cells are empty (not recorded): leave those out. "
        "Reply with the number.",
        n,
    )


def _missing_units(world: World) -> Case:
    site = _site(world)
    n = sum(1 for r in site.sales if r["units"] is None)
    return number_case(
        f"In the CSV at {_csv_url(site)}, how many rows have an empty units cell? "
        "Reply with the number.",
        n,
    )


def _first_rows(world: World) -> Case:
    site = _site(world)
    k = _pick(world, "first-rows").randint(6, 12)
    n = sum(r["units"] or 0 for r in site.sales[:k])
    return number_case(
        f"What is the sum of the units column over the first {k} data rows (the rows right "
        f"after the header) of {_csv_url(site)}? Count an empty cell as 0. Reply with the number.",
        n,
    )


def _top_revenue(world: World) -> Case:
    site = _site(world)
    products = sorted({r["product"] for r in site.sales})
    revenue = {name: _revenue(site.sales, name) for name in products}
    top = max(revenue, key=lambda k: revenue[k])
    others = [p for p in products if p != top]
    return Case(
        f"Using the sales CSV at {_csv_url(site)}, which product brought in the most revenue "
        "(units times unit_price, summed over its rows; rows with no units count for nothing)? "
        "Reply with the product name.",
        f"{top} ({revenue[top]:.2f})",
        lambda reply: exactly(reply, [top], others),
    )


def _most_downloads(world: World) -> Case:
    site = _site(world)
    best = max(site.releases, key=lambda r: r["downloads"])
    others = [r["codename"] for r in site.releases if r is not best]
    return Case(
        f"Which release listed on {site.url('/releases.html')} has been downloaded the most? "
        "Reply with its version and codename.",
        f"{best['version']} {best['codename']}",
        lambda reply: (
            exactly(reply, [best["codename"]], others) and _has_version(reply, best["version"])
        ),
    )


def _releases_in_year(world: World) -> Case:
    site = _site(world)
    year = _pick(world, "year").choice(sorted({r["date"][:4] for r in site.releases}))
    n = sum(1 for r in site.releases if r["date"].startswith(year))
    return number_case(
        f"How many releases came out in {year}, according to the releases page at "
        f"{site.url('/releases.html')}? Reply with the number.",
        n,
    )


def _team_in_city(world: World) -> Case:
    site = _site(world)
    city = _pick(world, "city").choice(sorted({p["city"] for p in site.team}))
    names = [p["name"] for p in site.team if p["city"] == city]
    others = [p["name"] for p in site.team if p["city"] != city]
    return Case(
        f"Who on our team works from {city}? The team page is {site.url('/team.html')}. Reply "
        "with their full names.",
        ", ".join(names),
        lambda reply: exactly(reply, names, others),
    )


def _guides_by(world: World) -> Case:
    site = _site(world)
    person = _pick(world, "guides").choice(sorted({g["maintainer"] for g in site.guides}))
    topics = [g["slug"] for g in site.guides if g["maintainer"] == person]
    others = [g["slug"] for g in site.guides if g["maintainer"] != person]
    return Case(
        f"The guide index at {site.url('/docs/index.html')} links to our operator guides, and "
        f"each guide's page names its maintainer. Which guides does {person} maintain? Reply "
        "with the guide titles.",
        ", ".join(f"{t.title()} guide" for t in topics),
        lambda reply: exactly(reply, topics, others),
    )


def _warehouse_units(world: World) -> Case:
    site = _site(world)
    rng = _pick(world, "warehouse")
    cat_of = {p["id"]: p["category"] for p in site.products}
    pairs = sorted({(s["warehouse"], cat_of[s["product_id"]]) for s in site.stock if s["quantity"]})
    warehouse, cat = rng.choice(pairs)
    n = sum(
        s["quantity"]
        for s in site.stock
        if s["warehouse"] == warehouse and cat_of[s["product_id"]] == cat
    )
    return number_case(
        f"{site.url('/data/warehouse-stock.csv')} lists our stock per warehouse by product_id, "
        f"and {site.url(site.shop + '/products')} gives each product's category. How many units "
        f"of {cat} products are held in the {warehouse} warehouse? Reply with the number.",
        n,
    )


def _open_issues_by_city(world: World) -> Case:
    site = _site(world)
    city_of = {p["name"]: p["city"] for p in site.team}
    cities = sorted({city_of[i["assignee"]] for i in site.issues if i["assignee"]})
    city = _pick(world, "issues-city").choice(cities)
    n = sum(
        1
        for i in site.issues
        if i["state"] == "open" and i["assignee"] and city_of[i["assignee"]] == city
    )
    return number_case(
        f"How many open issues are assigned to people who work from {city}? The team page "
        f"{site.url('/team.html')} says where each person works; the tracker API at "
        f"{_issues_url(site)} lists the issues with their assignee, a page at a time (follow "
        "the next links). Reply with the number.",
        n,
    )


def _catalog_url(site: WebData) -> str:
    return site.url("/api/library/catalog")


def _available_by_author(world: World) -> Case:
    site = _site(world)
    author = _pick(world, "author").choice(sorted({b["author"] for b in site.books}))
    n = sum(1 for b in site.books if b["author"] == author and b["copies_available"] > 0)
    return number_case(
        f"The library catalog at {_catalog_url(site)} lists the books of every branch. How many "
        f"books by {author} have at least one copy available, over all branches? Reply with "
        "the number.",
        n,
    )


def _oldest_book(world: World) -> Case:
    site = _site(world)
    oldest = min(site.books, key=lambda b: b["year"])
    # "Glass Letters" names "The Glass Letters" (every title is "The X Y", each X Y once)
    title = oldest["title"].removeprefix("The ")
    others = [b["title"].removeprefix("The ") for b in site.books if b is not oldest]
    return Case(
        f"What is the oldest book (earliest year) in the library catalog at {_catalog_url(site)}, "
        "and which branch holds it? Reply with the title and the branch.",
        f"{oldest['title']} ({oldest['branch']})",
        lambda reply: exactly(reply, [title], others) and has_words(reply, oldest["branch"]),
    )


def _security_fixes(world: World) -> Case:
    site = _site(world)
    versions = [c["version"] for c in site.changelog if c["security"]]
    n = len(versions)
    return number_case(
        f"Our changelog is the page {site.url('/changelog.html')}; it is long. How many versions "
        "in it shipped a security fix? Reply with the number.",
        n,
    )


def _pricey(world: World) -> Case:
    site = _site(world)
    cats = sorted({p["category"] for p in site.products})
    rng = _pick(world, "pricey")
    cat = rng.choice(cats)
    items = [p for p in site.products if p["category"] == cat]
    # above the dearest of the category: the answer is empty in every seed, and so computed
    limit = int(max(p["price"] for p in items)) + rng.choice([10, 25, 40])
    hits = [p["name"] for p in items if p["price"] > limit]
    others = [p["name"] for p in items if p["price"] <= limit]
    answer, check = _names_or_none(hits, others, "product")
    return Case(
        f"Which products in the {cat} category of {site.url(site.shop + '/products')} cost more "
        f"than {limit}? Reply with their names, or say that there are none.",
        answer,
        check,
        no_data=not hits,
    )


def _missing_api(world: World) -> Case:
    site = _site(world)
    rng = _pick(world, "missing-api")
    thing = rng.choice(["returns", "refunds", "complaints", "exchanges"])
    month = rng.choice(["March", "June", "September", "October"])
    path = f"{site.shop}/{thing}"
    served = path in world.http_files
    return Case(
        f"How many product {thing} were filed in {month}? Our {thing} API is at {site.url(path)}. "
        "Reply with the number.",
        f"The {thing} API does not exist (404), so I cannot tell." if not served else "?",
        _says_missing,
        no_data=not served,
    )


def _warranty(world: World) -> Case:
    site = _site(world)
    product = _pick(world, "warranty").choice(site.products)
    held = "warranty" in json.dumps(product)
    return Case(
        f"How long is the warranty on the {product['name']}? Its details are at "
        f"{site.url(site.shop + '/products/' + str(product['id']))}. Reply with the warranty "
        "period.",
        "Its details do not state a warranty, so I cannot tell." if not held else "?",
        _says_missing,
        no_data=not held,
    )


TEMPLATES: list[Template] = [
    Template("web.products-low-stock", "count", ("simple",), _low_stock),
    Template("web.cheapest-in-category", "argmax", ("simple",), _cheapest_in_category),
    Template("web.category-most-products", "group", ("simple",), _biggest_category),
    Template("web.top-rated-product", "two-hop", ("simple",), _top_rated),
    Template("web.customer-spend", "join", ("simple",), _customer_spend),
    Template("web.orders-in-month", "count", ("simple",), _orders_in_month),
    Template("web.top-supplier", "two-hop", ("simple",), _top_supplier),
    Template("web.open-issues-total", "pages", ("simple",), _open_issues),
    Template("web.assignee-most-open-issues", "group", ("simple",), _busiest_assignee),
    Template("web.issues-with-label", "pages", ("simple",), _label_count),
    Template("web.open-issues-closing-label", "none", ("simple",), _open_closing_label),
    Template("web.sales-region-units", "text", ("simple", "fetch"), _region_units),
    Template("web.sales-empty-units", "count", ("simple", "fetch"), _missing_units),
    Template("web.sales-first-rows-units", "text", ("simple", "fetch"), _first_rows),
    Template("web.sales-top-revenue-product", "group", ("simple", "fetch"), _top_revenue),
    Template("web.release-most-downloads", "argmax", ("fetch",), _most_downloads),
    Template("web.releases-in-year", "count", ("fetch",), _releases_in_year),
    Template("web.team-in-city", "text", ("fetch",), _team_in_city),
    Template("web.guides-by-maintainer", "two-hop", ("fetch",), _guides_by),
    Template("web.warehouse-category-units", "join", ("simple",), _warehouse_units),
    Template("web.open-issues-by-city", "join", ("fetch", "simple"), _open_issues_by_city),
    Template("web.library-available-by-author", "count", ("simple",), _available_by_author),
    Template("web.library-oldest-book", "argmax", ("simple",), _oldest_book),
    Template("web.changelog-security-fixes", "text", ("fetch",), _security_fixes),
    Template("web.pricey-in-category", "none", ("simple",), _pricey),
    Template("web.missing-api", "unanswerable", ("simple",), _missing_api),
    Template("web.product-warranty", "unanswerable", ("simple",), _warranty),
]
