"""The configuration's sections: one dataclass per kind of TOML table.

Plain stdlib dataclasses, as the rest of the daemon uses them; their field
annotations (:mod:`daemon.config.values`) also tell pydantic how to check a
value, and ``__pydantic_config__`` forbids unknown keys, so the loader
validates the merged file, environment and flags with one ``TypeAdapter``
over :class:`daemon.config.Config`, which holds them
(:mod:`daemon.config.root`). Building one in code checks nothing, as before.

Secrets (the API keys, the channel token, MCP server environment values) never
appear in a ``repr``: their fields are ``repr=False``, ``McpServerConfig``
prints only the names of its environment, and ``Config.secrets()`` lists the
values for the log redactor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict

from daemon.config.values import (
    ChannelUrl,
    Count,
    Flag,
    HttpUrl,
    Listen,
    NonNegativeInt,
    NonNegativeSeconds,
    PathValue,
    Seconds,
    Size,
    Text,
)
from daemon.limits import CodeModeLimits

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "SECRET_NAME",
    "URL_USERINFO",
    "ApprovalsConfig",
    "ChannelApprovalsConfig",
    "ChannelConfig",
    "ChannelsConfig",
    "CodeModeConfig",
    "EndpointConfig",
    "McpServerConfig",
    "ModelConfig",
    "RuntimeConfig",
    "SessionsConfig",
    "TelemetryConfig",
    "WebConfig",
    "without_userinfo",
]

DEFAULT_CONFIG_PATH = Path("asyncai.toml")

# names whose values are never echoed in messages and are handed to the log redactor
SECRET_NAME = re.compile(r"key|token|secret|passw|auth|credential", re.IGNORECASE)
# scheme://USERINFO@: a user and password (or a token as the user) in a URL, a secret
# whatever the key's name (config show hides it; the log redactor is handed it)
URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def without_userinfo(text: str) -> str:
    """``text`` with each URL's user and password shown as ``(hidden)``."""
    return URL_USERINFO.sub(r"\g<scheme>(hidden)@", text)


_SECTION = ConfigDict(extra="forbid")  # a key that is no field is an error that names it


