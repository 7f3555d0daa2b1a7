"""The configuration: a TOML file, overridden by environment variables and flags.

Precedence, lowest first: the defaults of the dataclasses below, the TOML file
(``--config``, default ``./asyncai.toml``), the environment (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``ASYNCAI_MODEL``, ``ATIRC_URL``, ``ATIRC_TOKEN``,
``ATIRC_NICK``), then command-line flags. Every key is checked by name and
type when the file is loaded, so a typo fails at start with a message that
names it (``unknown key 'code_mode.max_wal' in asyncai.toml``) instead of
being silently ignored.

MCP servers use the keys of the common ``mcpServers`` JSON (``command``,
``args``, ``env``), so an existing entry can be pasted as a
``[mcp_servers.NAME]`` table; ``mcp_json = "PATH"`` reads such a JSON file, and
``--mcp-stdio "CMD ARGS"`` adds a server from the command line.

Relative paths written in a config file (``mcp_json``, ``code_mode.preamble``,
``sessions.db``) are relative to the file's directory; relative paths from
flags and the defaults are relative to the working directory.

Secrets (the API key, the channel token, MCP server environment values) never
appear in a ``repr``: dataclass fields are excluded and ``Config.secrets()``
lists the values for the log redactor.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import tomllib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

from daemon.errors import ConfigError

if TYPE_CHECKING:  # the code-mode package builds a Monty pool lazily; importing is cheap
    import argparse

    from daemon.code_mode import CodeModeLimits

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ChannelsConfig",
    "CodeModeConfig",
    "Config",
    "McpServerConfig",
    "ModelConfig",
    "RuntimeConfig",
    "SessionsConfig",
    "add_config_arguments",
    "load_config",
    "overrides_from_args",
]

DEFAULT_CONFIG_PATH = Path("asyncai.toml")

# environment variable → dotted key it sets (after the file, before flags)
ENVIRONMENT: dict[str, str] = {
    "OPENAI_BASE_URL": "model.base_url",
    "OPENAI_API_KEY": "model.api_key",
    "ASYNCAI_MODEL": "model.model",
    "ATIRC_URL": "channels.url",
    "ATIRC_TOKEN": "channels.token",
    "ATIRC_NICK": "channels.nick",
}

# Bounds checked after types: metadata {"gt": x} or {"ge": x} (and "le").
_POSITIVE = {"gt": 0}
_NON_NEGATIVE = {"ge": 0}
_AT_LEAST_ONE = {"ge": 1}


@dataclass
class ModelConfig:
    """``[model]``: the OpenAI-compatible endpoint and the run loop around it."""

    base_url: str = "https://api.openai.com/v1"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None  # required before a run: --model, ASYNCAI_MODEL or the file
    tool_mode: Literal["code", "direct"] = "code"
    system_prompt: str | None = None  # None: the built-in prompt of the tool mode
    temperature: float | None = field(default=None, metadata={"ge": 0, "le": 2})
    max_tokens: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    request_timeout: float = field(default=300.0, metadata=_POSITIVE)  # local models are slow
    tool_call_timeout: float = field(default=600.0, metadata=_POSITIVE)  # one model tool call
    max_rounds: int = field(default=8, metadata=_AT_LEAST_ONE)
    retries: int = field(default=3, metadata=_NON_NEGATIVE)  # after the first attempt
    backoff_initial: float = field(default=1.0, metadata=_NON_NEGATIVE)
    backoff_max: float = field(default=30.0, metadata=_NON_NEGATIVE)
    # The small-model harness (daemon/harness.py): force run_code first, catalog and a
    # worked example in the system message, broken arguments and code repaired, an
    # answer round after the first good result. None: on for the embedded local model
    # (model "qwen-coder-1.5b"), off for every other model.
    harness: bool | None = None
    worked_example: str | None = None  # the harness's example; None: the built-in one


@dataclass
class CodeModeConfig:
    """``[code_mode]``: the fields of ``CodeModeLimits``; None keeps its default."""

    max_feed_duration: float | None = field(default=None, metadata=_POSITIVE)
    max_suspensions: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    max_nested_calls: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    max_print_bytes: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    max_memory: int | None = field(default=None, metadata=_POSITIVE)
    tool_timeout: float | None = field(default=None, metadata=_POSITIVE)
    max_wall: float | None = field(default=None, metadata=_POSITIVE)
    max_result_chars: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    max_scopes: int | None = field(default=None, metadata=_AT_LEAST_ONE)
    preamble: Path | None = None  # operator Python run in every new scope (spec A8)
    preamble_text: str | None = field(default=None, init=False, repr=False)

    def limits(self) -> CodeModeLimits:
        """``CodeModeLimits`` with these values over its defaults (imports code mode)."""
        from daemon.code_mode import CodeModeLimits

        values = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.init and f.name != "preamble" and getattr(self, f.name) is not None
        }
        if self.preamble_text is not None:
            values["preamble"] = self.preamble_text
        return CodeModeLimits(**values)

    def effective_max_scopes(self) -> int:
        """``max_scopes`` as configured, else ``CodeModeLimits``' default."""
        if self.max_scopes is not None:
            return self.max_scopes
        try:
            from daemon.code_mode import CodeModeLimits
        except ImportError:  # code mode not built yet: DESIGN.md's LRU of 8
            return 8
        return int(getattr(CodeModeLimits(), "max_scopes", 8))


