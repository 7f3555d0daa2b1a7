"""The SQLite questions: a seeded shop database that ``mcp-server-sqlite`` serves, and what to ask.

``build`` writes ``world.db`` with the stdlib ``sqlite3``: ``customers``,
``products``, ``orders`` (``ordered_at`` in UTC), ``order_items`` and
``employees`` (the people of ``git.people``, so a question may join commit
authors to their teams). Names, values, sizes and row order come from the
seed; the rows are kept in ``world.data["sql"]`` for the checkers.

The server answers ``read_query`` with the text of a Python list of dicts
(``str(rows)``), not JSON; code mode reads such text as the list it writes
(spec 0004's nested results, adapted). Some questions are one query; some need Python
over the rows (time zones, averages of per-order totals).
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bench.questions.core import (
    Case,
    Template,
    World,
    has_number,
    has_words,
    lacks_words,
    number_case,
)
from bench.questions.git import has_pairs, people, says_none_of, says_not_held

__all__ = ["TEMPLATES", "ShopData", "build"]

_FIRST = [
    "Ada",
    "Basil",
    "Cora",
    "Dario",
    "Edith",
    "Felix",
    "Gemma",
    "Hugo",
    "Iris",
    "Jasper",
    "Kira",
    "Luca",
    "Mila",
    "Nico",
    "Olga",
    "Pavel",
    "Rhea",
    "Silas",
    "Thea",
    "Uri",
    "Vita",
    "Wren",
    "Yara",
    "Zane",
    "Alba",
    "Boris",
    "Clio",
    "Emil",
    "Fern",
    "Gus",
]
_LAST = [
    "Arden",
    "Bishop",
    "Crane",
    "Dalton",
    "Ellery",
    "Fontaine",
    "Garner",
    "Holm",
    "Ibarra",
    "Joyce",
    "Keller",
    "Lowe",
    "Mercer",
    "Nolan",
    "Ortega",
    "Pryce",
    "Rowe",
    "Sutter",
    "Thorne",
    "Upton",
    "Vance",
    "Whitlock",
    "Yates",
    "Zeller",
]
_PLACES = {
    "Portugal": ("Lisbon", "Porto", "Braga"),
    "Germany": ("Berlin", "Hamburg", "Leipzig"),
    "Canada": ("Toronto", "Montreal", "Calgary"),
    "Japan": ("Osaka", "Kyoto", "Sapporo"),
    "Chile": ("Santiago", "Valparaiso"),
    "Kenya": ("Nairobi", "Mombasa"),
}
_CATALOG = {
    "kitchen": ("kettle", "skillet", "teapot", "colander", "whisk", "cutting board"),
    "garden": ("trowel", "hose reel", "planter", "pruner", "watering can"),
    "office": ("desk lamp", "stapler", "notebook", "monitor stand", "pen set"),
    "outdoor": ("tent", "headlamp", "camp stove", "sleeping bag", "water filter"),
    "toys": ("kite", "puzzle", "yo-yo", "marble run", "rubber duck"),
}
_ADJ = ("Classic", "Compact", "Deluxe", "Nordic", "Everyday", "Pro", "Mini", "Bamboo")
_TOKYO = ZoneInfo("Asia/Tokyo")


@dataclass
class ShopData:
    """The rows of the shop database, as written."""

    customers: list[dict[str, Any]]  # id, name, email, city, country, signed_up
    products: list[dict[str, Any]]  # id, name, category, price, stock
    orders: list[dict[str, Any]]  # id, customer_id, ordered_at (UTC datetime), status
    items: list[dict[str, Any]]  # order_id, product_id, quantity, unit_price
    employees: list[dict[str, Any]]  # id, name, email, team, hired_on, salary

    def total(self, order_id: int) -> float:
        return round(
            sum(i["quantity"] * i["unit_price"] for i in self.items if i["order_id"] == order_id), 2
        )


def _generate(rng: random.Random, seed: int) -> ShopData:
    names = [
        f"{f} {last}"
        for f, last in zip(rng.sample(_FIRST, 30), rng.sample(_LAST, 24) * 2, strict=False)
    ]
    countries = rng.sample(sorted(_PLACES), 4)
    customers = []
    for i, name in enumerate(names[: rng.randint(18, 30)]):
        country = rng.choice(countries)
        first, last = name.lower().split()
        customers.append(
            {
                "id": i + 1,
                "name": name,
                "email": f"{first}.{last}@mail.example",
                "city": rng.choice(_PLACES[country]),
                "country": country,
                "signed_up": str(date(2024, 1, 1) + timedelta(days=rng.randint(0, 400))),
            }
        )
    products = []
    for category in rng.sample(sorted(_CATALOG), 4):
        for thing in rng.sample(_CATALOG[category], rng.randint(3, 5)):
            products.append(
                {
                    "name": f"{rng.choice(_ADJ)} {thing}",
                    "category": category,
                    "price": round(rng.uniform(4, 180), 2),
                    "stock": rng.randint(1, 60),
                }
            )
    rng.shuffle(products)
    for i, p in enumerate(products):
        p["id"] = i + 1
    # A few customers never order: the anti-join question has an answer.
    buyers = rng.sample(customers, len(customers) - rng.randint(2, 5))
    start = datetime(2025, rng.randint(1, 5), 1, tzinfo=UTC)
    orders, items = [], []
    for i in range(rng.randint(70, 110)):
        when = start + timedelta(minutes=rng.randint(0, 100 * 24 * 60))
        orders.append(
            {
                "id": i + 1,
                "customer_id": rng.choice(buyers)["id"],
                "ordered_at": when,
                "status": rng.choices(
                    ("delivered", "shipped", "pending", "cancelled"), (6, 2, 1, 2)
                )[0],
            }
        )
        for p in rng.sample(products, rng.randint(1, 3)):
            items.append(
                {
                    "order_id": i + 1,
                    "product_id": p["id"],
                    "quantity": rng.randint(1, 4),
                    "unit_price": p["price"],
                }
            )
    employees: list[dict[str, Any]] = []
    staff = people(seed)
    for i in rng.sample(range(len(staff)), len(staff)):
        person = staff[i]
        employees.append(
            {
                "id": len(employees) + 1,
                "name": person.name,
                "email": person.email,
                "team": person.team,
                "hired_on": str(date(2019, 1, 1) + timedelta(days=rng.randint(0, 2000))),
                "salary": rng.randrange(52000, 140000, 500),
            }
        )
    return ShopData(customers, products, orders, items, employees)


def _acceptable(d: ShopData) -> bool:
    """The argmax and argmin questions have one answer."""
    spent = _spent(d)
    top = sorted(spent.values(), reverse=True)
    months = Counter(o["ordered_at"].strftime("%Y-%m") for o in d.orders).most_common(2)
    return len(top) > 1 and top[0] != top[1] and months[0][1] > months[1][1]


_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, city TEXT,
                        country TEXT, signed_up TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, price REAL,
                       stock INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     ordered_at TEXT, status TEXT);
CREATE TABLE order_items (order_id INTEGER REFERENCES orders(id),
                          product_id INTEGER REFERENCES products(id), quantity INTEGER,
                          unit_price REAL);
CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, team TEXT,
                        hired_on TEXT, salary INTEGER);
"""


