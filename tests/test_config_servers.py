"""An mcpServers entry is checked in one place, with one set of messages, wherever it is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.config import McpServerConfig, load_config
from daemon.errors import ConfigError
from daemon.mcp.spec import ServerSpec, parse_server_entry

BAD_ENTRIES: list[tuple[dict[str, Any], str]] = [
    ({"command": "x", "argv": []}, "unknown key 'K.argv' in W (did you mean 'K.args'?)"),
    ({"command": "x", "url": "http://h"}, "unknown key 'K.url' in W"),
    ({"args": []}, "missing key 'K.command' in W"),
    ({"command": ""}, "key 'K.command' in W is empty"),
    ({"command": "x", "args": "a b"}, "key 'K.args' in W must be a list of strings, not str 'a b'"),
    ({"command": "x", "cwd": 5}, "key 'K.cwd' in W must be a path, not int 5"),
    ({"command": 5}, "key 'K.command' in W must be a string, not int 5"),
    ({"command": "x", "type": "sse"}, "'K' in W has type 'sse': only stdio servers are supported"),
    ({"url": "http://h"}, "'K' in W has a 'url': only stdio MCP servers ('command') are supported"),
]


def toml_table(entry: dict[str, Any]) -> str:
    """``entry`` as the body of a TOML table (its values are JSON-compatible TOML)."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in entry.items())


@pytest.mark.parametrize(("entry", "message"), BAD_ENTRIES)
def test_a_bad_entry_reads_the_same_from_every_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict[str, Any], message: str
) -> None:
    """A TOML table, an mcp_json file and McpToolExecutor's mapping give one message,
    naming the dotted key and where it was written."""
    monkeypatch.chdir(tmp_path)  # no ./asyncai.toml when none is named
    toml = tmp_path / "a.toml"
    toml.write_text("[mcp_servers.s]\n" + toml_table(entry), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(toml, environ={})
    assert str(err.value) == message.replace("K", "mcp_servers.s").replace("W", str(toml))

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"s": entry}}), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(None, {"mcp_json": str(servers)}, environ={})
    assert str(err.value) == message.replace("K", "mcpServers.s").replace("W", str(servers))

    with pytest.raises(ConfigError) as err:
        ServerSpec.from_entry("s", entry)
    expected = message.replace("K", "mcpServers.s").replace("W", "the mcpServers entries")
    assert str(err.value) == expected


def test_environment_values_are_never_echoed() -> None:
    """A wrong value in a server's env may sit beside a token: the message hides them all."""
    with pytest.raises(ConfigError) as err:
        parse_server_entry({"command": "x", "env": {"TOKEN": "ghp-1", "N": 1}}, "k", "F")
    assert str(err.value) == "key 'k.env' in F must be a table of strings, not dict (hidden)"


def test_an_entry_pasted_with_its_type_is_accepted(tmp_path: Path) -> None:
    """``type = "stdio"``, as other clients write it, is accepted in a TOML table too."""
    toml = tmp_path / "asyncai.toml"
    toml.write_text("[mcp_servers.t]\ntype = 'stdio'\ncommand = 'uvx'\nargs = ['t']\n")
    config = load_config(toml, environ={})
    assert config.mcp_servers == {"t": McpServerConfig("uvx", ["t"])}


def test_a_relative_cwd_is_relative_to_the_file_that_wrote_it(tmp_path: Path) -> None:
    """The spec keeps ``cwd`` as written; the config resolves it against the file."""
    entry = {"command": "x", "cwd": "srv"}
    assert parse_server_entry(entry, "k", "F").cwd == "srv"
    toml = tmp_path / "asyncai.toml"
    toml.write_text("[mcp_servers.s]\n" + toml_table(entry), encoding="utf-8")
    assert load_config(toml, environ={}).mcp_servers["s"].cwd == tmp_path / "srv"


def test_a_cwd_under_an_unknown_home_is_an_error(tmp_path: Path) -> None:
    """``~nobody-here/x`` names no home directory: a ConfigError naming the key."""
    toml = tmp_path / "asyncai.toml"
    toml.write_text("[mcp_servers.s]\ncommand = 'x'\ncwd = '~no-such-user-0/x'\n")
    with pytest.raises(ConfigError, match=r"key 'mcp_servers\.s\.cwd' in .*cannot expand"):
        load_config(toml, environ={})


def test_a_spec_is_taken_as_is() -> None:
    """A ServerSpec handed to McpToolExecutor needs no second check."""
    spec = ServerSpec(command="x", args=("a",))
    assert ServerSpec.from_entry("s", spec) is spec


@pytest.mark.parametrize("line", ["", "''", "   "])
def test_mcp_stdio_needs_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """``--mcp-stdio`` without a program is refused before a server is named after it."""
    monkeypatch.chdir(tmp_path)  # no ./asyncai.toml
    with pytest.raises(ConfigError, match=r"--mcp-stdio needs a command"):
        load_config(None, {"mcp_stdio": [line]}, environ={})