@dataclass
class McpServerConfig:
    """``[mcp_servers.NAME]``: one stdio MCP server, ``mcpServers`` keys (and ``cwd``)."""

    command: str
    args: list[str] = field(default_factory=list)
    # servers get a minimal environment: what one needs goes here (values may be secrets)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: Path | None = None  # working directory of the server process

    def entry(self) -> dict[str, Any]:
        """The ``mcpServers`` entry, as ``McpToolExecutor`` takes it."""
        out: dict[str, Any] = {
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
        }
        if self.cwd is not None:
            out["cwd"] = str(self.cwd)
        return out

    def __repr__(self) -> str:
        """The command line and the names (never the values) of the environment."""
        return (
            f"McpServerConfig(command={self.command!r}, args={self.args!r}, "
            f"env_keys={sorted(self.env)!r}, cwd={self.cwd!r})"
        )


@dataclass
class ChannelsConfig:
    """``[channels]``: the atirc-style hub and what to answer there."""

    url: str = "ws://127.0.0.1:6680/"
    token: str | None = field(default=None, repr=False)
    nick: str = "asyncai"
    channels: list[str] = field(default_factory=list)  # channels to subscribe to
    shared: list[str] = field(default_factory=list)  # answer only mentions and own threads
    allowed_senders: list[str] = field(default_factory=list)  # empty: everyone


@dataclass
class RuntimeConfig:
    """``[runtime]``: threads, runs and shutdown."""

    max_concurrent_runs: int = field(default=4, metadata=_AT_LEAST_ONE)  # ≤ code_mode.max_scopes
    max_queued_prompts: int = field(default=256, metadata=_AT_LEAST_ONE)  # all threads together
    history_turns: int = field(default=20, metadata=_NON_NEGATIVE)
    history_chars: int = field(default=24_000, metadata=_NON_NEGATIVE)
    max_run_seconds: float = field(default=900.0, metadata=_POSITIVE)
    shutdown_grace: float = field(default=20.0, metadata=_NON_NEGATIVE)
    publish_timeout: float = field(default=60.0, metadata=_POSITIVE)  # the hub's ack of a reply


@dataclass
class SessionsConfig:
    """``[sessions]``: the SQLite file of transcripts, runs and audit."""

    db: Path = Path(".asyncai/asyncai.db")


