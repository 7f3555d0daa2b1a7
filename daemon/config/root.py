"""The whole configuration: ``Config`` over its sections, and each channel's policy from it.

``Config()`` is the built-in defaults; the loader (:mod:`daemon.config.load`)
validates a file, the environment and flags through this class and records
in ``sources`` where each key it set came from, which the errors and
``asyncai config show`` name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ConfigDict

from daemon.config.policy import ChannelPolicy, resolve_policy
from daemon.config.schema import (
    DEFAULT_CONFIG_PATH,
    SECRET_NAME,
    URL_USERINFO,
    ApprovalsConfig,
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
from daemon.config.values import PathValue
from daemon.errors import ConfigError

__all__ = ["SECTIONS", "Config"]

# Config's one-table sections, in the order of the file and of ``asyncai config show``;
# the loader and show both read this list, so a new section is added once
SECTIONS = (
    "model",
    "code_mode",
    "channels",
    "runtime",
    "sessions",
    "approvals",
    "web",
    "telemetry",
)


@dataclass
class Config:
    """The whole configuration. ``Config()`` is the built-in defaults.

    The loader validates the sections, ``[models.NAME]``, ``[channel."#name"]``
    and ``mcp_json`` through this class; ``mcp_servers``, ``path`` and
    ``sources`` it fills itself.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")  # an unknown key names itself

    model: ModelConfig = field(default_factory=ModelConfig)
    code_mode: CodeModeConfig = field(default_factory=CodeModeConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    mcp_json: PathValue | None = None
    channels: ChannelsConfig = field(default_factory=ChannelsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    approvals: ApprovalsConfig = field(default_factory=ApprovalsConfig)
    web: WebConfig = field(default_factory=WebConfig)  # the console (issue 30)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)  # issue 30
    models: dict[str, EndpointConfig] = field(default_factory=dict)  # [models.NAME]
    channel: dict[str, ChannelConfig] = field(default_factory=dict)  # [channel."#name"]
    path: Path | None = None  # the file read, if any
    # Where each key the loader set came from, by its TOML key ('model.api_key',
    # 'channel."#ops".servers'): a file, "environment variable X" or "the command
    # line"; a key not in it has its default. An [mcp_servers] entry by
    # 'mcp_servers.NAME'.
    sources: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def secrets(self) -> list[str]:
        """Values the log redactor must never print (API keys, tokens, secret-looking env)."""
        keys = [self.model.api_key, *(m.api_key for m in self.models.values())]
        out = [v for v in (*keys, self.channels.token) if v]
        for server in self.mcp_servers.values():
            out.extend(v for k, v in server.env.items() if SECRET_NAME.search(k) and v)
        # a URL's user and password, whatever the key's name (a server's DATABASE_URL or
        # argument, a base_url with basic auth): the whole userinfo, and the password
        # alone when it is long enough not to mask ordinary words of a log line
        texts = [self.model.base_url, *(m.base_url for m in self.models.values())]
        texts.append(self.channels.url)
        for server in self.mcp_servers.values():
            texts.extend([*server.args, *server.env.values()])
        for text in texts:
            for match in URL_USERINFO.finditer(text or ""):
                userinfo = match["userinfo"]
                out.append(userinfo)
                password = userinfo.partition(":")[2]
                if len(password) >= 6:
                    out.append(password)
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

    def policy(self, channel: str) -> ChannelPolicy:
        """``channel``'s effective settings: its ``[channel."#name"]`` section over the
        global values; a channel without a section gets the global ones (``channel == ""``)."""
        return resolve_policy(
            channel,
            self.channel.get(channel),
            model=self.model,
            models=self.models,
            approvals=self.approvals,
            runtime=self.runtime,
        )

    def policies(self) -> dict[str, ChannelPolicy]:
        """The global policy (key ``""``) and each section's, by channel name.

        Every channel without a section has the global one, so this is all
        the policies there are (what a cluster compares, what ``config show``
        prints).
        """
        return {name: self.policy(name) for name in ["", *self.channel]}
