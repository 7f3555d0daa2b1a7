"""The look at a snippet's variables as data (issue 27): the sandbox returns records, the
harness renders them as the text the model reads, and the rules read the records."""

from __future__ import annotations

import json
from typing import Any

from daemon.model.harness import key_hint
from daemon.model.harness.look import read_look
from daemon.model.harness.peek import peek_code
from daemon.tools import ThreadKey
from tests.fakes.executor import FakeToolExecutor, code_mode_over

SETUP = (
    "pods = {'kind': 'List', 'items': [{'metadata': {'name': 'web-1'}, 'status': {'phase': "
    "'Pending'}}, {'metadata': {'name': 'web-2'}, 'status': {'phase': 'Running', "
    "'containerStatuses': [{'restartCount': 2}]}}]}\n"
    "inv = {'status': 200, 'body': 'item,stock\\nbolts,120\\nnuts,45'}\n"
    "odd = {1: 'a', \"it's\": {}, 'long': 'x' * 90, 'deep': "
    "{'a': {'b': {'c': {'d': {'e': {'f': {'g': {'h': {'i': 1}}}}}}}}}}"
)
# What the sandbox printed for the same variables when the look was text (before issue 27),
# and the variables note after it: the look binds the same names as it did.
PRINTED = (
    "pods['kind'] == 'List'\n"
    "len(pods['items']) == 2\n"
    "pods['items'][0]['metadata']['name'] == 'web-1'\n"
    "pods['items'][0]['status']['phase'] == 'Pending'\n"
    "inv['status'] == 200\n"
    "inv['body'] is a str of 3 lines (text, not parsed)\n"
    "inv['body'].splitlines()[:3] == ['item,stock', 'bolts,120', 'nuts,45']\n"
    "odd[1] == 'a'\n"
    'odd["it\'s"] == {}\n'
    "odd['long'][:80] == '" + "x" * 80 + "'\n"
    "pods['items']: 1 of 2 items have ['status']['containerStatuses'] (a list)"
)
NOTE = (
    "[run_code variables still in scope: pods: dict[2], inv: dict[2], odd: dict[4], "
    "_peek_paths: function, _peek_find: function, _peek_at: function, _peek_kind: function, "
    "_peek_missing: function, _peek_out: list[0]]"
)


async def test_the_look_renders_as_the_sandbox_printed_it(monty_pool: Any) -> None:
    """The records of a real sandbox render byte for byte as the printed look did (text,
    a long str, keys of other types and quotes, a path too deep to show, the counted
    list), and the REPL's variables note is the same."""
    async with code_mode_over(FakeToolExecutor(), monty_pool) as ex:
        key = ThreadKey("#t", "t")
        scope = ex.thread_scope(key)
        await scope.call_tool("run_code", {"code": SETUP})
        out = await scope.call_tool(
            "run_code", {"code": peek_code(["pods", "inv", "odd"], "containerStatuses")}
        )
        assert not out.is_error, out.content
        look = read_look(json.loads(out.content))
        assert look is not None
        assert look.render() == PRINTED
        assert ex.context_note(key) == NOTE
        # a variable the snippet never set is skipped; nothing at all to show is no look
        out = await scope.call_tool("run_code", {"code": peek_code(["unset"])})
        assert read_look(json.loads(out.content)) is None


async def test_a_value_that_reads_like_a_path_is_a_value(monty_pool: Any) -> None:
    """A str that holds ``['components']`` is a value, not a path to the key: the hint
    says no variable holds it (the text look named a path ending in the value)."""
    async with code_mode_over(FakeToolExecutor(), monty_pool) as ex:
        scope = ex.thread_scope(ThreadKey("#t", "t"))
        await scope.call_tool("run_code", {"code": "r = {'msg': \"no ['components'] here\"}"})
        out = await scope.call_tool("run_code", {"code": peek_code(["r"], "components")})
        look = read_look(json.loads(out.content))
    error = "Traceback\nKeyError: 'components'"
    assert key_hint(error, look) == (
        "Hint: no value your variables hold has a key components (see what they hold above): "
        "do not read it. Use only the keys shown there, or get the data from another function."
    )
