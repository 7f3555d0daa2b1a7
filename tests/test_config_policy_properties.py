"""Properties of channel policies: a channel sees exactly the catalog its rules let through.

The oracle below is written apart from ``ChannelPolicy.sees``: sets instead
of a predicate, and its own glob matcher (``*`` any run, ``?`` one
character; the strategies write no ``[...]`` classes) instead of
:mod:`fnmatch`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.config import ChannelConfig, Config, EndpointConfig, McpServerConfig
from daemon.config.load import config_from_document
from daemon.errors import ConfigError

SERVERS = ["kcp", "simple", "git", "s.x"]
TOOLS = ["get_pods", "delete_pod", "fetch", "log", "get_secret", "a", "a.b"]

server_names = st.sampled_from(SERVERS)
catalogs = st.sets(st.tuples(server_names, st.sampled_from(TOOLS)), max_size=20)
# globs over "server.tool" from the names' own characters, with * and ?
glob_parts = st.sampled_from(["*", "?", ".", "kcp", "simple", "get_", "delete_", "pod", "s", "a"])
globs = st.lists(glob_parts, min_size=1, max_size=4).map("".join)
tables = st.fixed_dictionaries(
    {},
    optional={
        "servers": st.lists(server_names, max_size=4),
        # written empty it is refused at load (it would read as every tool): left out is "all"
        "tools_allow": st.lists(globs, min_size=1, max_size=3),
        "tools_deny": st.lists(globs, max_size=3),
    },
)


def glob_matches(glob: str, name: str) -> bool:
    """The oracle's matcher: ``*`` is any run of characters, ``?`` one, the rest literal."""
    pattern = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.fullmatch(pattern, name, re.DOTALL) is not None


def oracle(catalog: set[tuple[str, str]], table: dict[str, list[str]]) -> set[tuple[str, str]]:
    """The catalog, filtered: its servers, then the allow globs (if any), minus the deny ones."""
    named = {(s, t): f"{s}.{t}" for s, t in catalog}
    kept = set(catalog)
    if "servers" in table:
        kept = {(s, t) for s, t in kept if s in set(table["servers"])}
    allow = table.get("tools_allow") or []
    if allow:
        kept = {c for c in kept if any(glob_matches(g, named[c]) for g in allow)}
    denied = {
        c for c in kept if any(glob_matches(g, named[c]) for g in table.get("tools_deny", []))
    }
    return kept - denied


@settings(max_examples=500, deadline=None)
@given(catalog=catalogs, table=tables)
def test_a_channel_sees_exactly_the_catalog_its_rules_let_through(
    catalog: set[tuple[str, str]], table: dict[str, list[str]]
) -> None:
    """servers, tools_allow and tools_deny filter the global catalog; deny wins."""
    policy = Config(channel={"#x": ChannelConfig(**table)}).policy("#x")
    seen = {(s, t) for s, t in catalog if policy.sees(s, t)}
    assert seen == oracle(catalog, table)


@settings(max_examples=200, deadline=None)
@given(catalog=catalogs, table=tables)
def test_a_channel_without_a_section_sees_everything(
    catalog: set[tuple[str, str]], table: dict[str, list[str]]
) -> None:
    """Another channel's rules change nothing for a channel without a section."""
    config = Config(channel={"#x": ChannelConfig(**table)})
    assert all(config.policy("#y").sees(s, t) for s, t in catalog)


@settings(max_examples=200, deadline=None)
@given(catalog=catalogs, table=tables)
def test_the_loaded_policy_is_the_table_written(
    catalog: set[tuple[str, str]], table: dict[str, list[str]]
) -> None:
    """Through the loader (TOML document, pydantic, checks), the same table sees the same
    tools: the file's path and the in-code path agree."""
    document = {
        "mcp_servers": {name: {"command": "true"} for name in SERVERS},
        "channels": {"channels": ["#x"]},
        "channel": {"#x": table},
    }
    file = Path("/nonexistent/asyncai.toml")
    config = config_from_document(document, file, file, None, {})
    assert {c for c in catalog if config.policy("#x").sees(*c)} == oracle(catalog, table)


def test_the_oracle_matches_what_it_must() -> None:
    """The oracle's matcher is no always-true: a check of the checker."""
    assert glob_matches("kcp.get_*", "kcp.get_pods")
    assert not glob_matches("kcp.get_*", "simple.get_pods")
    assert glob_matches("*.a?b", "s.x.a.b")
    assert not glob_matches("?", "ab")


channel_names = st.sampled_from(["#x", "#y", "x", "", "#a b"]) | st.text(max_size=6)
scalars = st.one_of(st.booleans(), st.integers(), st.floats(), st.text(max_size=6))
values = scalars | st.lists(scalars | server_names, max_size=3)
approvals = st.dictionaries(
    st.sampled_from(["mode", "allow", "deny", "approvers", "expire_after", "x"]),
    values | st.sampled_from(["ask", "allow", "deny"]),
    max_size=4,
)
channel_tables = st.dictionaries(
    st.sampled_from([*ChannelConfig.__dataclass_fields__, "tool_deny"]),
    values | approvals | st.sampled_from(["big", "code", "direct"]),
    max_size=5,
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "channel": st.dictionaries(channel_names, channel_tables | values, max_size=3) | scalars,
        "models": st.dictionaries(
            st.sampled_from(["big", "x y"]),
            st.dictionaries(
                st.sampled_from([*EndpointConfig.__dataclass_fields__, "tool_mode"]),
                values,
                max_size=3,
            )
            | values,
            max_size=2,
        )
        | scalars,
        "channels": st.fixed_dictionaries({"channels": st.lists(channel_names, max_size=3)}),
        "approvals": approvals,
    },
)


def loaded(document: dict[str, Any], file: Path) -> Config | ConfigError:
    """The Config of ``document``, or the ConfigError loading it raises."""
    try:
        return config_from_document(document, file, file, None, {})
    except ConfigError as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(document=documents)
def test_any_channel_document_gives_a_config_or_a_one_line_error(
    document: dict[str, Any],
) -> None:
    """Whatever the channel and model sections hold, loading gives a Config whose every
    policy resolves, or a ConfigError of one line: never another exception."""
    document = {**document, "mcp_servers": {"kcp": {"command": "true"}}}
    file = Path("/nonexistent/asyncai.toml")
    config = loaded(document, file)
    if isinstance(config, ConfigError):
        assert str(config)
        assert "\n" not in str(config)
        return
    for policy in config.policies().values():
        assert len(policy.digest()) == 64
        assert policy.servers is None or policy.servers <= set(config.mcp_servers)
    assert all(isinstance(s, McpServerConfig) for s in config.mcp_servers.values())