@dataclass
class EndpointConfig:
    """``[models.NAME]``: a named OpenAI-compatible endpoint and the run loop's model keys.

    The keys of ``[model]`` that belong to an endpoint (its address, key, model
    name, sampling, timeouts, retries, rounds and the small-model harness);
    ``tool_mode`` and ``system_prompt`` are a channel's, ``local_max_rss`` the
    daemon's. The defaults are the built-in ones, not ``[model]``'s: a named
    endpoint never inherits ``[model]``'s ``api_key`` (nor ``OPENAI_API_KEY``),
    which would hand one provider's key to another's address.
    """

    __pydantic_config__ = _SECTION

    base_url: HttpUrl = "https://api.openai.com/v1"
    api_key: Text | None = field(default=None, repr=False)
    model: Text | None = None  # required before a run: --model, ASYNCAI_MODEL or the file
    temperature: Annotated[float, Strict(), Field(ge=0, le=2)] | None = None
    max_tokens: Count | None = None
    request_timeout: Seconds = 300.0  # local models are slow
    tool_call_timeout: Seconds = 600.0  # one model tool call
    max_rounds: Count = 8
    retries: NonNegativeInt = 3  # after the first attempt
    # Stream each reply: its first chunk splits the model's time into prompt evaluation
    # and generation (the runs' time split). A server whose stream brings nothing back
    # is asked again without, and no more after that. False: never stream.
    stream: Flag = True
    # Requests this endpoint is sent at once; the others wait for a slot in the daemon
    # (the wait is timed). None: 1 for the embedded local model (llama-cpp-python
    # serves one at a time and cuts a streamed reply short when another waits), no
    # limit for any other model.
    slots: Count | None = None
    backoff_initial: NonNegativeSeconds = 1.0
    backoff_max: NonNegativeSeconds = 30.0
    # The small-model harness (daemon.model.harness): force run_code first, catalog and a
    # worked example in the system message, broken arguments and code repaired, an
    # answer round after the first good result. None: on for the embedded local model
    # (model "qwen-coder-1.5b"), off for every other model.
    harness: Flag | None = None
    worked_example: Text | None = None  # the harness's example; None: the built-in one
    # The harness's solved (question, snippet) pairs (TOML [[example]] tables, or JSON
    # Lines for a .jsonl name): the closest two per question replace worked_example
    examples: PathValue | None = None
    examples_text: str | None = field(default=None, init=False, repr=False)
    # The harness's answer round after a good result: true, a short value (a number, a
    # name, a short list or a small dict of them) is the reply as the code computed
    # it, and the model is not asked to phrase it (one round fewer)
    reply_with_short_result: Flag = False
    # The harness's self-consistency: snippets drawn for a short answer (a number, a
    # short list); 2 or 3 check the first against warmer samples. Off (1) by default:
    # on the bench it changed no outcome and cost 36 more snippets (docs/benchmarks/history.md).
    answer_samples: Annotated[int, Strict(), Field(ge=1, le=3)] = 1
    # The harness's trials switched on for this endpoint, a comma list of names (as
    # ASYNCAI_HARNESS_ON, whose names it adds to): so that a side-by-side bench run
    # (--compare-set) can measure one in B only. "": none.
    harness_trials: Text = ""
    # The harness's rules switched off for this endpoint, a comma list of names (as
    # ASYNCAI_HARNESS_OFF, whose names it adds to): so that a side-by-side bench run can
    # measure a rule's removal in B only. "": none.
    harness_off: Text = ""

    def as_model(
        self,
        *,
        tool_mode: Literal["code", "direct"],
        system_prompt: str | None,
        local_max_rss: int,
    ) -> ModelConfig:
        """A fresh ``ModelConfig`` of this endpoint's keys and a channel's (and daemon's) ones."""
        values = {f.name: getattr(self, f.name) for f in fields(EndpointConfig) if f.init}
        model = ModelConfig(
            **values,
            tool_mode=tool_mode,
            system_prompt=system_prompt,
            local_max_rss=local_max_rss,
        )
        model.examples_text = self.examples_text  # read by the loader, not an init field
        return model


@dataclass
class ModelConfig(EndpointConfig):
    """``[model]``: the default endpoint, and the global ``tool_mode`` and ``system_prompt``."""

    __pydantic_config__ = _SECTION

    tool_mode: Literal["code", "direct"] = "code"
    system_prompt: Text | None = None  # None: the built-in prompt of the tool mode
    # asyncai up's embedded model server is restarted between runs above this resident size
    local_max_rss: Annotated[Size, Field(gt=0)] = 5 * 1024**3
    # asyncai up's embedded model server keeps prompt states of this many bytes in RAM
    # (llama-cpp-python's --cache): 0, off, serves one thread at a time best; several
    # threads at once get their own state back (bench/prompt_cache.py)
    local_prompt_cache: Annotated[Size, Field(ge=0)] = 0


@dataclass
class CodeModeConfig:
    """``[code_mode]``: the fields of ``CodeModeLimits``; None keeps its default."""

    __pydantic_config__ = _SECTION

    max_feed_duration: Seconds | None = None
    max_suspensions: Count | None = None
    max_nested_calls: Count | None = None
    max_print_bytes: Annotated[Size, Field(ge=1)] | None = None
    max_memory: Annotated[Size, Field(gt=0)] | None = None
    tool_timeout: Seconds | None = None
    max_wall: Seconds | None = None
    max_result_chars: Count | None = None
    max_scopes: Count | None = None
    max_scope_dump: Annotated[Size, Field(gt=0)] | None = None  # a larger REPL is not stored
    max_snippet_bytes: Annotated[Size, Field(gt=0)] | None = None  # a larger snippet is refused
    catalog_budget: Count | None = None  # stub characters; over it: search_tools/describe
    preamble: PathValue | None = None  # operator Python run in every new scope (spec A8)
    preamble_text: str | None = field(default=None, init=False, repr=False)

    def limits(self) -> CodeModeLimits:
        """``CodeModeLimits`` with these values over its defaults."""
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
        return CodeModeLimits().max_scopes


