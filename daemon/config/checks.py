"""The checks across sections of a loaded configuration: what one key's type cannot say.

Pydantic checks each key by its type (:mod:`daemon.config.load`); whether a
channel section's ``servers`` are ``[mcp_servers]`` names, its ``endpoint``
a ``[models.NAME]``, its name a channel the daemon answers in, needs the
whole configuration. Each failure is one line that names the section and the
key, where it was written, and what to do.
"""

from __future__ import annotations

from channels import is_channel, is_nick
from daemon.config.messages import toml_key
from daemon.config.root import Config
from daemon.errors import ConfigError

__all__ = ["check_channels"]


_CHANNEL_NAME = "a channel is '#' and 1-64 of A-Z a-z 0-9 _ . -"  # as the hub takes it


def check_channels(config: Config) -> None:
    """Raise a :class:`ConfigError` about the first bad reference of a channel section.

    In order: the names of ``[channels]`` (``nick``, ``channels``, ``shared``), the
    global ``[approvals]``, then each ``[channel."#name"]`` as
    written: its name, its ``servers``, an empty ``tools_allow``, its
    ``endpoint`` (a ``[models.NAME]`` with a ``model``), its ``approvers``, its
    ``max_concurrent_runs``.
    """
    _check_names(config)
    _check_approvers(config, ("approvals",), config.approvals.approvers, config.approvals.mode)
    for name, section in config.channel.items():
        table = ("channel", name)
        where = _where(config, table)
        if not is_channel(name):
            raise ConfigError(
                f"key '{toml_key(table)}' in {where} is not a channel name: {_CHANNEL_NAME}"
            )
        # An error, not a warning: a section whose channel the daemon does not answer
        # in is most often a typo ([channel."#hlep"]), and the channel meant would
        # then run on the global policy: more tools, fewer approvals than written.
        # Failing closed costs the operator one edit; a silent typo could cost a
        # public channel its read-only policy. (A section kept for a channel taken
        # off the list for a while has to go too; the message says so.)
        if name not in config.channels.channels:
            listed = ", ".join(config.channels.channels) or "none"
            raise ConfigError(
                f"key '{toml_key(table)}' in {where} is a section for a channel the daemon "
                f"does not answer in: channels.channels lists {listed}; add {name} there "
                "or remove the section"
            )
        if section.servers is not None:
            for server in section.servers:
                if server not in config.mcp_servers:
                    known = ", ".join(sorted(config.mcp_servers)) or "none"
                    raise ConfigError(
                        f"key '{toml_key((*table, 'servers'))}' in {where} names an unknown "
                        f"server '{server}' (the [mcp_servers]: {known})"
                    )
        # An allow list written empty reads as "no allow list": every tool. The operator
        # who writes it most often means "nothing", and would get every write tool of every
        # server instead: fail closed, as for the typo above.
        if section.tools_allow is not None and not section.tools_allow:
            raise ConfigError(
                f"key '{toml_key((*table, 'tools_allow'))}' in {where} is an empty list, "
                "which would leave every tool in the channel: leave the key out for every "
                "tool, or write servers = [] for a channel without tools"
            )
        if section.endpoint is not None and section.endpoint not in config.models:
            known = ", ".join(sorted(config.models)) or "none"
            raise ConfigError(
                f"key '{toml_key((*table, 'endpoint'))}' in {where} names an unknown "
                f"endpoint '{section.endpoint}' (the [models.NAME] sections: {known})"
            )
        if section.endpoint is not None and not config.models[section.endpoint].model:
            # else serve's "no model configured" names [model], which has one
            key = ("models", section.endpoint, "model")
            raise ConfigError(
                f"key '{toml_key(key)}' in {_where(config, key)} is not set, and channel "
                f"{name}'s runs use that endpoint: name its model there (a named endpoint "
                "never takes [model]'s)"
            )
        if section.approvals.approvers is not None:
            mode = section.approvals.mode or config.approvals.mode
            _check_approvers(config, (*table, "approvals"), section.approvals.approvers, mode)
        runs, total = section.max_concurrent_runs, config.runtime.max_concurrent_runs
        if runs is not None and runs > total:
            raise ConfigError(
                f"key '{toml_key((*table, 'max_concurrent_runs'))}' in {where} is {runs}, over "
                f"runtime.max_concurrent_runs ({total}): a channel's cap is within the total"
            )


def _check_names(config: Config) -> None:
    """``[channels]``' names as the hub takes them, checked at load: else the daemon
    started, and the hub's refusal ended it with exit 1 (which systemd restarts) in words
    that named no key. A ``shared`` entry the daemon does not answer in is most often a
    typo, and the channel meant would then answer every message, not only mentions."""
    nick = config.channels.nick
    if not is_nick(nick):
        raise ConfigError(
            f"key 'channels.nick' in {_where(config, ('channels', 'nick'))} is not a nick: "
            f"{nick!r}; a nick is 1-64 of A-Z a-z 0-9 _ . -"
        )
    for key in ("channels", "shared"):
        for name in getattr(config.channels, key):
            if not is_channel(name):
                raise ConfigError(
                    f"key 'channels.{key}' in {_where(config, ('channels', key))} lists "
                    f"{name!r}, which is not a channel name: {_CHANNEL_NAME}"
                )
    for name in config.channels.shared:
        if name not in config.channels.channels:
            listed = ", ".join(config.channels.channels) or "none"
            raise ConfigError(
                f"key 'channels.shared' in {_where(config, ('channels', 'shared'))} lists "
                f"{name}, a channel the daemon does not answer in: channels.channels lists "
                f"{listed}; add {name} there or remove it from shared"
            )


def _check_approvers(
    config: Config, table: tuple[str, ...], approvers: list[str], mode: str
) -> None:
    """Approvers written where the mode is ``allow`` are an error: nothing asks there.

    Only where the list is written: a channel that sets ``mode = "allow"``
    and inherits ``[approvals]``' approvers wrote none.
    """
    if mode == "allow" and approvers:
        key = toml_key((*table, "approvers"))
        raise ConfigError(
            f"key '{key}' in {_where(config, (*table, 'approvers'))} lists approvers under "
            'mode = "allow", where no call asks: remove them, or set mode = "ask"'
        )


def _where(config: Config, key: tuple[str, ...]) -> str:
    """Where ``key`` (or, for a table, its first key) was written."""
    name = toml_key(key)
    if name in config.sources:
        return config.sources[name]
    inside = (source for k, source in config.sources.items() if k.startswith(name + "."))
    return next(inside, str(config.path) if config.path else "the configuration")
