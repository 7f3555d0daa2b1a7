"""The runtime's words for ``!tools`` (issue 29): a channel's tools and its approvals mode.

Pure: the tools and the mode come from the daemon's lanes (``daemon.lanes``);
this only says them, one line per tool.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.tools import ToolDefinition

__all__ = ["SUMMARY_CHARS", "tools_reply"]

SUMMARY_CHARS = 120
"""A tool's one-line summary is cut to this many characters."""

_MODES = {
    "ask": "a call that can change something waits for a person's approval",
    "allow": "every call runs without asking",
    "deny": "a call that can change something is refused",
}


def summary(description: str) -> str:
    """The first line of a tool's description, at most :data:`SUMMARY_CHARS` long."""
    line = next((line.strip() for line in description.splitlines() if line.strip()), "")
    if len(line) > SUMMARY_CHARS:
        line = line[: SUMMARY_CHARS - 1].rstrip() + "…"
    return line or "(no description)"


def tools_reply(
    channel: str,
    tools: Sequence[ToolDefinition],
    approvals_mode: str,
    not_started: Sequence[str] = (),
) -> str:
    """``!tools``' answer: ``server.tool: summary`` for each of the channel's tools, in the
    order they are offered, and the channel's approvals mode; then the channel's servers
    that have not started (yet), whose tools are missing until they do."""
    mode = f"approvals: {approvals_mode} ({_MODES.get(approvals_mode, approvals_mode)})"
    if not tools:
        lines = [f"No tools in {channel}; {mode}."]
    else:
        lines = [f"Tools in {channel} ({len(tools)}); {mode}:"]
        lines += [f"- {tool.qualified_name}: {summary(tool.description)}" for tool in tools]
    if not_started:
        servers = ", ".join(not_started)
        lines.append(
            f"Not started (retried in the background; their tools join once up): {servers}."
        )
    return "\n".join(lines)
