"""Each channel's lane: the tools, the executor and the model that answer its prompts (issue 29).

A channel's :class:`~daemon.config.ChannelPolicy` (``Config.policy(channel)``)
chooses, for that channel only:

- its tools: a :class:`~daemon.lanes.ChannelTools` view of the daemon's one
  MCP executor, offering what the policy ``sees`` (the servers start once);
- its tool mode (code mode over the view, or the view itself, audited);
- its endpoint (``[models.NAME]``, else ``[model]``) and system prompt, and with
  the endpoint the model profile: the small-model harness and code mode's
  catalog budget follow the endpoint the channel uses
  (:func:`~daemon.lanes.code_mode_limits` reads the lane's ``[model]``).

Channels whose policies agree on all of these share one lane and its backend
(one model client). Lanes that differ only in their endpoint or system prompt
share an executor too when their tools, tool mode and catalog budget agree: one
Monty pool and one LRU of REPL scopes (a thread's REPL is still its own: scopes
are keyed by channel and thread). The channels without a section share the
global lane, so a configuration without ``[channel."#name"]`` sections runs as
before, on one executor and one backend. A lane is built the first time a channel needs it
(the daemon builds those of its channels before ``READY=1``).

:class:`Lanes` also routes what the daemon asks of "the executor" per thread to
the thread's lane: a run's REPL restored and stored, ``!reset``, a cluster's
takeover (:class:`~daemon.tools.PersistentScopes`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from daemon.approvals import ApprovalGate
from daemon.code_mode import CodeModeToolExecutor
from daemon.code_mode.catalog import CatalogSource
from daemon.config import ChannelPolicy, Config, ModelConfig
from daemon.lanes.executors import code_mode_limits
from daemon.model import ModelSlots, OpenAiCompatibleBackend
from daemon.runtime import RestartNoteExecutor, ToolsOffered
from daemon.tools import PersistentScopes, ThreadKey, ToolDefinition, ToolExecutor

__all__ = ["Lane", "LaneTools", "Lanes", "lane_config"]

LaneTools = Callable[[Config, ChannelPolicy], tuple[ToolExecutor, ToolExecutor | None]]
"""``build(config, policy)``: a lane's executor, and the tools it offers (its view of the
MCP executor; None when every channel uses one executor handed to the daemon).
``config`` is the daemon's with the lane's endpoint as ``[model]``."""


def lane_config(config: Config, policy: ChannelPolicy) -> Config:
    """The daemon's configuration with the channel's endpoint, tool mode and system prompt
    as its ``[model]``: what the lane's executor and backend are built from."""
    return dataclasses.replace(config, model=policy.model)


def _model_key(model: ModelConfig) -> tuple[Any, ...]:
    # every field, the API key included (its repr leaves it out)
    return tuple(getattr(model, f.name) for f in dataclasses.fields(model))


def _tools_key(policy: ChannelPolicy) -> tuple[Any, ...]:
    return (policy.servers, policy.tools_allow, policy.tools_deny)


def _executor_key(policy: ChannelPolicy, config: Config) -> tuple[Any, ...]:
    # what the executor is built from: the tools, the mode, and the catalog budget the
    # endpoint's profile asks for (the rest of [code_mode] is the daemon's)
    budget = code_mode_limits(config).catalog_budget
    return (*_tools_key(policy), policy.model.tool_mode, budget)


@dataclass
class Lane:
    """One lane: what answers the prompts of the channels whose policies share it."""

    policy: ChannelPolicy  # the first channel's that built it (the others' agree on the lane)
    executor: ToolExecutor  # code mode over the view, or the view audited
    tools: ToolExecutor | None  # the view (None: the daemon was handed its executor)
    noted: RestartNoteExecutor  # the executor, with the restart note
    backend: OpenAiCompatibleBackend

    @functools.cached_property
    def persistent(self) -> PersistentScopes | None:
        """The executor when its thread REPLs are stored (code mode), else None (asked
        once: an isinstance of a runtime-checkable Protocol walks its members)."""
        return self.executor if isinstance(self.executor, PersistentScopes) else None

    def offered(self) -> list[ToolDefinition]:
        """The tools this lane's channels offer (valid once started): the view's, else
        those behind code mode's ``run_code``, else the executor's own."""
        if self.tools is not None:
            return self.tools.definitions()
        if isinstance(self.executor, CatalogSource) and self.executor.catalog is not None:
            return [entry.definition for entry in self.executor.catalog.entries.values()]
        return self.executor.definitions()


