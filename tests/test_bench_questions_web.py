"""The web questions over three seeds, without a model: each case's expected answer passes
its checker, a non-answer fails unless the right reply is "no data", and the site serves
every URL a prompt names (except the one that must 404)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.questions import web
from bench.questions.core import SHAPES, Template, World

SEEDS = (1, 2, 3)
BASE = "http://127.0.0.1:8765"


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
        urls = re.findall(re.escape(BASE) + r"[^\s,;)]*[^\s,;).?]", case.text)
        assert urls, case.text
        served = [url.removeprefix(BASE) in world.http_files for url in urls]
        assert all(served) or (case.no_data and template.shape == "unanswerable"), urls


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
