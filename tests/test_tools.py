"""The tool interface: the mutating rule and executor defaults."""

from daemon.tools import BaseToolExecutor, ThreadKey, ToolDefinition


def _tool(read_only, destructive):
    return ToolDefinition("t", "", {"type": "object"}, None, read_only, destructive)


def test_unannotated_tool_counts_as_mutating():
    """The MCP defaults: no annotations means the tool may change things."""
    assert _tool(None, None).mutating


def test_only_explicit_read_only_non_destructive_is_not_mutating():
    """read_only=True and destructive not True is the one non-mutating case."""
    assert not _tool(True, None).mutating
    assert not _tool(True, False).mutating
    assert _tool(True, True).mutating
    assert _tool(False, False).mutating


async def test_base_executor_defaults():
    """An executor without scopes or notes returns None for both."""
    ex = BaseToolExecutor()
    await ex.start()
    assert ex.thread_scope(ThreadKey("#t", "t")) is None
    assert ex.context_note(ThreadKey("#t", "t")) is None
    await ex.aclose()