class Lanes:
    """The lanes of one daemon, by channel; built on first use, closed by the daemon."""

    def __init__(self, config: Config, build: LaneTools, *, gate: ApprovalGate | None):
        self._config = config
        self._build = build
        self._gate = gate
        self._by_key: dict[tuple[Any, ...], Lane] = {}
        self._by_channel: dict[str, Lane] = {}
        self._executors: dict[tuple[Any, ...], tuple[ToolExecutor, ToolExecutor | None]] = {}
        self._slots = ModelSlots()  # one queue per model endpoint, whichever lanes ask it

    def lane(self, channel: str) -> Lane:
        """The lane of ``channel`` (built now if no channel needed it yet)."""
        lane = self._by_channel.get(channel)
        if lane is not None:
            return lane
        policy = self._config.policy(channel)
        key = (*_tools_key(policy), _model_key(policy.model))
        lane = self._by_key.get(key)
        if lane is None:
            config = lane_config(self._config, policy)
            built = self._executors.get(shared := _executor_key(policy, config))
            if built is None:
                built = self._executors[shared] = self._build(config, policy)
            executor, tools = built
            noted = RestartNoteExecutor(executor)
            backend = OpenAiCompatibleBackend(config, noted, gate=self._gate, slots=self._slots)
            lane = self._by_key[key] = Lane(policy, executor, tools, noted, backend)
        self._by_channel[channel] = lane
        return lane

    @property
    def lanes(self) -> list[Lane]:
        """Every lane built so far, in the order they were built."""
        return list(self._by_key.values())

    @property
    def executors(self) -> list[ToolExecutor]:
        """Every lane's executor, each once (lanes may share one), in the order built."""
        return [executor for executor, _ in self._executors.values()]

    @property
    def built(self) -> list[ToolExecutor]:
        """The executors built here for lanes (not one handed to the daemon): what the
        daemon closes before the executor behind them."""
        return [executor for executor, tools in self._executors.values() if tools is not None]

    async def start(self, channels: Iterable[str]) -> None:
        """Build the lanes of ``channels`` and start their executors (the servers and the
        pools: a broken setup fails before ``READY=1``)."""
        for channel in channels:
            self.lane(channel)
        for executor in self.executors:
            await executor.start()

    async def warm_up(self, base_url: str) -> None:
        """Warm the lanes' models served at ``base_url`` (the embedded local model's), best
        effort (``OpenAiCompatibleBackend.warm_up``); a remote endpoint is not asked."""
        for lane in self.lanes:
            if lane.backend.params.base_url == base_url:
                await lane.backend.warm_up()

    @property
    def live_scopes(self) -> int:
        """The REPL scopes live in every lane (systemd's STATUS= line)."""
        return sum(getattr(executor, "live_scopes", 0) for executor in self.executors)

    def scope_variables(self, channel: str, thread_id: str) -> list[tuple[str, str, str]] | None:
        """The variables of a thread's live REPL, as its variables note's probe described
        them (the console's REPL page); None when its lane has no REPL of it live here."""
        executor = self.lane(channel).executor
        if not isinstance(executor, CodeModeToolExecutor):
            return None
        return executor.scope_variables(ThreadKey(channel, thread_id))

    @property
    def persistent(self) -> bool:
        """Whether some lane stores its thread REPLs (``!reset`` has something to reset)."""
        return any(isinstance(executor, PersistentScopes) for executor in self.executors)

    async def offer(self, channel: str) -> ToolsOffered:
        """``!tools``: the tools ``channel`` offers, its approvals mode, and its servers that
        have not started (yet: they are retried, and their tools join once up)."""
        lane = self.lane(channel)
        await lane.executor.start()
        policy = self._config.policy(channel)
        failed = getattr(lane.tools or lane.executor, "failed_servers", {}) or {}
        servers = policy.servers
        missing = [name for name in failed if servers is None or name in servers]
        return ToolsOffered(lane.offered(), policy.approvals.mode, missing)

    # -- PersistentScopes, each thread in its channel's lane --------------------------------

    async def restore_scope(self, thread: ThreadKey, *, new: bool = False) -> None:
        """The thread's lane's :meth:`~daemon.tools.PersistentScopes.restore_scope`."""
        if (scopes := self.lane(thread.channel).persistent) is not None:
            await scopes.restore_scope(thread, new=new)

    async def checkpoint(self, thread: ThreadKey) -> None:
        """The thread's lane's :meth:`~daemon.tools.PersistentScopes.checkpoint`."""
        if (scopes := self.lane(thread.channel).persistent) is not None:
            await scopes.checkpoint(thread)

    async def checkpoint_all(self) -> None:
        """Every lane's :meth:`~daemon.tools.PersistentScopes.checkpoint_all`."""
        for executor in self.executors:
            if isinstance(executor, PersistentScopes):
                await executor.checkpoint_all()

    async def forget(self, thread: ThreadKey) -> None:
        """The thread's lane's :meth:`~daemon.tools.PersistentScopes.forget`."""
        if (scopes := self.lane(thread.channel).persistent) is not None:
            await scopes.forget(thread)

    async def reset(self, thread: ThreadKey) -> bool:
        """The thread's lane's :meth:`~daemon.tools.PersistentScopes.reset` (``!reset``);
        False when its channel has no REPL (direct mode)."""
        if (scopes := self.lane(thread.channel).persistent) is None:
            return False
        await scopes.reset(thread)
        return True