@dataclass
class McpServerConfig:
    """``[mcp_servers.NAME]``: one stdio MCP server, ``mcpServers`` keys (and ``cwd``).

    Checked by ``daemon.mcp.spec.parse_server_entry``, wherever it was written.
    """

    command: str
    args: list[str] = field(default_factory=list)
    # servers get a minimal environment: what one needs goes here (values may be secrets)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: Path | None = None  # working directory of the server process
    max_concurrent: int | None = None  # its calls in flight at once, all threads; None: unlimited

    def entry(self) -> dict[str, Any]:
        """The ``mcpServers`` entry, as ``McpToolExecutor`` takes it."""
        out: dict[str, Any] = {
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
        }
        if self.cwd is not None:
            out["cwd"] = str(self.cwd)
        if self.max_concurrent is not None:
            out["max_concurrent"] = self.max_concurrent
        return out

    def __repr__(self) -> str:
        """The command line and the names (never the values) of the environment."""
        return (
            f"McpServerConfig(command={self.command!r}, args={self.args!r}, "
            f"env_keys={sorted(self.env)!r}, cwd={self.cwd!r}, "
            f"max_concurrent={self.max_concurrent!r})"
        )


@dataclass
class ChannelsConfig:
    """``[channels]``: the atirc-style hub and what to answer there."""

    __pydantic_config__ = _SECTION

    url: ChannelUrl = "ws://127.0.0.1:6680/"
    token: Text | None = field(default=None, repr=False)
    nick: Text = "asyncai"
    channels: list[Text] = field(default_factory=list)  # channels to subscribe to
    shared: list[Text] = field(default_factory=list)  # answer only mentions and own threads
    allowed_senders: list[Text] = field(default_factory=list)  # empty: everyone
    # nats:// only: a silent daemon's threads move to the others within this many seconds
    takeover_seconds: Seconds = 30.0


@dataclass
class RuntimeConfig:
    """``[runtime]``: threads, runs and shutdown."""

    __pydantic_config__ = _SECTION

    max_concurrent_runs: Count = 4  # ≤ code_mode.max_scopes
    max_queued_prompts: Count = 256  # all threads together
    history_turns: NonNegativeInt = 20
    history_chars: NonNegativeInt = 24_000
    max_run_seconds: Seconds = 900.0
    shutdown_grace: NonNegativeSeconds = 20.0
    publish_timeout: Seconds = 60.0  # the hub's ack of a reply
    # Per sender, counted from the database (a restart does not reset them); None: unlimited.
    max_runs_per_sender_per_hour: Count | None = None
    max_tokens_per_sender_per_day: Count | None = None


@dataclass
class ApprovalsConfig:
    """``[approvals]``: which mutating tool calls wait for a person, and who decides.

    ``allow`` and ``deny`` are ``server.tool`` globs (``kcp.scale_object``,
    ``git.*``); deny wins over allow, both over ``mode``. Read-only calls
    never ask.
    """

    __pydantic_config__ = _SECTION

    mode: Literal["ask", "allow", "deny"] = "ask"  # for mutating calls
    allow: list[Text] = field(default_factory=list)  # globs that never ask
    deny: list[Text] = field(default_factory=list)  # globs that are always refused
    approvers: list[Text] = field(default_factory=list)  # empty: the prompt's sender
    expire_after: Seconds = 86_400.0  # a request waiting longer counts as denied