def build(world: World) -> None:
    """Write the seed's shop database at ``world.db`` and keep its rows in ``world.data["sql"]``."""
    rng = random.Random(f"sql:{world.seed}")
    for _ in range(200):
        data = _generate(rng, world.seed)
        if _acceptable(data):
            break
    else:  # pragma: no cover - the draws make this vanishingly unlikely
        raise RuntimeError(f"no acceptable shop for seed {world.seed}")
    world.db.parent.mkdir(parents=True, exist_ok=True)
    world.db.unlink(missing_ok=True)
    with sqlite3.connect(world.db) as conn:
        conn.executescript(_SCHEMA)
        for table, rows in (
            ("customers", data.customers),
            ("products", data.products),
            (
                "orders",
                [
                    o | {"ordered_at": o["ordered_at"].strftime("%Y-%m-%d %H:%M:%S")}
                    for o in data.orders
                ],
            ),
            ("order_items", data.items),
            ("employees", data.employees),
        ):
            cols = list(rows[0])
            conn.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [tuple(r[c] for c in cols) for r in rows],
            )
    conn.close()
    world.data["sql"] = data


# ---- templates ----------------------------------------------------------------------------


def _d(world: World) -> ShopData:
    data: ShopData = world.data["sql"]
    return data


def _spent(d: ShopData) -> dict[str, float]:
    """Each customer's spending on delivered orders (customers with none left out)."""
    names = {c["id"]: c["name"] for c in d.customers}
    out: dict[str, float] = defaultdict(float)
    for o in d.orders:
        if o["status"] == "delivered":
            out[names[o["customer_id"]]] += d.total(o["id"])
    return {k: round(v, 2) for k, v in out.items()}


