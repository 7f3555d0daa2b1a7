"""The effective configuration as ``asyncai config show`` prints it: every value, its origin.

Pure: :func:`effective_settings` turns a loaded :class:`~daemon.config.Config` into
rows of (key, value, where it came from), reading the loader's own record
(``Config.sources``) rather than keeping a second one; :func:`settings_text`
and :func:`settings_json` print them. Each channel's rows are its resolved
:class:`~daemon.config.ChannelPolicy`, and each row says whether the value is
the channel section's own or inherited, and from which global key.

Secrets never show: a key whose name looks secret (``api_key``, ``token``,
an MCP server's ``GITHUB_TOKEN``) or whose field is ``repr=False`` shows as
``(hidden)`` when set, and so does the userinfo of any URL in a value
(``postgres://app:PASSWORD@db/prod`` as a server's argument or its
``DATABASE_URL``, a ``base_url`` behind basic auth), whatever its key's name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from daemon.config.load import COMMAND_LINE, ENVIRONMENT_SOURCE
from daemon.config.messages import toml_key
from daemon.config.policy import ChannelPolicy
from daemon.config.root import SECTIONS, Config
from daemon.config.schema import SECRET_NAME, EndpointConfig, without_userinfo

__all__ = ["Setting", "Settings", "effective_settings", "settings_json", "settings_text"]

Origin = Literal["default", "file", "environment", "flag", "channel section"]

HIDDEN = "(hidden)"
_ENVIRONMENT = ENVIRONMENT_SOURCE.format("")  # the loader's words, before the variable


@dataclass(frozen=True)
class Setting:
    """One effective value: its key, the value (``HIDDEN`` for a secret), where it came from.

    ``source`` is the file, ``environment variable X`` or ``the command line``
    (empty for a default); ``via`` the global key a channel's value was
    inherited from (empty when the key is its own).
    """

    key: str
    value: Any
    origin: Origin
    source: str = ""
    via: str = ""


@dataclass(frozen=True)
class Settings:
    """The whole effective configuration: the daemon's sections, then each channel's policy."""

    path: Path | None
    sections: dict[str, list[Setting]]  # "model", "mcp_servers.kcp", "models.big", ...
    channels: dict[str, list[Setting]]  # "" (the globals) and each [channel."#name"]
    digests: dict[str, str]  # ChannelPolicy.digest() by channel
    without_section: list[str]  # [channels] channels that have the global policy


def effective_settings(config: Config) -> Settings:
    """Every value of ``config`` with its origin, secrets hidden."""
    # "": the top-level keys, printed before the first table
    sections = {"": [_plain(config, ("mcp_json",), config.mcp_json, secret=False)]}
    for name in SECTIONS:
        sections[name] = list(_section(config, (name,), getattr(config, name)))
    for server_name, server in config.mcp_servers.items():
        key = toml_key(("mcp_servers", server_name))
        source = config.sources.get(key, "")
        rows = [
            Setting("command", server.command, _origin(source), source),
            Setting("args", list(server.args), _origin(source), source),
        ]
        rows += [
            Setting(
                toml_key(("env", var)),
                HIDDEN if SECRET_NAME.search(var) else value,
                _origin(source),
                source,
            )
            for var, value in server.env.items()
        ]
        rows.append(Setting("cwd", server.cwd, _origin(source), source))
        rows.append(Setting("max_concurrent", server.max_concurrent, _origin(source), source))
        sections[key] = rows
    for endpoint_name, endpoint in config.models.items():
        table = ("models", endpoint_name)
        sections[toml_key(table)] = list(_section(config, table, endpoint))
    policies = config.policies()
    return Settings(
        path=config.path,
        sections=sections,
        channels={name: list(_channel(config, policy)) for name, policy in policies.items()},
        digests={name: policy.digest() for name, policy in policies.items()},
        without_section=[c for c in config.channels.channels if c not in config.channel],
    )


def _section(config: Config, table: tuple[str, ...], section: Any) -> Iterator[Setting]:
    """The rows of one section's dataclass, keys relative to ``table``."""
    for f in dataclasses.fields(section):
        if f.init:
            secret = not f.repr or bool(SECRET_NAME.search(f.name))
            row = _plain(config, (*table, f.name), getattr(section, f.name), secret=secret)
            yield dataclasses.replace(row, key=f.name)


def _plain(config: Config, key: tuple[str, ...], value: Any, *, secret: bool) -> Setting:
    """A global key's row: its value and the loader's record of where it came from."""
    name = toml_key(key)
    source = config.sources.get(name, "")
    shown = HIDDEN if secret and value is not None else value
    return Setting(name, shown, _origin(source), source)


