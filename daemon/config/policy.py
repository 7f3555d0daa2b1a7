"""One channel's effective settings: its ``[channel."#name"]`` section over the global values.

Pure: :func:`resolve_policy` takes the sections and gives a
:class:`ChannelPolicy` with every value resolved, so the runtime never asks
"is this key set here or there". A key the channel's section leaves out
(None) takes the global value: ``[approvals]`` key by key under the
channel's ``approvals`` table, ``[model]`` for ``tool_mode`` and
``system_prompt``, ``[runtime]`` for the per-sender limits, ``[model]`` (or
the section's ``endpoint``, a ``[models.NAME]``) for the model. Which tools
exist at all has no global key: every server, every tool.

:meth:`ChannelPolicy.sees` is the one answer to "does this tool exist in
this channel"; :meth:`ChannelPolicy.digest` is what the daemons of a cluster
compare.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeVar

from daemon.config.schema import (
    ApprovalsConfig,
    ChannelConfig,
    EndpointConfig,
    ModelConfig,
    RuntimeConfig,
)

__all__ = ["ChannelPolicy", "resolve_policy"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class ChannelPolicy:
    """One channel's effective settings, all resolved.

    ``channel`` is the section's name (``"#ops"``), or ``""`` for the global
    values that a channel without a section gets. ``approvals`` and
    ``model`` are fresh copies: changing them changes no other policy.
    """

    channel: str
    servers: frozenset[str] | None  # None: every [mcp_servers] server
    tools_allow: tuple[str, ...]  # fnmatch globs over "server.tool"; empty: every tool
    tools_deny: tuple[str, ...]  # globs; deny wins over allow
    approvals: ApprovalsConfig  # [approvals] with the channel's table's keys over it
    tool_mode: Literal["code", "direct"]
    endpoint: str | None  # a [models.NAME]; None: [model]
    model: ModelConfig  # the endpoint's keys, with this channel's tool_mode and system_prompt
    max_runs_per_sender_per_hour: int | None
    max_tokens_per_sender_per_day: int | None
    max_concurrent_runs: int | None  # a cap within [runtime] max_concurrent_runs; None: none

    def sees(self, server: str, tool: str) -> bool:
        """Whether ``server.tool`` exists in this channel: its server is one of ``servers``,
        an ``allow`` glob (if any) names it, and no ``deny`` glob does.

        A tool without a server is matched by its bare name, as the
        approvals' globs match it. Case-sensitive, as tool names are.
        """
        if self.servers is not None and server not in self.servers:
            return False
        name = f"{server}.{tool}" if server else tool
        if any(fnmatchcase(name, glob) for glob in self.tools_deny):
            return False
        return not self.tools_allow or any(fnmatchcase(name, g) for g in self.tools_allow)

    def idle_globs(self, tools: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The ``tools_allow`` and ``tools_deny`` globs that name none of ``tools`` (the
        daemon's, as ``(server, tool)``), each with its key, in the order written.

        Most often a typo (``"kcp.delete_objcet"``): an allow glob that names nothing
        leaves a tool out, and a deny glob that names nothing refuses nothing, silently.
        """
        names = [f"{server}.{tool}" if server else tool for server, tool in tools]
        return [
            (key, glob)
            for key, globs in (("tools_allow", self.tools_allow), ("tools_deny", self.tools_deny))
            for glob in globs
            if not any(fnmatchcase(name, glob) for name in names)
        ]

    def digest(self) -> str:
        """A stable hash (hex SHA-256) of what the daemons of a cluster must agree on.

        In it: which tools exist (``servers``, ``tools_allow``, ``tools_deny``),
        the approvals, the tool mode, the endpoint's name, the system prompt
        and the per-sender limits, which the cluster counts together. Not in
        it: the endpoint's address, key and sampling (each host may reach the
        same model by its own address, and keys are secrets), nor
        ``max_concurrent_runs``, a cap of one daemon's runs like
        ``[runtime] max_concurrent_runs``. Globs and names are sorted: their
        order means nothing.
        """
        approvals = asdict(self.approvals)
        for key in ("allow", "deny", "approvers"):
            approvals[key] = sorted(approvals[key])
        document: dict[str, Any] = {
            "channel": self.channel,
            "servers": None if self.servers is None else sorted(self.servers),
            "tools_allow": sorted(self.tools_allow),
            "tools_deny": sorted(self.tools_deny),
            "approvals": approvals,
            "tool_mode": self.tool_mode,
            "endpoint": self.endpoint,
            "system_prompt": self.model.system_prompt,
            "max_runs_per_sender_per_hour": self.max_runs_per_sender_per_hour,
            "max_tokens_per_sender_per_day": self.max_tokens_per_sender_per_day,
        }
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode("ascii")).hexdigest()


def resolve_policy(
    channel: str,
    section: ChannelConfig | None,
    *,
    model: ModelConfig,
    models: Mapping[str, EndpointConfig],
    approvals: ApprovalsConfig,
    runtime: RuntimeConfig,
) -> ChannelPolicy:
    """The policy of ``channel`` from its ``section`` (None: the global values, as ``""``).

    ``section.endpoint`` must name one of ``models`` (the loader checks it at
    start, :mod:`daemon.config.checks`); a ``KeyError`` here is a config built
    in code with a dangling name.
    """
    if section is None:
        channel, section = "", ChannelConfig()
    tool_mode = section.tool_mode or model.tool_mode
    system_prompt = _either(section.system_prompt, model.system_prompt)
    endpoint: EndpointConfig = model if section.endpoint is None else models[section.endpoint]
    return ChannelPolicy(
        channel=channel,
        servers=None if section.servers is None else frozenset(section.servers),
        tools_allow=tuple(section.tools_allow or ()),
        tools_deny=tuple(section.tools_deny or ()),
        approvals=section.approvals.over(approvals),
        tool_mode=tool_mode,
        endpoint=section.endpoint,
        model=endpoint.as_model(
            tool_mode=tool_mode, system_prompt=system_prompt, local_max_rss=model.local_max_rss
        ),
        max_runs_per_sender_per_hour=_either(
            section.max_runs_per_sender_per_hour, runtime.max_runs_per_sender_per_hour
        ),
        max_tokens_per_sender_per_day=_either(
            section.max_tokens_per_sender_per_day, runtime.max_tokens_per_sender_per_day
        ),
        max_concurrent_runs=section.max_concurrent_runs,
    )


def _either(own: _T | None, inherited: _T | None) -> _T | None:
    """The channel's own value, or the inherited one where it sets none."""
    return inherited if own is None else own
