"""The model profile: the one object that holds what differs for a small model (issue 27)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from daemon.config import ModelConfig
from daemon.model import model_profile
from daemon.model.harness import HARNESS_CATALOG_BUDGET, SmallModelProfile
from daemon.model.profiles import DefaultProfile

LOOP = Path(__file__).resolve().parent.parent / "daemon" / "model" / "loop.py"


@pytest.mark.parametrize(
    ("model", "harness", "expected"),
    [
        ("qwen-coder-1.5b", None, SmallModelProfile),  # the embedded model: on by default
        ("gpt-4o", None, DefaultProfile),
        ("gpt-4o", True, SmallModelProfile),  # [model] harness = true, any endpoint
        ("qwen-coder-1.5b", False, DefaultProfile),
    ],
)
def test_the_config_chooses_the_profile(model: str, harness: bool | None, expected: type) -> None:
    """``[model] harness`` chooses the small-model profile, else the embedded model does;
    only the harness asks for its own catalog budget."""
    profile = model_profile(ModelConfig(model=model, harness=harness), model)
    assert type(profile) is expected
    wanted = HARNESS_CATALOG_BUDGET if expected is SmallModelProfile else None
    assert profile.catalog_budget == wanted


def test_the_loop_never_asks_whether_the_harness_is_on() -> None:
    """loop.py names neither the harness nor a small model in its code (docstrings and
    comments aside): it calls the profile it was given."""
    tree = ast.parse(LOOP.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
    }
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if "harness" in n.lower() or "small" in n.lower()}
    assert not {m for m in modules if "harness" in m or "small" in m}