# A channel's rows: (its key, the policy's value, the channel section's key, the global one)
_Row = tuple[str, Callable[[ChannelPolicy], Any], tuple[str, ...], tuple[str, ...] | None]
_CHANNEL_ROWS: list[_Row] = [
    ("servers", lambda p: None if p.servers is None else sorted(p.servers), ("servers",), None),
    ("tools_allow", lambda p: list(p.tools_allow), ("tools_allow",), None),
    ("tools_deny", lambda p: list(p.tools_deny), ("tools_deny",), None),
    *[
        (
            f"approvals.{name}",
            lambda p, name=name: getattr(p.approvals, name),
            ("approvals", name),
            ("approvals", name),
        )
        for name in ("mode", "allow", "deny", "approvers", "expire_after")
    ],
    ("tool_mode", lambda p: p.tool_mode, ("tool_mode",), ("model", "tool_mode")),
    ("endpoint", lambda p: p.endpoint, ("endpoint",), None),
    (
        "system_prompt",
        lambda p: p.model.system_prompt,
        ("system_prompt",),
        ("model", "system_prompt"),
    ),
    *[
        (name, lambda p, name=name: getattr(p, name), (name,), ("runtime", name))
        for name in ("max_runs_per_sender_per_hour", "max_tokens_per_sender_per_day")
    ],
    ("max_concurrent_runs", lambda p: p.max_concurrent_runs, ("max_concurrent_runs",), None),
]


def _channel(config: Config, policy: ChannelPolicy) -> Iterator[Setting]:
    """One channel's effective values: the section's own, else the inherited global ones."""
    table = ("channel", policy.channel)
    for key, value_of, own, inherited in _CHANNEL_ROWS:
        value = value_of(policy)
        own_key = toml_key((*table, *own))
        if policy.channel and own_key in config.sources:
            yield Setting(key, value, "channel section", config.sources[own_key])
        elif inherited is not None:
            row = _plain(config, inherited, value, secret=False)
            yield dataclasses.replace(row, key=key, via=row.key)
        else:
            yield Setting(key, value, "default")
    endpoint = ("model",) if policy.endpoint is None else ("models", policy.endpoint)
    for f in dataclasses.fields(EndpointConfig):
        if f.init:
            secret = not f.repr or bool(SECRET_NAME.search(f.name))
            value = getattr(policy.model, f.name)
            row = _plain(config, (*endpoint, f.name), value, secret=secret)
            yield dataclasses.replace(row, key=f"model.{f.name}", via=row.key)


def _origin(source: str) -> Origin:
    """The kind of source the loader recorded: none is a default."""
    if not source:
        return "default"
    if source.startswith(_ENVIRONMENT):
        return "environment"
    if source == COMMAND_LINE:
        return "flag"
    return "file"


def settings_json(view: Settings) -> dict[str, Any]:
    """The settings as JSON-ready data: ``{"path", "sections", "channels"}``."""

    def rows(settings: list[Setting]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in settings:
            row: dict[str, Any] = {"value": _jsonable(s.value), "origin": s.origin}
            if s.source:
                row["source"] = s.source
            if s.via:
                row["via"] = s.via
            out[s.key] = row
        return out

    return {
        "path": None if view.path is None else str(view.path),
        "sections": {name: rows(section) for name, section in view.sections.items()},
        "channels": {
            name: {
                "digest": view.digests[name],
                **({"applies_to": view.without_section} if name == "" else {}),
                "settings": rows(section),
            }
            for name, section in view.channels.items()
        },
    }


def settings_text(view: Settings) -> str:
    """The settings as TOML-like lines, each with a comment saying where it came from."""
    lines = [f"# asyncai config show: {view.path or 'no file (built-in defaults)'}"]
    for name, section in view.sections.items():
        lines.append("")
        if name:
            lines.append(f"[{name}]")
        lines.extend(_line(s) for s in section)
    for name, section in view.channels.items():
        lines.append("")
        if name:
            title = f"[channel.{toml_key((name,))}]"
        else:
            others = ", ".join(view.without_section)
            title = "# every channel without a section" + (f" ({others})" if others else "")
        lines.append(f"{title}  # effective; policy digest {view.digests[name][:12]}")
        lines.extend(_line(s) for s in section)
    return "\n".join(lines) + "\n"


def _line(setting: Setting) -> str:
    """``key = value  # origin``, aligned."""
    text = f"{setting.key} = {_shown(setting.value)}"
    where: str = setting.origin
    if setting.origin == "environment":
        where = setting.source.replace(_ENVIRONMENT, "environment ")
    elif setting.origin == "file":
        where = f"file {setting.source}"
    elif setting.origin == "channel section":
        where = f"channel section in {setting.source}"
    if setting.via:
        where += f" ({setting.via})"
    return f"{text:<48} # {where}"


def _shown(value: Any) -> str:
    if value == HIDDEN:
        return HIDDEN
    if value is None:
        return "(unset)"
    text = json.dumps(_jsonable(value), ensure_ascii=False)
    return text if len(text) <= 72 else text[:69] + "..."


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple, frozenset, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, str):  # a URL's userinfo is a secret whatever the key's name
        return without_userinfo(value)
    return value
