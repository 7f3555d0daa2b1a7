"""The run_code description: what it tells the model, and that its bytes never change."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.catalog.description import run_code_description
from daemon.limits import CodeModeLimits
from daemon.tools import ToolDefinition

DEFINITIONS = [
    ToolDefinition(
        "http_get",
        "Fetch a URL.",
        {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        {
            "type": "object",
            "properties": {
                "status": {"type": "integer"},
                "content_type": {"type": "string"},
                "body": {"type": "string"},
            },
        },
        read_only=True,
    ),
    ToolDefinition(
        "get_logs",
        "Logs of a pod.",
        {"type": "object", "properties": {"pod": {"type": "string"}}, "required": ["pod"]},
    ),
]

# Builds the description in a fresh interpreter: hash randomization and
# import order differ from this process.
_SCRIPT = """
import hashlib, sys
sys.path.insert(0, {root!r})
from tests.test_description import DEFINITIONS
from daemon.code_mode.catalog import Catalog
from daemon.code_mode.catalog.description import run_code_description
print(hashlib.sha256(run_code_description(Catalog(DEFINITIONS)).encode()).hexdigest())
"""


def test_byte_identical_across_processes() -> None:
    """Two fresh interpreters (different hash seeds) produce the same bytes as this one."""
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parents[1])
    here = hashlib.sha256(run_code_description(Catalog(DEFINITIONS)).encode()).hexdigest()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(root=root)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert out.stdout.strip() == here


def test_same_catalog_same_text() -> None:
    """Building the catalog twice gives the same description."""
    assert run_code_description(Catalog(DEFINITIONS)) == run_code_description(
        Catalog(list(DEFINITIONS))
    )


def test_guidance_present() -> None:
    """The A8/A10/A11 guidance, the return contract, the sandbox rules and the helpers are there."""
    text = run_code_description(Catalog(DEFINITIONS))
    for phrase in [
        "Plan first, then write ONE complete snippet that fetches, filters and returns the answer",
        "Inspect a shape only after a failure",
        "Variables, functions and imports persist across run_code calls for the whole conversation",
        "Earlier tool results are NOT in your message history",
        "`restart: true` clears them all first",
        "-> Any` declares no result shape: inspect a small sample",
        "(no output; the last expression was None)",
        "Hint:",
        "Results over 20,000 characters are refused",
        "100 function calls",
        "`asyncio`, `json` and `re` are already imported",
        "class inheritance",
        "`json.dumps(default=...)` (use to_json)",
        "do not rebind these names: items, names, dig, count_by, to_json",
        "dig(obj, *path, default=None)",
        "count_by(xs, *path)",
        "to_json(x, indent=None)",
    ]:
        assert phrase in text, phrase


def test_catalog_is_the_last_part() -> None:
    """The stubs close the description."""
    catalog = Catalog(DEFINITIONS)
    text = run_code_description(catalog)
    assert text.endswith("is not sent):\n\n" + catalog.render())
    assert "async def http_get(*, url: str) -> dict[str, Any]:" in text
    assert 'Returns: {"status": int, "content_type": str, "body": str}' in text
    assert "async def get_logs(*, pod: str) -> Any:" in text


def test_limits_are_parameters() -> None:
    """The limits it quotes come from the arguments."""
    limits = CodeModeLimits(max_result_chars=5000, max_nested_calls=7)
    text = run_code_description(Catalog([]), limits)
    assert "Results over 5,000 characters" in text
    assert "7 function calls" in text
    assert text.endswith("(none: no tools are connected)")
