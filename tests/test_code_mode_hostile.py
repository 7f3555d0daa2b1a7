"""A hostile snippet corpus: escapes, bombs, deep nesting, surrogates, huge outputs.

Each snippet runs in one thread's REPL on the real Monty pool (small limits,
so the bombs end fast). Whatever it tries, ``run_code`` returns a result the
model can read (never raises), and the next snippet in the same thread works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.tools import ThreadKey, ToolCallOutput
from tests.fakes.executor import FakeToolExecutor

# every expectation holds on both paths a snippet can take (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("engine_path")

LIMITS = CodeModeLimits(
    max_feed_duration=0.5,
    max_wall=20.0,
    tool_timeout=5.0,
    max_memory=64 * 1024**2,
    max_print_bytes=10_000,
    max_result_chars=5_000,
    max_snippet_bytes=64 * 1024,
)

HOSTILE: dict[str, str] = {
    # escapes
    "open": "open('/etc/passwd').read()",
    "pathlib": "from pathlib import Path\nPath('/etc/hostname').read_text()",
    "listdir": "import os\nos.listdir('/')",
    "environ": "import os\nos.environ",
    "getenv": "import os\nos.getenv('HOME')",
    "os.system": "import os\nos.system('id')",
    "subprocess": "import subprocess\nsubprocess.run(['id'])",
    "socket": "import socket\nsocket.socket()",
    "__import__": "__import__('os').system('id')",
    "builtins": "getattr(__builtins__, 'open')('/etc/passwd')",
    "subclasses": "().__class__.__bases__[0].__subclasses__()",
    "globals": "globals()['__builtins__']",
    "eval": "eval('1 + 1')",
    "exec": "exec('import os')",
    "sys.modules": "import sys\nsys.modules",
    "setrecursionlimit": "import sys\nsys.setrecursionlimit(10**6)",
    "exit": "exit()",
    "SystemExit": "raise SystemExit(1)",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "input": "input()",
    "sleep": "await asyncio.sleep(3600)",
    "time.sleep": "import time\ntime.sleep(3600)",
    "reserved": "items = []",
    "private": "_asyncai_json = None",
    # bombs
    "memory": "x = 'a' * (10**10)",
    "memory loop": "x = [0]\nwhile True:\n    x = x + x",
    "cpu": "while True:\n    pass",
    "print bomb": "while True:\n    print('x' * 1000)",
    "print then call": "print('x' * 20_000)\nawait ping()",
    "recursion": "def f(n):\n    return f(n + 1)\nf(0)",
    "many calls": "for i in range(1000):\n    await ping()",
    "unawaited": "ping()",
    # deep nesting, odd values
    "deep value": "x = []\nfor i in range(10000):\n    x = [x]\nx",
    "deep dict": "d = {}\nfor i in range(10000):\n    d = {'a': d}\nd",
    "deep tool result": "await deep()",
    "deep parens": "(" * 5000 + "1" + ")" * 5000,
    "deep source": "x = " + "[" * 1000 + "]" * 1000,
    "long sum": "1" + "+1" * 20_000,
    "huge int": "2 ** 100000",
    "nan": "[float('nan'), float('inf'), -float('inf')]",
    "keys": "{1: 2, (1, 2): 3, None: 4, 1.5: 5, frozenset([1]): 6}",
    "set": "{3, 1, 'a'}",
    # surrogates
    "raw surrogate": "s = '\ud800'\ns",
    "escaped surrogate": "s = '\\ud800'\ns",
    "surrogate tool error": "await bad()",
    "surrogate name": "\udfff = 1",
    "nul": "x = 1\x00",
    # huge outputs and inputs
    "huge str": "'x' * 10**6",
    "huge list": "list(range(10**5))",
    "huge traceback": "raise ValueError('x' * 10**5)",
    "huge snippet": "x = 1\n" + "#" * 100_000,
    "many lines": "x = 1\n" * 10_000,
}


@pytest.fixture
async def executor(monty_pool) -> AsyncIterator[CodeModeToolExecutor]:
    """An executor with small limits over tools a hostile server could offer."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def ping() -> str:
        """pong"""
        return "pong"

    @fake.tool(read_only=True)
    async def deep() -> ToolCallOutput:
        """JSON text nested 5 000 levels deep."""
        return ToolCallOutput("[" * 5000 + "]" * 5000, False)

    @fake.tool(read_only=True)
    async def bad() -> ToolCallOutput:
        """A failing tool whose message holds lone surrogates."""
        return ToolCallOutput("\udcff boom \ud800", True)

    ex = CodeModeToolExecutor(fake, LIMITS, pool=monty_pool)
    yield ex
    await ex.aclose()


@pytest.mark.parametrize("code", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_snippet_gets_a_readable_result_and_the_thread_goes_on(executor, code):
    """The result is text within the limit (an error or a harmless value); the REPL works after."""
    scope = executor.thread_scope(ThreadKey("#t", "t"))
    out = await scope.call_tool("run_code", {"code": code})
    assert isinstance(out.content, str)
    assert out.content
    out.content.encode("utf-8")  # no lone surrogate reaches the model
    assert len(out.content) <= 2 * LIMITS.max_result_chars
    after = await scope.call_tool("run_code", {"code": "ok = 40 + 2\nok"})
    assert (after.content, after.is_error) == ("42", False)
    assert executor.context_note(ThreadKey("#t", "t")) is not None


@pytest.mark.parametrize(
    "code",
    [
        HOSTILE["open"],
        HOSTILE["environ"],
        HOSTILE["__import__"],
        HOSTILE["memory"],
        HOSTILE["cpu"],
        HOSTILE["recursion"],
        HOSTILE["deep value"],
        HOSTILE["huge int"],
        HOSTILE["sleep"],
    ],
)
async def test_an_escape_or_a_bomb_is_an_error(executor, code):
    """Escapes and bombs never succeed quietly: the model sees an error."""
    out = await executor.thread_scope(ThreadKey("#t", "t")).call_tool("run_code", {"code": code})
    assert out.is_error


@pytest.mark.parametrize(
    "raised", ["MemoryError('x')", "TimeoutError('limit exceeded')", "MemoryError()"]
)
async def test_a_snippets_own_limit_error_keeps_its_repl_and_blames_no_cap(executor, raised):
    """A snippet that raises MemoryError or TimeoutError itself gets that error, not the
    heap cap's or the time limit's explanation, and its variables stay: only Monty's own
    breach of a limit spends the session."""
    scope = executor.thread_scope(ThreadKey("#t", "own"))
    await scope.call_tool("run_code", {"code": "kept = 7"})
    out = await scope.call_tool("run_code", {"code": f"raise {raised}"})
    assert out.is_error
    assert "capped" not in out.content
    assert "execution limit" not in out.content
    after = await scope.call_tool("run_code", {"code": "kept"})
    assert (after.content, after.is_error) == ("7", False)


async def test_a_breached_heap_cap_is_blamed_and_resets_the_repl(executor):
    """Monty's own MemoryError: the cap is named, and the spent session's REPL is reset."""
    scope = executor.thread_scope(ThreadKey("#t", "cap"))
    await scope.call_tool("run_code", {"code": "kept = 7"})
    out = await scope.call_tool("run_code", {"code": HOSTILE["memory loop"]})
    assert out.is_error
    assert f"The sandbox heap is capped at {LIMITS.max_memory:,} bytes." in out.content
    after = await scope.call_tool("run_code", {"code": "kept"})
    assert after.is_error
    assert "NameError" in after.content
