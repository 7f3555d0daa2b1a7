"""The configuration: a TOML file, overridden by environment variables and flags.

Precedence, lowest first: the defaults, the TOML file (``--config``, default
``./asyncai.toml``), the environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``ASYNCAI_MODEL``, ``ATIRC_URL``, ``ATIRC_TOKEN``, ``ATIRC_NICK``), then
command-line flags. Every key is checked by name and type when the file is
loaded, so a typo fails at start with a message that names it (``unknown key
'code_mode.max_wal' in asyncai.toml``) instead of being silently ignored.

MCP servers use the keys of the common ``mcpServers`` JSON (``command``,
``args``, ``env``), so an existing entry can be pasted as a
``[mcp_servers.NAME]`` table; ``mcp_json = "PATH"`` reads such a JSON file, and
``--mcp-stdio "CMD ARGS"`` adds a server from the command line.

One daemon answers in several channels, each with its own policy:
``[channel."#name"]`` sections override the global values for one channel
(which servers and tools exist there, its ``approvals`` table, tool mode,
endpoint, system prompt, limits), and ``[models.NAME]`` sections are named
endpoints beside ``[model]``. ``Config.policy(channel)`` resolves them into a
pure :class:`ChannelPolicy`.

Holds the sections' dataclasses (:mod:`daemon.config.schema`) and the kinds
of value their keys take (:mod:`daemon.config.values`), ``Config`` over them
(:mod:`daemon.config.root`), a channel's resolved policy
(:mod:`daemon.config.policy`), the loader and its precedence
(:mod:`daemon.config.load`), the checks across sections
(:mod:`daemon.config.checks`), the wording of its errors
(:mod:`daemon.config.messages`), the sources of MCP servers
(:mod:`daemon.config.servers`), the shared flags (:mod:`daemon.config.flags`)
and the effective values with their origins, as ``asyncai config show``
prints them (:mod:`daemon.config.show`).

May import: ``daemon.errors``, ``daemon.limits`` (``CodeModeLimits``, which
``[code_mode]`` sets), ``daemon.mcp.spec`` (the one check of an
``mcpServers`` entry), ``channels`` (``is_channel``, the hub's word on a
channel name) and pydantic; never ``daemon.code_mode``.
"""

from daemon.config.flags import add_config_arguments, overrides_from_args
from daemon.config.load import ENVIRONMENT, load_config
from daemon.config.policy import ChannelPolicy
from daemon.config.root import Config
from daemon.config.schema import (
    DEFAULT_CONFIG_PATH,
    ApprovalsConfig,
    ChannelApprovalsConfig,
    ChannelConfig,
    ChannelsConfig,
    CodeModeConfig,
    EndpointConfig,
    McpServerConfig,
    ModelConfig,
    RuntimeConfig,
    SessionsConfig,
    TelemetryConfig,
    WebConfig,
)
from daemon.config.show import Setting, Settings, effective_settings, settings_json, settings_text

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ENVIRONMENT",
    "ApprovalsConfig",
    "ChannelApprovalsConfig",
    "ChannelConfig",
    "ChannelPolicy",
    "ChannelsConfig",
    "CodeModeConfig",
    "Config",
    "EndpointConfig",
    "McpServerConfig",
    "ModelConfig",
    "RuntimeConfig",
    "SessionsConfig",
    "Setting",
    "Settings",
    "TelemetryConfig",
    "WebConfig",
    "add_config_arguments",
    "effective_settings",
    "load_config",
    "overrides_from_args",
    "settings_json",
    "settings_text",
]
