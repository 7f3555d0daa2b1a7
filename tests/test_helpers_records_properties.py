"""Property test: any table written in one of the layouts ``parse_records`` reads (CSV,
a markdown table, an HTML table, blocks of ``Key: value`` lines) comes back as the
rows it was written from, in a real Monty worker with the helpers fed."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_monty import Monty, MontySession

from daemon.code_mode.helpers import HELPERS_SOURCE

KEYS = st.from_regex(r"[a-z][a-z_]{0,7}", fullmatch=True)
# a cell as a tool writes it: words (a comma inside is quoted in CSV), or an int
WORDS = st.from_regex(r"[A-Za-z]+( [A-Za-z]+)?(, [A-Za-z]+)?", fullmatch=True)
CELLS = WORDS | st.integers(-(10**9), 10**9)


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(KEYS, min_size=2, max_size=5, unique=True))
    rows = draw(st.lists(st.tuples(*[CELLS] * len(keys)), min_size=1, max_size=6))
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _csv(rows: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        return f'"{v}"' if isinstance(v, str) and "," in v else str(v)

    lines = [",".join(rows[0]), *(",".join(cell(v) for v in r.values()) for r in rows)]
    return "\n".join(lines) + "\n"


def _markdown(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(rows[0]) + " |"
    rule = "|" + "|".join("---" for _ in rows[0]) + "|"
    body = ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in rows]
    return "\n".join(["Some words first.", "", head, rule, *body])


def _html(rows: list[dict[str, Any]]) -> str:
    def tr(cells: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"

    trs = [tr(list(rows[0]), "th"), *(tr([str(v) for v in r.values()], "td") for r in rows)]
    return "<html><body><table>" + "\n".join(trs) + "</table></body></html>"


def _blocks(rows: list[dict[str, Any]]) -> str:
    return "A heading:\n" + "\n\n".join("\n".join(f"{k}: {v}" for k, v in r.items()) for r in rows)


@pytest.fixture(scope="module")
def session() -> Iterator[MontySession]:
    with Monty() as pool, pool.checkout() as s:
        s.feed_run(HELPERS_SOURCE)
        yield s


@settings(max_examples=40, deadline=None)
@given(tables(), st.sampled_from([_csv, _markdown, _html, _blocks]))
def test_a_written_table_reads_back_as_its_rows(
    session: MontySession, rows: list[dict[str, Any]], layout: Any
) -> None:
    assert session.feed_run("parse_records(t)", inputs={"t": layout(rows)}) == rows