@dataclass
class ChannelApprovalsConfig:
    """``[channel."#name".approvals]``: the keys of ``[approvals]``, each None to inherit it."""

    __pydantic_config__ = _SECTION

    mode: Literal["ask", "allow", "deny"] | None = None
    allow: list[Text] | None = None
    deny: list[Text] | None = None
    approvers: list[Text] | None = None
    expire_after: Seconds | None = None

    def over(self, base: ApprovalsConfig) -> ApprovalsConfig:
        """``base`` with the keys this table sets in its place (fresh lists, no aliasing)."""
        return ApprovalsConfig(
            mode=base.mode if self.mode is None else self.mode,
            allow=list(base.allow if self.allow is None else self.allow),
            deny=list(base.deny if self.deny is None else self.deny),
            approvers=list(base.approvers if self.approvers is None else self.approvers),
            expire_after=base.expire_after if self.expire_after is None else self.expire_after,
        )


@dataclass
class ChannelConfig:
    """``[channel."#name"]``: one channel's overrides of the global values; None inherits.

    ``servers``, ``tools_allow`` and ``tools_deny`` decide which tools exist in
    the channel at all (no global key: every server, every tool); the
    ``approvals`` table what a call of one that exists needs; ``endpoint``
    names a ``[models.NAME]`` in place of ``[model]``; ``max_concurrent_runs``
    caps the channel's runs within ``[runtime] max_concurrent_runs``, it
    reserves nothing. :meth:`daemon.config.Config.policy` resolves them.
    """

    __pydantic_config__ = _SECTION

    servers: list[Text] | None = None  # [mcp_servers] names; None: all of them
    tools_allow: list[Text] | None = None  # server.tool globs; None: every tool; [] refused
    tools_deny: list[Text] | None = None  # globs removed from the catalog; deny wins
    approvals: ChannelApprovalsConfig = field(default_factory=ChannelApprovalsConfig)
    tool_mode: Literal["code", "direct"] | None = None  # None: [model] tool_mode
    endpoint: Text | None = None  # a [models.NAME]; None: [model]
    system_prompt: Text | None = None  # None: [model] system_prompt
    max_runs_per_sender_per_hour: Count | None = None  # None: [runtime]'s
    max_tokens_per_sender_per_day: Count | None = None  # None: [runtime]'s
    max_concurrent_runs: Count | None = None  # None: no cap but [runtime]'s total


@dataclass
class SessionsConfig:
    """``[sessions]``: the SQLite file of transcripts, runs and audit."""

    __pydantic_config__ = _SECTION

    db: PathValue = Path(".asyncai/asyncai.db")
    scope_retention_days: NonNegativeSeconds = 30.0  # stored REPLs older than this are deleted


@dataclass
class WebConfig:
    """``[web]``: the operator's console the daemon serves (issue 30); off unless ``listen``.

    ``tokens`` is a file of ``TOKEN NICK`` lines in the hub's tokens format
    (mode 0600, tokens of at least 16 characters): a session is started with
    one of them, and acts as its nick. With ``listen`` set and no such file,
    the daemon does not start.
    """

    __pydantic_config__ = _SECTION

    listen: Listen | None = None  # "127.0.0.1:6690"; None: no console
    tokens: PathValue = Path(".asyncai/web.tokens")


@dataclass
class TelemetryConfig:
    """``[telemetry]``: traces and metrics of the runs (issue 30); both off by default.

    ``otlp_endpoint`` (also ``OTEL_EXPORTER_OTLP_ENDPOINT``): an OTLP/HTTP
    collector's base URL; each run's trace is posted to ``ENDPOINT/v1/traces``
    as JSON. ``metrics_listen``: ``HOST:PORT`` serving Prometheus' ``/metrics``
    (the console serves them on its own address too).
    """

    __pydantic_config__ = _SECTION

    otlp_endpoint: Text | None = None  # "http://127.0.0.1:4318"; None: no traces exported
    metrics_listen: Listen | None = None  # "127.0.0.1:9464"; None: /metrics only on the console