def _pick(world: World, salt: str) -> random.Random:
    return random.Random(f"sql:{world.seed}:{salt}")


def _customers_in(world: World) -> Case:
    d = _d(world)
    country = _pick(world, "country").choice(sorted({c["country"] for c in d.customers}))
    n = sum(c["country"] == country for c in d.customers)
    return number_case(
        f"How many of our customers are in {country}? The shop's SQLite database has a customers "
        f"table with a country column. Reply with the number.",
        n,
    )


def _top_spender(world: World) -> Case:
    spent = _spent(_d(world))
    top = max(spent, key=lambda k: spent[k])
    others = [k for k in spent if k != top]
    return Case(
        "Which customer has spent the most on delivered orders? In our SQLite shop database an "
        "order's amount is the sum of quantity * unit_price over its order_items, and "
        "orders.status says whether it was delivered. Reply with the customer's name.",
        f"{top} ({spent[top]:.2f})",
        lambda r: has_words(r, top) and lacks_words(r, *others),
    )


def _revenue_by_category(world: World) -> Case:
    d = _d(world)
    cat = {p["id"]: p["category"] for p in d.products}
    live = {o["id"] for o in d.orders if o["status"] != "cancelled"}
    rev: dict[str, float] = defaultdict(float)
    for i in d.items:
        if i["order_id"] in live:
            rev[cat[i["product_id"]]] += i["quantity"] * i["unit_price"]
    totals = {k: round(v, 2) for k, v in rev.items()}
    return Case(
        "What is our revenue per product category, leaving out cancelled orders? Revenue is "
        "quantity * unit_price from order_items in the SQLite shop database. Reply with one line "
        "per category: category: amount (2 decimals).",
        ", ".join(f"{k}: {v:.2f}" for k, v in sorted(totals.items())),
        lambda r: has_pairs(r, dict(totals), 2),
    )


def _cheapest(world: World) -> Case:
    d = _d(world)
    cats = sorted({p["category"] for p in d.products})
    rng = _pick(world, "cheapest")
    rng.shuffle(cats)
    for category in cats:
        prices = sorted(p["price"] for p in d.products if p["category"] == category)
        if len(prices) < 2 or prices[0] != prices[1]:
            break
    group = [p for p in d.products if p["category"] == category]
    low = min(group, key=lambda p: p["price"])
    others = [p["name"] for p in group if p["name"] != low["name"]]
    return Case(
        f"What is the cheapest product in the {category} category of our shop's products table "
        f"(SQLite)? Reply with its name and price.",
        f"{low['name']} ({low['price']:.2f})",
        lambda r: (
            has_words(r, low["name"]) and lacks_words(r, *others) and has_number(r, low["price"], 2)
        ),
    )


def _tokyo_day(world: World) -> Case:
    d = _d(world)
    rng = _pick(world, "tokyo")
    local = Counter(o["ordered_at"].astimezone(_TOKYO).date() for o in d.orders)
    utc = Counter(o["ordered_at"].date() for o in d.orders)
    # A busy day on which the time zone matters, when there is one.
    days = sorted(local, key=lambda day: (local[day] != utc[day], local[day] >= 2, local[day]))
    days = [day for day in days if local[day] >= 2] or days
    day = days[-1] if rng.random() < 0.5 else days[-2]
    n = local[day]
    return Case(
        f"How many orders were placed on {day:%Y-%m-%d}, Tokyo time? The ordered_at column of the "
        f"orders table in our SQLite database is in UTC. Reply with the number.",
        f"{n} (UTC date would give {utc[day]})",
        lambda r: has_number(r, n),
    )


