"""``repair_code`` inlines a helper function a snippet defines and calls once, so
that its data lives at the top level, where the harness's look can see it (pure)."""

from __future__ import annotations

from daemon.model.harness import repair_code

FNS = {"http_get": (frozenset({"url"}), frozenset({"url"}))}
HELPER = (
    "async def get_releases() -> dict[str, Any]:\n"
    "    r = await http_get(url='u')\n"
    "    return r['releases']\n\n"
    "releases = await get_releases()\n"
)


def test_a_helper_called_once_runs_at_the_top_level() -> None:
    """Its body takes the call's place, its return value the assigned name; the def
    goes, and a fetch of the same function outside it does not stop the move."""
    code = HELPER + "x = await http_get(url='v')\nreleases[0]"
    fixed, repairs = repair_code(code, FNS)
    assert fixed == (
        "r = await http_get(url='u')\nreleases = r['releases']\n"
        "x = await http_get(url='v')\nreleases[0]"
    )
    assert repairs == ["inlined helper functions called once: get_releases"]
    plain = "def total():\n    n = 1 + 2\n    return n\n\nt = total()\nt"
    assert repair_code(plain, FNS)[0] == "n = 1 + 2\nt = n\nt"


def test_helpers_that_cannot_move_safely_stay() -> None:
    """Called twice, with arguments, without await, or not assigned; a local name the
    rest uses; an early return, a loop's return, a decorator, a yield: no inlining."""
    unchanged = [
        HELPER + "again = await get_releases()\nagain",
        HELPER.replace("get_releases() ->", "get_releases(n) ->").replace("s()\n", "s(1)\n"),
        HELPER.replace("await get_releases()", "get_releases()") + "releases",
        HELPER.replace("releases = await get_releases()", "print(await get_releases())"),
        HELPER + "r = 1\nreleases",
        HELPER.replace("    r = await", "    if 1:\n        return 0\n    r = await") + "releases",
        "@cache\n" + HELPER + "releases",
        HELPER.replace("    r = await", "    yield 1\n    r = await") + "releases",
    ]
    for code in unchanged:
        _, repairs = repair_code(code, FNS)
        assert not any(r.startswith("inlined") for r in repairs), code
