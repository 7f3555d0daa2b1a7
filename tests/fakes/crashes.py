"""What the crash-point suites share (issue 26 §6): the scripted model, its snippets,
the effects file and the database check.

tests/test_crash_points.py kills one daemon at each durable step and restarts it;
tests/test_crash_points_cluster.py kills the holder of a thread on NATS and lets the
other daemon take over. Both run P0, P1, P2 in one thread against this model.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.fakes.fake_openai import Reply, Step, ToolCalls
from tests.test_daemon import user_text

# "count" makes a mutating call, so a run cut off after it started is not run again;
# "tally" makes none, so it is run again unless its reply was committed. Direct mode
# has no REPL: "count" is the model's own append_line call, anything else a plain answer.
TALLY = """
try:
    x += 1
except NameError:
    x = 1
x
"""
COUNT = TALLY.replace("\nx\n", "\nawait append_line(path={path!r}, line={line!r})\nx\n")


def scripted_model(effects: Path, mode: str) -> Callable[[dict], Step]:
    """The scripted model: "count" → the counting call, "tally" → x += 1, "show" → x,
    a tool's result → its text."""

    def step(body: dict) -> Step:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(f"result: {last['content']}")
        text = user_text(body).split("\n", 1)[0].strip()
        if mode == "direct":
            if text.startswith("count"):
                return ToolCalls(("append_line", {"path": str(effects), "line": text}))
            return Reply("result: no tools")
        if text.startswith("count"):
            return ToolCalls(("run_code", {"code": COUNT.format(path=str(effects), line=text)}))
        if text.startswith("tally"):
            return ToolCalls(("run_code", {"code": TALLY}))
        return ToolCalls(("run_code", {"code": "x"}))

    return step


def effect_lines(effects: Path) -> list[str]:
    """The lines the counting calls appended so far."""
    return effects.read_text().splitlines() if effects.exists() else []


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of a daemon's database: "ok" when intact."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
