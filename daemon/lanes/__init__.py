"""What the configuration builds to answer a channel: its tools' executors and its lane.

``executors`` builds the tool executors a config asks for (the MCP servers
over stdio, in code mode unless ``direct``; a channel's view of them,
``ChannelTools``); ``lane`` gives each channel its lane over them (its tools,
tool mode, endpoint, system prompt and model profile; issue 29). One concept:
how a config becomes what runs a channel's prompts.

May import every part below the daemon (``daemon.config``, ``daemon.code_mode``,
``daemon.mcp``, ``daemon.model``, ``daemon.runtime`` and the shared modules);
nothing imports it but ``daemon.app``, ``daemon.cli`` and the benchmarks.
"""

from daemon.lanes.executors import (
    ChannelTools,
    build_mcp_executor,
    build_tool_executor,
    channel_tools,
    code_mode_limits,
)
from daemon.lanes.lane import Lane, Lanes, LaneTools, lane_config

__all__ = [
    "ChannelTools",
    "Lane",
    "LaneTools",
    "Lanes",
    "build_mcp_executor",
    "build_tool_executor",
    "channel_tools",
    "code_mode_limits",
    "lane_config",
]