@dataclass
class Config:
    """The whole configuration. ``Config()`` is the built-in defaults."""

    model: ModelConfig = field(default_factory=ModelConfig)
    code_mode: CodeModeConfig = field(default_factory=CodeModeConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    mcp_json: Path | None = None
    channels: ChannelsConfig = field(default_factory=ChannelsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    path: Path | None = None  # the file read, if any

    def secrets(self) -> list[str]:
        """Values the log redactor must never print (API key, tokens, secret-looking env)."""
        out = [v for v in (self.model.api_key, self.channels.token) if v]
        for server in self.mcp_servers.values():
            out.extend(v for k, v in server.env.items() if _SECRET_NAME.search(k) and v)
        return out

    def require_model(self) -> str:
        """The model name, or a ConfigError saying where to set it."""
        if not self.model.model:
            where = self.path or DEFAULT_CONFIG_PATH
            raise ConfigError(
                f"no model configured: set 'model' in [model] of {where}, "
                "pass --model, or set ASYNCAI_MODEL"
            )
        return self.model.model


_SECRET_NAME = re.compile(r"key|token|secret|passw|auth|credential", re.IGNORECASE)

_SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "code_mode": CodeModeConfig,
    "channels": ChannelsConfig,
    "runtime": RuntimeConfig,
    "sessions": SessionsConfig,
}
_TOP_KEYS = [*_SECTIONS, "mcp_servers", "mcp_json"]
_SIZE_KEYS = {"code_mode.max_memory", "code_mode.max_print_bytes"}
_FILE_RELATIVE = {"mcp_json", "code_mode.preamble", "sessions.db"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}


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
    environ = os.environ if environ is None else environ
    explicit = path is not None
    file_path = Path(path) if explicit else DEFAULT_CONFIG_PATH
    raw: dict[str, Any] = {}
    read_path: Path | None = None
    if file_path.is_file():
        raw = _read_toml(file_path)
        read_path = file_path
    elif explicit:
        if file_path.exists():
            raise ConfigError(f"config file {file_path} is not a regular file")
        raise ConfigError(f"config file {file_path} does not exist")
    where = str(file_path)

    # (dotted key → value, where it came from); the file first, later sources win
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
            raise ConfigError(_unknown(top, _TOP_KEYS, where))
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
    config = Config(path=read_path)
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    for key, (value, source) in values.items():
        if key == "mcp_json":
            config.mcp_json = _resolve(_coerce(value, Path, key, source), source, where, base)
            continue
        section, _, name = key.partition(".")
        cls = _SECTIONS.get(section)
        hints = get_type_hints(cls) if cls else {}
        settable = [f.name for f in fields(cls) if f.init] if cls else []
        if name not in settable:
            raise ConfigError(
                _unknown(key, [f"{section}.{n}" for n in settable] or _TOP_KEYS, source)
            )
        if key in _SIZE_KEYS and isinstance(value, str):
            value = _parse_size(value, key, source)
        value = _coerce(value, hints[name], key, source)
        if isinstance(value, Path):
            value = _resolve(value, source, where, base)
        sections[section][name] = value
    for name, cls in _SECTIONS.items():
        section_value = cls(**sections[name])
        _check_bounds(section_value, name, values)
        setattr(config, name, section_value)

    for name, table in servers_raw.items():
        config.mcp_servers[name] = _server(table, f"mcp_servers.{name}", where, base)
    if config.mcp_json is not None:
        for name, server in _read_mcp_json(config.mcp_json).items():
            if name in config.mcp_servers:
                raise ConfigError(
                    f"mcp server '{name}' is defined both in {where} and in {config.mcp_json}"
                )
            config.mcp_servers[name] = server
    for line in stdio:
        server = _stdio_server(line)
        config.mcp_servers[_unique_name(Path(server.command).name, config.mcp_servers)] = server

    if config.code_mode.preamble is not None:
        try:
            config.code_mode.preamble_text = config.code_mode.preamble.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read code_mode.preamble {config.code_mode.preamble}: {exc}"
            ) from exc
    scopes = config.code_mode.effective_max_scopes()
    if config.runtime.max_concurrent_runs > scopes:
        raise ConfigError(
            f"runtime.max_concurrent_runs ({config.runtime.max_concurrent_runs}) may not exceed "
            f"code_mode.max_scopes ({scopes}): every concurrent run holds one REPL scope"
        )
    return config


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags every daemon command shares: config file, model, MCP servers, verbosity."""
    parser.add_argument(
        "--config", metavar="FILE", help="TOML config file (default ./asyncai.toml)"
    )
    parser.add_argument("--model", metavar="M", help="model name (overrides [model] model)")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1",
    )
    parser.add_argument(
        "--tool-mode",
        choices=["code", "direct"],
        help="code: the model sees only run_code (default); direct: MCP tools as functions",
    )
    parser.add_argument(
        "--mcp-stdio",
        action="append",
        metavar="CMD ARGS",
        help="add a stdio MCP server (repeatable), e.g. --mcp-stdio asyncai-mcp-simple",
    )
    parser.add_argument(
        "--mcp-json", metavar="PATH", help="read servers from an mcpServers JSON file"
    )
    parser.add_argument(
        "--code-preamble", metavar="PATH", help="Python run in every new REPL scope"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log model and tool calls (NDJSON on stderr)"
    )


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``overrides`` for :func:`load_config` from :func:`add_config_arguments` flags."""
    get = lambda name: getattr(args, name, None)  # noqa: E731 -- a local shorthand
    return {
        "model.model": get("model"),
        "model.base_url": get("base_url"),
        "model.tool_mode": get("tool_mode"),
        "mcp_json": get("mcp_json"),
        "code_mode.preamble": get("code_preamble"),
        "mcp_stdio": get("mcp_stdio"),
    }


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _unknown(key: str, known: Sequence[str], where: str) -> str:
    message = f"unknown key '{key}' in {where}"
    close = difflib.get_close_matches(key, known, n=1)
    return f"{message} (did you mean '{close[0]}'?)" if close else message


