"""Loading the configuration: the file, then the environment, then flags, checked once.

Precedence, lowest first: the defaults of :mod:`daemon.config.schema`, the
TOML file (``--config``, default ``./asyncai.toml``), the environment
(:data:`ENVIRONMENT`), then command-line flags. Each value is kept with where
it came from, so that pydantic's check of the merged whole can name the file,
the variable or the flag of a bad value (:mod:`daemon.config.messages`), and
the loaded ``Config.sources`` keeps them for ``asyncai config show``. The checks
across sections that no single key's type can make (a channel section's
server, endpoint, approvers) follow (:mod:`daemon.config.checks`).

Relative paths written in a config file (``mcp_json``, ``code_mode.preamble``,
``model.examples``, ``models.NAME.examples``, ``sessions.db``, ``web.tokens``, a server's ``cwd``)
are relative to the file's directory;
relative paths from flags and the defaults are relative to the working
directory.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from daemon.config.checks import check_channels
from daemon.config.messages import config_error, toml_key, unknown_key
from daemon.config.root import SECTIONS, Config
from daemon.config.schema import DEFAULT_CONFIG_PATH, EndpointConfig
from daemon.config.servers import read_mcp_json, server_config, stdio_server, unique_name
from daemon.config.values import expand_home
from daemon.errors import ConfigError

__all__ = [
    "COMMAND_LINE",
    "ENVIRONMENT",
    "ENVIRONMENT_SOURCE",
    "config_from_document",
    "load_config",
]

# environment variable → dotted key it sets (after the file, before flags)
ENVIRONMENT: dict[str, str] = {
    "OPENAI_BASE_URL": "model.base_url",
    "OPENAI_API_KEY": "model.api_key",
    "ASYNCAI_MODEL": "model.model",
    "ATIRC_URL": "channels.url",
    "ATIRC_TOKEN": "channels.token",
    "ATIRC_NICK": "channels.nick",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "telemetry.otlp_endpoint",
}

ENVIRONMENT_SOURCE = "environment variable {}"  # the source of a key ENVIRONMENT sets
COMMAND_LINE = "the command line"  # the source of a key a flag sets

Key = tuple[str, ...]  # a key's parts: ("model", "api_key"), ("channel", "#ops", "servers")

# Config's tables: one each, and the named ones ([models.NAME], [channel."#name"])
_SECTIONS = SECTIONS  # Config's one-table sections
_NAMED = ["models", "channel"]
_TOP_KEYS = [*_SECTIONS, *_NAMED, "mcp_servers", "mcp_json"]
_PATH_KEYS = [
    ("mcp_json",),
    ("code_mode", "preamble"),
    ("model", "examples"),
    ("sessions", "db"),
    ("web", "tokens"),
]
_CONFIG = TypeAdapter(Config)


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read the file, apply the environment, then ``overrides``; validate everything.

    ``path`` None reads ``./asyncai.toml`` when it exists (its absence is
    fine); an explicit path that does not exist is an error. ``overrides`` maps
    dotted keys (``"model.model"``, ``"model.base_url"``, ``"mcp_json"``) to
    values, None meaning "not given"; the key ``"mcp_stdio"`` takes a list of
    ``"CMD ARGS"`` strings, each added as a server. ``environ`` defaults to
    ``os.environ``. Raises :class:`ConfigError` naming the offending key.
    """
    explicit = path is not None
    file_path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    raw: dict[str, Any] = {}
    read_path: Path | None = None
    try:
        is_file, exists = file_path.is_file(), file_path.exists()
    except OSError as exc:  # a name too long, a directory on the way we may not search
        raise ConfigError(f"cannot read config file {file_path}: {exc.strerror}") from exc
    if is_file:
        raw = _read_toml(file_path)
        read_path = file_path
    elif explicit:
        if exists:
            raise ConfigError(f"config file {file_path} is not a regular file")
        raise ConfigError(f"config file {file_path} does not exist")
    return config_from_document(
        raw, file_path, read_path, overrides, os.environ if environ is None else environ
    )


