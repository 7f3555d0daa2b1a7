"""Properties of the config parsers: any input gives a value or a ConfigError, never a crash."""

from __future__ import annotations

import dataclasses
import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.config import (
    ChannelsConfig,
    CodeModeConfig,
    Config,
    ModelConfig,
    RuntimeConfig,
    SessionsConfig,
)
from daemon.config.load import config_from_document
from daemon.config.values import parse_size
from daemon.errors import ConfigError
from daemon.mcp.spec import ServerSpec, parse_server_entry

T = TypeVar("T")

SECTIONS = {
    "model": ModelConfig,
    "code_mode": CodeModeConfig,
    "channels": ChannelsConfig,
    "runtime": RuntimeConfig,
    "sessions": SessionsConfig,
}
SERVER_KEYS = ["command", "args", "env", "cwd", "type", "url", "disabled"]

# what TOML can hold (no null), biased towards the shapes the keys expect
sizes = st.from_regex(r"\s?\d{1,40}(\.\d{1,5})?\s?([KMGTkmgt]i?[Bb]?|[Bb])?\s?", fullmatch=True)
scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.text(alphabet="~/.ab", max_size=8),  # path-like: home dirs, dots, slashes
    sizes,
    st.datetimes(),
    st.dates(),
    st.times(),
)
toml_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def keys_of(known: list[str]) -> st.SearchStrategy[str]:
    """Mostly real keys (three in four), sometimes near misses and junk."""
    real = st.sampled_from(known)
    return real | real | real | st.text(alphabet=string.ascii_lowercase + "_.", max_size=12)


def table(known: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(keys_of(known), toml_values, max_size=6)


servers = st.dictionaries(st.text(max_size=8), table(SERVER_KEYS) | toml_values, max_size=3)
documents = st.fixed_dictionaries(
    {},
    optional={
        **{
            name: table([f.name for f in dataclasses.fields(cls)]) for name, cls in SECTIONS.items()
        },
        "mcp_servers": servers,
        "mcp_json": toml_values,
    },
)
# now and then a top-level key that is unknown or not a table (one in four documents)
junk_top: st.SearchStrategy[dict[str, Any]] = st.sampled_from([{}, {}, {}]) | st.dictionaries(
    keys_of([*SECTIONS, "mcp_servers", "mcp_json"]), toml_values, min_size=1, max_size=1
)
flags = st.fixed_dictionaries(
    {},
    optional={
        "model.model": st.none() | st.text(max_size=8),
        "model.tool_mode": st.none() | st.sampled_from(["code", "direct", "mcp"]),
        "code_mode.preamble": st.none() | st.text(alphabet="~/.ab", max_size=8),
        "mcp_stdio": st.none() | st.lists(st.text(max_size=12), max_size=3),
    },
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory for the config file's place (relative paths land there, and are absent)."""
    return tmp_path_factory.mktemp("config")


def outcome(call: Callable[[], T]) -> T | ConfigError:
    """What ``call`` returns, or the ConfigError it raises; any other exception propagates."""
    try:
        return call()
    except ConfigError as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(document=documents, extra=junk_top, overrides=flags)
def test_any_document_gives_a_config_or_a_config_error(
    workdir: Path, document: dict[str, Any], extra: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """Whatever a TOML file holds, and whatever flags come with it, loading gives a
    Config or a ConfigError with a message: never another exception."""
    file = workdir / "asyncai.toml"
    result = outcome(lambda: config_from_document({**document, **extra}, file, file, overrides, {}))
    assert isinstance(result, Config) or str(result)


@settings(max_examples=200, deadline=None)
@given(servers=json_values)
def test_any_mcp_json_gives_servers_or_a_config_error(workdir: Path, servers: Any) -> None:
    """Any JSON in an mcp_json file gives servers or a ConfigError naming the problem."""
    path = workdir / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    result = outcome(lambda: config_from_document({"mcp_json": str(path)}, path, None, None, {}))
    assert isinstance(result, ConfigError) or all(s.command for s in result.mcp_servers.values())


@settings(max_examples=300, deadline=None)
@given(entry=table(SERVER_KEYS) | json_values)
def test_any_server_entry_gives_a_spec_or_a_config_error(entry: Any) -> None:
    """The one check of an mcpServers entry never lets another exception out."""
    result = outcome(lambda: parse_server_entry(entry, "mcpServers.x", "F"))
    if isinstance(result, ConfigError):
        assert "mcpServers.x" in str(result)
    else:
        assert isinstance(result, ServerSpec)
        assert result.command


@given(text=sizes | st.text(max_size=12))
def test_sizes_parse_to_bytes_or_are_refused(text: str) -> None:
    """A size text is a whole number of bytes, or a pydantic error the messages name."""
    try:
        value = parse_size(text)
    except ValueError:  # PydanticCustomError is one
        return
    assert isinstance(value, int)
    assert value >= 0
