"""The startup phase (``--startup``): as ``asyncai up`` runs (the bundled http_get
server only, code mode, the configured temperature, the prompt cache warmed before
"asyncai is up"), the seconds to each reply. Arithmetic, so that the time is the
model's and the sandbox's, not a tool's.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable

from bench.questions.servers import SIMPLE_SERVER
from daemon.cli.up import BANNER_QUESTION
from daemon.code_mode import CodeModeToolExecutor
from daemon.config import Config, ModelConfig
from daemon.lanes import code_mode_limits
from daemon.mcp.executor import McpToolExecutor
from daemon.runtime.runs import Prompt, RunRequest

#: The questions: (what, prompt, a pattern of the right answer).
STARTUP = (
    ("first reply", "What is 12 times 34?", r"(?<![\d.,])408(?![\d])"),
    ("the banner's example", BANNER_QUESTION, r"(?<![\d.,])76,?127(?![\d])"),
    ("a later reply", "What is 2 to the power of 20?", r"(?<![\d.,])1,?048,?576(?![\d])"),
)


async def startup(
    model: ModelConfig, report: Callable[[str], None]
) -> list[tuple[str, float, bool | None, str]]:
    """The startup phase (:data:`STARTUP`): rows of (what, seconds, right, reply)."""
    from daemon.model import OpenAiCompatibleBackend

    inner = McpToolExecutor({"simple": SIMPLE_SERVER})
    executor = CodeModeToolExecutor(inner, code_mode_limits(Config(model=model)))
    config = dataclasses.replace(model, tool_mode="code", temperature=None)
    backend = OpenAiCompatibleBackend(config, executor, max_run_seconds=1800.0)
    rows: list[tuple[str, float, bool | None, str]] = []
    try:
        started = time.monotonic()
        await backend.warm_up()
        rows.append(
            ("prompt-cache warm-up (before `asyncai is up`)", time.monotonic() - started, None, "")
        )
        for label, text, pattern in STARTUP:
            request = RunRequest(
                run_id=uuid.uuid4().hex,
                channel="#bench",
                thread_id=f"bench-startup-{uuid.uuid4().hex[:6]}",
                history=[],
                prompts=[Prompt(id=uuid.uuid4().hex, sender="bench", text=text)],
            )
            started = time.monotonic()
            result = await backend.run(request)
            seconds = time.monotonic() - started
            ok = result.status == "done" and re.search(pattern, result.reply) is not None
            rows.append((f"{label}: {text}", seconds, ok, result.reply))
            report(
                f"[startup] {'ok  ' if ok else 'FAIL'} {label:22} {seconds:6.1f}s  "
                + " ".join(result.reply.split())[:90]
            )
    finally:
        await backend.aclose()
        await executor.aclose()
    return rows


def startup_table(rows: list[tuple[str, float, bool | None, str]]) -> str:
    """The startup phase as a Markdown table."""
    lines = ["| step | seconds | right |", "|---|---|---|"]
    for what, seconds, ok, _ in rows:
        right = "–" if ok is None else ("yes" if ok else "**no**")
        lines.append(f"| {what} | {seconds:.1f} | {right} |")
    return "\n".join(lines)