def _type_name(hint: Any) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        Path: "a path",
    }
    if hint in names:
        return names[hint]
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if origin is list:
        return "a list of strings"
    if origin is dict:
        return "a table of strings"
    return str(hint)


def _coerce(value: Any, hint: Any, key: str, where: str) -> Any:
    """``value`` checked against the annotation ``hint`` (TOML has no null: None never comes)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(hint) if a is not type(None)]
        return _coerce(value, inner[0], key, where)
    ok: Any = None
    if hint is bool:
        ok = value if isinstance(value, bool) else None
    elif hint is int:
        ok = value if isinstance(value, int) and not isinstance(value, bool) else None
    elif hint is float:
        ok = (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )
    elif hint is str:
        ok = value if isinstance(value, str) else None
    elif hint is Path:
        ok = Path(value) if isinstance(value, str | Path) and str(value) else None
    elif origin is Literal:
        ok = value if value in get_args(hint) else None
    elif origin is list and isinstance(value, list | tuple):
        ok = list(value) if all(isinstance(v, str) for v in value) else None
    elif origin is dict and isinstance(value, dict):
        ok = dict(value) if all(isinstance(v, str) for v in value.values()) else None
    if ok is None:
        shown = "(hidden)" if _SECRET_NAME.search(key.rpartition(".")[2]) else repr(value)
        raise ConfigError(
            f"key '{key}' in {where} must be {_type_name(hint)}, not {type(value).__name__} {shown}"
        )
    return ok


def _parse_size(text: str, key: str, where: str) -> int:
    """``"4GiB"``, ``"512 MiB"``, ``"1MB"`` or ``"1024"`` as a number of bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(
            f"key '{key}' in {where} must be a size like 4GiB or 1048576, not {text!r}"
        )
    number, unit = float(m.group(1)), (m.group(2) or "").upper().rstrip("B")
    # KiB, MiB… are powers of 1024; K, KB, MB… powers of 1000
    factor = 1024 ** ("KMGT".index(unit[0]) + 1) if unit.endswith("I") else _UNITS[unit]
    return int(number * factor)