def config_from_document(
    raw: Mapping[str, Any],
    file_path: Path,
    read_path: Path | None,
    overrides: Mapping[str, Any] | None,
    environ: Mapping[str, str],
) -> Config:
    """The configuration from a parsed TOML document ``raw`` read from ``file_path``.

    ``read_path`` is None when no file was read (``raw`` is then empty). Any
    document gives a :class:`Config` or a :class:`ConfigError`.
    """
    where = str(file_path)
    # key (its parts) → (value, where it came from); the file first, later sources win
    values: dict[Key, tuple[Any, str]] = {}
    named: list[Key] = []  # the [models.NAME] and [channel."#name"] tables, even empty ones
    servers_raw: dict[str, Any] = {}
    for top, value in raw.items():
        if top == "mcp_servers":
            if not isinstance(value, dict):
                raise ConfigError(f"key 'mcp_servers' in {where} must be a table of tables")
            servers_raw = value
        elif top == "mcp_json":
            values[("mcp_json",)] = (value, where)
        elif top in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"key '{top}' in {where} must be a table ([{top}])")
            for key, v in value.items():
                values[(top, key)] = (v, where)
        elif top in _NAMED:
            named.extend(_named_tables(top, value, where, values))
        else:
            raise ConfigError(unknown_key(str(top), _TOP_KEYS, where))
    for var, dotted in ENVIRONMENT.items():
        if environ.get(var):
            values[tuple(dotted.split("."))] = (environ[var], ENVIRONMENT_SOURCE.format(var))
    stdio: list[str] = []
    for dotted, v in (overrides or {}).items():
        if v is None:
            continue
        if dotted == "mcp_stdio":
            stdio = [v] if isinstance(v, str) else list(v)
        else:
            values[tuple(dotted.split("."))] = (v, COMMAND_LINE)

    base = read_path.parent if read_path is not None else Path()
    config = _validate(values, named)
    config.path = read_path
    config.sources = {toml_key(key): source for key, (_, source) in values.items()}
    for key, (_, source) in values.items():
        if _is_path_key(key):
            path = expand_home(_get(config, key), toml_key(key), source)
            if source == where and not path.is_absolute():
                path = base / path  # written in the file: relative to its directory
            _set(config, key, path)

    for name, table in servers_raw.items():
        config.mcp_servers[name] = server_config(table, f"mcp_servers.{name}", where, base)
        config.sources[toml_key(("mcp_servers", name))] = where
    if config.mcp_json is not None:
        for name, server in read_mcp_json(config.mcp_json).items():
            if name in config.mcp_servers:
                raise ConfigError(
                    f"mcp server '{name}' is defined both in {where} and in {config.mcp_json}"
                )
            config.mcp_servers[name] = server
            config.sources[toml_key(("mcp_servers", name))] = str(config.mcp_json)
    for line in stdio:
        server = stdio_server(line)
        name = unique_name(Path(server.command).name, config.mcp_servers)
        config.mcp_servers[name] = server
        config.sources[toml_key(("mcp_servers", name))] = COMMAND_LINE

    _read_preamble(config)
    _read_examples("model.examples", config.model)
    for name, endpoint in config.models.items():
        _read_examples(toml_key(("models", name, "examples")), endpoint)
    scopes = config.code_mode.effective_max_scopes()
    if config.runtime.max_concurrent_runs > scopes:
        raise ConfigError(
            f"runtime.max_concurrent_runs ({config.runtime.max_concurrent_runs}) may not exceed "
            f"code_mode.max_scopes ({scopes}): every concurrent run holds one REPL scope"
        )
    check_channels(config)
    return config


def _named_tables(
    top: str, value: Any, where: str, values: dict[Key, tuple[Any, str]]
) -> list[Key]:
    """The tables of ``[models.NAME]`` or ``[channel."#name"]``, their keys into ``values``.

    A channel's ``approvals`` table is flattened one level further, so each of
    its keys has its own source and its own message.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"key '{top}' in {where} must be a table of tables ([{top}.NAME])")
    tables: list[Key] = []
    for name, table in value.items():
        if not isinstance(table, dict):
            key = toml_key((top, name))
            raise ConfigError(f"key '{key}' in {where} must be a table ([{key}])")
        tables.append((top, name))
        for key, v in table.items():
            if top == "channel" and key == "approvals" and isinstance(v, dict):
                tables.append((top, name, key))
                for sub, w in v.items():
                    values[(top, name, key, sub)] = (w, where)
            else:
                values[(top, name, key)] = (v, where)
    return tables


def _is_path_key(key: Key) -> bool:
    """Whether ``key`` holds a path, relative to the file that wrote it."""
    return key in _PATH_KEYS or (len(key) == 3 and key[0] == "models" and key[2] == "examples")


def _validate(values: Mapping[Key, tuple[Any, str]], named: list[Key]) -> Config:
    """Pydantic's check of the merged values; errors name the key and its source."""
    document: dict[str, Any] = {}
    for key in named:
        _nest(document, key, {})
    for key, (value, source) in values.items():
        if key == ("mcp_json",) or (key[0] in _SECTIONS and len(key) == 2) or key[0] in _NAMED:
            _nest(document, key, value)
        else:  # a flag's dotted key outside the sections
            raise ConfigError(unknown_key(".".join(key), _TOP_KEYS, source))
    try:
        return _CONFIG.validate_python(document)
    except ValidationError as exc:
        inputs = {toml_key(key): value for key, (value, _) in values.items()}
        sources = {toml_key(key): source for key, (_, source) in values.items()}
        raise config_error(
            exc, Config, inputs, lambda key: sources.get(key, "the defaults")
        ) from exc


def _nest(document: dict[str, Any], key: Key, value: Any) -> None:
    """``document[key[0]][key[1]]... = value``, making the tables on the way."""
    for part in key[:-1]:
        document = document.setdefault(part, {})
    document[key[-1]] = value


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib lets the decode error out
        raise ConfigError(f"{path} is not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _get(config: Config, key: Key) -> Any:
    obj: Any = config
    for part in key:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _set(config: Config, key: Key, value: Any) -> None:
    parent = _get(config, key[:-1])
    if isinstance(parent, dict):
        parent[key[-1]] = value
    else:
        setattr(parent, key[-1], value)


def _read_examples(key: str, endpoint: EndpointConfig) -> None:
    """An endpoint's ``examples`` text, read at load so that a missing file fails at start
    (the harness parses it when it builds its profile)."""
    examples = endpoint.examples
    if examples is None:
        return
    try:
        endpoint.examples_text = examples.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the path
        raise ConfigError(f"cannot read {key} {examples}: {exc}") from exc


def _read_preamble(config: Config) -> None:
    """``code_mode.preamble``'s text, read at load so that a missing file fails at start."""
    preamble = config.code_mode.preamble
    if preamble is None:
        return
    try:
        config.code_mode.preamble_text = preamble.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the path
        raise ConfigError(f"cannot read code_mode.preamble {preamble}: {exc}") from exc
