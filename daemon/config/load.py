"""Loading the configuration: the file, then the environment, then flags, checked once.

Precedence, lowest first: the defaults of :mod:`daemon.config.schema`, the
TOML file (``--config``, default ``./asyncai.toml``), the environment
(:data:`ENVIRONMENT`), then command-line flags. Each value is kept with where
it came from, so that pydantic's check of the merged whole can name the file,
the variable or the flag of a bad value (:mod:`daemon.config.messages`).

Relative paths written in a config file (``mcp_json``, ``code_mode.preamble``,
``model.examples``, ``sessions.db``, a server's ``cwd``) are relative to the file's directory;
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

from daemon.config.messages import config_error, unknown_key
from daemon.config.schema import DEFAULT_CONFIG_PATH, Config
from daemon.config.servers import read_mcp_json, server_config, stdio_server, unique_name
from daemon.config.values import expand_home
from daemon.errors import ConfigError

__all__ = ["ENVIRONMENT", "config_from_document", "load_config"]

# environment variable → dotted key it sets (after the file, before flags)
ENVIRONMENT: dict[str, str] = {
    "OPENAI_BASE_URL": "model.base_url",
    "OPENAI_API_KEY": "model.api_key",
    "ASYNCAI_MODEL": "model.model",
    "ATIRC_URL": "channels.url",
    "ATIRC_TOKEN": "channels.token",
    "ATIRC_NICK": "channels.nick",
}

# Config's tables
_SECTIONS = ["model", "code_mode", "channels", "runtime", "sessions", "approvals"]
_TOP_KEYS = [*_SECTIONS, "mcp_servers", "mcp_json"]
_PATH_KEYS = ["mcp_json", "code_mode.preamble", "model.examples", "sessions.db"]
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
    if file_path.is_file():
        raw = _read_toml(file_path)
        read_path = file_path
    elif explicit:
        if file_path.exists():
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
    # dotted key → (value, where it came from); the file first, later sources win
    values: dict[str, tuple[Any, str]] = {}
    servers_raw: dict[str, Any] = {}
    for top, value in raw.items():
        if top == "mcp_servers":
            if not isinstance(value, dict):
                raise ConfigError(f"key 'mcp_servers' in {where} must be a table of tables")
            servers_raw = value
        elif top == "mcp_json":
            values["mcp_json"] = (value, where)
        elif top in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"key '{top}' in {where} must be a table ([{top}])")
            for key, v in value.items():
                values[f"{top}.{key}"] = (v, where)
        else:
            raise ConfigError(unknown_key(str(top), _TOP_KEYS, where))
    for var, key in ENVIRONMENT.items():
        if environ.get(var):
            values[key] = (environ[var], f"environment variable {var}")
    stdio: list[str] = []
    for key, v in (overrides or {}).items():
        if v is None:
            continue
        if key == "mcp_stdio":
            stdio = [v] if isinstance(v, str) else list(v)
        else:
            values[key] = (v, "the command line")

    base = read_path.parent if read_path is not None else Path()
    config = _validate(values)
    config.path = read_path
    for key in _PATH_KEYS:
        if key in values:
            path = expand_home(_get(config, key), key, values[key][1])
            if values[key][1] == where and not path.is_absolute():
                path = base / path  # written in the file: relative to its directory
            _set(config, key, path)

    for name, table in servers_raw.items():
        config.mcp_servers[name] = server_config(table, f"mcp_servers.{name}", where, base)
    if config.mcp_json is not None:
        for name, server in read_mcp_json(config.mcp_json).items():
            if name in config.mcp_servers:
                raise ConfigError(
                    f"mcp server '{name}' is defined both in {where} and in {config.mcp_json}"
                )
            config.mcp_servers[name] = server
    for line in stdio:
        server = stdio_server(line)
        config.mcp_servers[unique_name(Path(server.command).name, config.mcp_servers)] = server

    _read_preamble(config)
    _read_examples(config)
    scopes = config.code_mode.effective_max_scopes()
    if config.runtime.max_concurrent_runs > scopes:
        raise ConfigError(
            f"runtime.max_concurrent_runs ({config.runtime.max_concurrent_runs}) may not exceed "
            f"code_mode.max_scopes ({scopes}): every concurrent run holds one REPL scope"
        )
    return config


def _validate(values: Mapping[str, tuple[Any, str]]) -> Config:
    """Pydantic's check of the merged values; errors name the key and its source."""
    document: dict[str, Any] = {}
    for key, (value, source) in values.items():
        section, dot, name = key.partition(".")
        if key == "mcp_json":
            document[key] = value
        elif section in _SECTIONS and dot:
            document.setdefault(section, {})[name] = value
        else:  # a flag's dotted key outside the sections
            raise ConfigError(unknown_key(key, _TOP_KEYS, source))
    try:
        return _CONFIG.validate_python(document)
    except ValidationError as exc:
        inputs = {key: value for key, (value, _) in values.items()}
        raise config_error(
            exc, Config, inputs, lambda key: values.get(key, (None, "the defaults"))[1]
        ) from exc


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _get(config: Config, key: str) -> Any:
    obj: Any = config
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _set(config: Config, key: str, value: Any) -> None:
    parent, _, name = key.rpartition(".")
    setattr(_get(config, parent) if parent else config, name, value)


def _read_examples(config: Config) -> None:
    """``model.examples``' text, read at load so that a missing file fails at start (the
    harness parses it when it builds its profile)."""
    examples = config.model.examples
    if examples is None:
        return
    try:
        config.model.examples_text = examples.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the path
        raise ConfigError(f"cannot read model.examples {examples}: {exc}") from exc


def _read_preamble(config: Config) -> None:
    """``code_mode.preamble``'s text, read at load so that a missing file fails at start."""
    preamble = config.code_mode.preamble
    if preamble is None:
        return
    try:
        config.code_mode.preamble_text = preamble.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the path
        raise ConfigError(f"cannot read code_mode.preamble {preamble}: {exc}") from exc