def _check_bounds(section: Any, name: str, values: Mapping[str, tuple[Any, str]]) -> None:
    for f in fields(section):
        v = getattr(section, f.name)
        if v is None or not f.metadata or isinstance(v, bool):
            continue
        key = f"{name}.{f.name}"
        where = values.get(key, (None, "the defaults"))[1]
        if "gt" in f.metadata and not v > f.metadata["gt"]:
            raise ConfigError(
                f"key '{key}' in {where} must be greater than {f.metadata['gt']}, not {v}"
            )
        if "ge" in f.metadata and not v >= f.metadata["ge"]:
            raise ConfigError(
                f"key '{key}' in {where} must be at least {f.metadata['ge']}, not {v}"
            )
        if "le" in f.metadata and not v <= f.metadata["le"]:
            raise ConfigError(f"key '{key}' in {where} must be at most {f.metadata['le']}, not {v}")


def _resolve(path: Path, source: str, file_where: str, base: Path) -> Path:
    """Paths written in the config file are relative to its directory."""
    path = path.expanduser()
    if source == file_where and not path.is_absolute():
        return base / path
    return path


def _server(table: Any, key: str, where: str, base: Path) -> McpServerConfig:
    """One server entry; a relative ``cwd`` is relative to ``base`` (the file's directory)."""
    if not isinstance(table, dict):
        raise ConfigError(f"key '{key}' in {where} must be a table with 'command', 'args', 'env'")
    known = ["command", "args", "env", "cwd"]
    if "url" in table and "command" not in table:
        raise ConfigError(
            f"'{key}' in {where} has a 'url': only stdio MCP servers ('command') are supported"
        )
    for k in table:
        if k not in known:
            raise ConfigError(_unknown(f"{key}.{k}", [f"{key}.{n}" for n in known], where))
    if "command" not in table:
        raise ConfigError(f"missing key '{key}.command' in {where}")
    hints = get_type_hints(McpServerConfig)
    kwargs = {k: _coerce(table[k], hints[k], f"{key}.{k}", where) for k in known if k in table}
    if not kwargs["command"]:
        raise ConfigError(f"key '{key}.command' in {where} is empty")
    if "cwd" in kwargs and not kwargs["cwd"].is_absolute():
        kwargs["cwd"] = base / kwargs["cwd"].expanduser()
    return McpServerConfig(**kwargs)


def _read_mcp_json(path: Path) -> dict[str, McpServerConfig]:
    """The stdio servers of an ``{"mcpServers": {...}}`` file, minus ``"disabled": true`` ones."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read mcp_json {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"mcp_json {path} is not valid JSON: {exc}") from exc
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"mcp_json {path} has no 'mcpServers' object")
    out: dict[str, McpServerConfig] = {}
    for name, entry in servers.items():
        key = f"mcpServers.{name}"
        if isinstance(entry, dict):
            if entry.get("type", "stdio") != "stdio":
                raise ConfigError(
                    f"'{key}' in {path} has type {entry['type']!r}: "
                    "only stdio servers are supported"
                )
            if entry.get("disabled") is True:
                continue
            entry = {k: v for k, v in entry.items() if k not in ("type", "disabled")}
        out[name] = _server(entry, key, str(path), path.parent)
    return out


def _stdio_server(line: str) -> McpServerConfig:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise ConfigError(f"--mcp-stdio {line!r}: {exc}") from exc
    if not argv:
        raise ConfigError("--mcp-stdio needs a command, e.g. --mcp-stdio asyncai-mcp-simple")
    return McpServerConfig(command=argv[0], args=argv[1:])


def _unique_name(base: str, taken: Mapping[str, Any]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name