def _big_cancelled(world: World) -> Case:
    d = _d(world)
    cancelled = [d.total(o["id"]) for o in d.orders if o["status"] == "cancelled"]
    # Just above every cancelled order, so the filter matters and the answer is none.
    limit = (int(max(cancelled, default=0)) // 10 + 1) * 10
    return Case(
        f"Which cancelled orders were worth more than {limit} in total (sum of quantity * "
        f"unit_price of their order_items)? Our shop data is in the SQLite database. Reply with "
        f"the order ids, or say there are none.",
        "none",
        says_none_of,
        no_data=True,
    )


def _never_ordered(world: World) -> Case:
    d = _d(world)
    buyers = {o["customer_id"] for o in d.orders}
    quiet = [c["name"] for c in d.customers if c["id"] not in buyers]
    n = len(quiet)
    return Case(
        "How many customers in our SQLite shop database have never placed an order? "
        "Reply with the number.",
        f"{n} ({', '.join(quiet)})",
        lambda r: has_number(r, n),
    )


def _headcount(world: World) -> Case:
    counts = dict(Counter(e["team"] for e in _d(world).employees))
    return Case(
        "How many employees does each team have? It's the employees table of our SQLite database. "
        "Reply with one line per team: team: count.",
        ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())),
        lambda r: has_pairs(r, counts),
    )


def _average_order(world: World) -> Case:
    d = _d(world)
    totals = [d.total(o["id"]) for o in d.orders if o["status"] == "delivered"]
    avg = round(sum(totals) / len(totals), 2)
    return Case(
        "What is the average amount of a delivered order in our SQLite shop database? An order's "
        "amount is the sum of quantity * unit_price over its order_items. Reply with the amount "
        "rounded to 2 decimals.",
        f"{avg:.2f}",
        lambda r: has_number(r, avg, 2),
    )


def _busiest_month(world: World) -> Case:
    d = _d(world)
    counts = Counter(o["ordered_at"].strftime("%Y-%m") for o in d.orders)
    top = counts.most_common(1)[0][0]
    name = datetime.strptime(top, "%Y-%m").strftime("%B")
    others = [datetime.strptime(m, "%Y-%m").strftime("%B") for m in counts if m != top]
    return Case(
        "In which month did we get the most orders? The orders table of our SQLite database has "
        "an ordered_at timestamp (UTC). Reply with the month and year.",
        f"{name} {top[:4]} ({counts[top]} orders)",
        lambda r: (has_words(r, name) or top in r) and lacks_words(r, *others),
    )


def _campaign(world: World) -> Case:
    d = _d(world)
    who = _pick(world, "campaign").choice(d.customers)["name"]
    return Case(
        f"Which marketing campaign brought {who} to our shop? Check the shop's SQLite database. "
        f"Reply with the campaign name.",
        "cannot be answered: the database records no campaigns",
        says_not_held,
        no_data=True,
    )


def _salary_of_top_committer(world: World) -> Case:
    git = world.data["git"]
    counts = Counter(c.author.name for c in git.main)
    top = counts.most_common(1)[0][0]
    salary = next(e["salary"] for e in _d(world).employees if e["name"] == top)
    return Case(
        f"What is the salary of whoever made the most commits to the main branch of the "
        f"repository at {world.repo}? "
        f"Salaries are in the employees table of our SQLite database. Reply with the salary.",
        f"{salary} ({top})",
        lambda r: has_number(r, salary),
    )


TEMPLATES = [
    Template("sql.customers-in-country", "count", ("sqlite",), _customers_in),
    Template("sql.top-spending-customer", "argmax", ("sqlite",), _top_spender),
    Template("sql.revenue-per-category", "group", ("sqlite",), _revenue_by_category),
    Template("sql.cheapest-in-category", "argmax", ("sqlite",), _cheapest),
    Template("sql.orders-on-tokyo-day", "time", ("sqlite",), _tokyo_day),
    Template("sql.big-cancelled-orders", "none", ("sqlite",), _big_cancelled),
    Template("sql.customers-without-orders", "count", ("sqlite",), _never_ordered),
    Template("sql.team-headcount", "group", ("sqlite",), _headcount),
    Template("sql.average-delivered-order", "group", ("sqlite",), _average_order),
    Template("sql.busiest-month", "time", ("sqlite",), _busiest_month),
    Template("sql.customer-campaign", "unanswerable", ("sqlite",), _campaign),
    Template("sql.top-committer-salary", "join", ("git", "sqlite"), _salary_of_top_committer),
]
