"""How the small-model harness reaches the code-mode catalog: through the executor
the backend is handed (``CatalogSource``), never by parsing the run_code description.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.code_mode.catalog.catalog import CatalogSource
from daemon.config import ModelConfig
from daemon.model import OpenAiCompatibleBackend
from daemon.model.harness import (
    HARNESS_RULES,
    HARNESS_SYSTEM_PROMPT,
    WORKED_EXAMPLE,
    catalog_signatures,
    compact_description,
    system_prompt,
)
from daemon.runtime.note import RestartNoteExecutor
from daemon.runtime.runs import Prompt, RunRequest
from tests.fakes.executor import FakeToolExecutor, code_mode_over
from tests.fakes.fake_openai import FakeOpenAI


def inner_tools() -> FakeToolExecutor:
    """Two read-only tools, one with an optional argument."""
    fake = FakeToolExecutor()

    @fake.tool(read_only=True)
    async def list_pods(*, namespace: str, label: str | None = None) -> list:
        """List the pods of a namespace."""
        return []

    @fake.tool(read_only=True)
    async def get_pod(*, namespace: str, name: str) -> dict:
        """Get one pod."""
        return {}

    return fake


@pytest.fixture
async def noted(monty_pool: Any) -> AsyncIterator[RestartNoteExecutor]:
    """Code mode over the fake tools, wrapped as the daemon wraps it."""
    async with code_mode_over(inner_tools(), monty_pool) as ex:
        yield RestartNoteExecutor(ex)


def test_code_mode_and_its_wrapper_show_the_catalog() -> None:
    """Code mode shows its catalog once it listed its tools; the restart-note wrapper
    shows the inner one; an executor that is not code mode has none."""
    ex = CodeModeToolExecutor(inner_tools())
    assert isinstance(ex, CatalogSource)
    assert ex.catalog is None  # not listed yet
    ex.definitions()
    assert ex.catalog is not None
    assert list(ex.catalog.entries) == ["list_pods", "get_pod"]
    assert RestartNoteExecutor(ex).catalog is ex.catalog
    assert not isinstance(inner_tools(), CatalogSource)
    assert RestartNoteExecutor(inner_tools()).catalog is None


def test_compact_description_is_the_description_from_the_helpers_on() -> None:
    """The harness's catalog text is byte for byte the tail of run_code's description
    (what it used to cut out of it), after the harness's rules, less parse_records."""
    ex = CodeModeToolExecutor(inner_tools())
    (definition,) = ex.definitions()
    assert ex.catalog is not None
    tail = definition.description[definition.description.index("Helpers, ") :].strip()
    # less the one helper the small model's list leaves out (prompts.SMALL_MODEL_HELPERS)
    tail = "\n".join(
        line for line in tail.splitlines() if not line.startswith("- parse_records(")
    ).replace(", parse_records)", ")")
    assert compact_description(ex.catalog) == f"{HARNESS_RULES}\n\n{tail}"
    assert catalog_signatures(ex.catalog) == {
        "list_pods": (frozenset({"namespace", "label"}), frozenset({"namespace"})),
        "get_pod": (frozenset({"namespace", "name"}), frozenset({"namespace", "name"})),
    }


async def test_the_backend_builds_the_harness_prompt_from_the_wrapped_catalog(noted) -> None:
    """Handed the daemon's wrapper, the backend's small-model system message is built
    from the code-mode catalog."""
    request = RunRequest("R1", "#ops", "T1", [], [Prompt("m1", "alice", "hi")])
    async with FakeOpenAI(["Hello!"]) as fake:
        config = ModelConfig(base_url=fake.base_url, api_key="k", model="m", harness=True)
        backend = OpenAiCompatibleBackend(config, noted)
        try:
            result = await backend.run(request)
        finally:
            await backend.aclose()
    assert result.reply == "Hello!"
    assert noted.catalog is not None
    expected = system_prompt(
        HARNESS_SYSTEM_PROMPT, compact_description(noted.catalog), WORKED_EXAMPLE
    )
    assert fake.requests[0]["messages"][0]["content"] == expected
    assert "async def get_pod(*, namespace: str, name: str)" in expected
