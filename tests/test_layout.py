"""The house rules of the layout (issue 12, DESIGN.md "Layout"), checked on the source.

- no import cycles between modules, counting every import: top-level, inside
  functions and under ``TYPE_CHECKING``;
- ``channels``, ``sessions`` and ``servers`` import nothing of ``daemon``, and
  ``servers`` nothing of the rest;
- no module over 500 lines unless its first lines say why it must be one piece;
- ``daemon/`` keeps at most ten modules at its top level;
- every package's ``__init__`` has a docstring and an ``__all__`` of real names.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("daemon", "channels", "sessions", "servers")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Every module of the four packages by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule when there is one
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in MODULES else module)
    return {t for t in targets if t in MODULES and t != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle() -> list[str] | None:
    """One import cycle, as the list of modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_checker_sees_the_imports_it_must() -> None:
    """The graph is not empty by mistake: known edges are in it."""
    assert "daemon.tools" in GRAPH["daemon.code_mode.executor"]
    assert "daemon.errors" in GRAPH["daemon.tools"]
    assert "sessions.store" in GRAPH["daemon.app"]


def test_no_import_cycles_not_even_type_only_ones() -> None:
    """Following every import of every module never leads back to where it started."""
    assert _cycle() is None, " -> ".join(_cycle() or [])


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("channels", ("daemon", "sessions", "servers")),
        ("sessions", ("daemon", "channels", "servers")),
        ("servers", ("daemon", "channels", "sessions")),
    ],
)
def test_the_standalone_packages_import_nothing_of_the_others(
    package: str, forbidden: tuple[str, ...]
) -> None:
    """channels, sessions and servers stand alone; only daemon/ imports them."""
    wrong = {
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name == package or name.startswith(package + ".")
        for target in targets
        if target.split(".")[0] in forbidden
    }
    assert not wrong


# What each part of daemon/ may import besides itself: what its package
# docstring says. ``daemon.X`` is a subpackage or a top-level module.
SHARED = {
    "daemon.errors",
    "daemon.limits",
    "daemon.tools",
    "daemon.backoff",
    "daemon.logging",
    "daemon.crashpoints",
}
CODE_MODE_ROOMS = ("daemon.code_mode.catalog", "daemon.code_mode.sandbox", "daemon.code_mode.repl")
MAY_IMPORT = {
    "daemon.errors": set(),
    "daemon.tools": {"daemon.errors"},
    "daemon.limits": set(),
    "daemon.backoff": set(),
    "daemon.logging": set(),
    "daemon.crashpoints": set(),
    "daemon.local_model": {"daemon.errors"},
    "daemon.code_mode": SHARED | set(CODE_MODE_ROOMS),
    "daemon.code_mode.catalog": SHARED | {"daemon.code_mode"},
    "daemon.code_mode.sandbox": SHARED | {"daemon.code_mode", "daemon.code_mode.catalog"},
    "daemon.code_mode.repl": SHARED | {"daemon.code_mode", "daemon.code_mode.sandbox"},
    "daemon.mcp": SHARED,
    "daemon.config": SHARED | {"daemon.mcp"},
    "daemon.runtime": SHARED
    | {
        "daemon.code_mode",
        "daemon.code_mode.catalog",
        "daemon.code_mode.repl",
        "daemon.approvals",
        "daemon.config",
        "channels",
        "sessions",
    },
    "daemon.approvals": SHARED | {"daemon.config"},
    "daemon.model": SHARED
    | {
        "daemon.code_mode",
        "daemon.code_mode.catalog",
        "daemon.code_mode.sandbox",
        "daemon.config",
        "daemon.local_model",
        "daemon.runtime",
        "sessions",
    },
    "daemon.cluster": SHARED | {"daemon.config", "daemon.runtime", "sessions", "channels"},
}


def _part(module: str) -> str:
    """The part of the house ``module`` belongs to: a room of code mode counts as its own."""
    parts = module.split(".")
    if ".".join(parts[:3]) in CODE_MODE_ROOMS:
        return ".".join(parts[:3])
    return ".".join(parts[:2]) if parts[0] == "daemon" else parts[0]


@pytest.mark.parametrize("part", sorted(MAY_IMPORT))
def test_each_part_of_daemon_imports_only_what_its_docstring_allows(part: str) -> None:
    """The layering: code mode and MCP know only the interfaces, the model no CLI, ..."""
    used = {
        _part(target)
        for name, targets in GRAPH.items()
        if _part(name) == part
        for target in targets
        if _part(target) != part
    }
    assert used <= MAY_IMPORT[part], sorted(used - MAY_IMPORT[part])


def test_no_module_over_500_lines_without_a_reason_at_its_top() -> None:
    """A long module says in its first lines why it must be one piece."""
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
        and "one piece" not in "\n".join(path.read_text().splitlines()[:15])
    }
    assert not long


def test_daemon_has_at_most_ten_top_level_modules() -> None:
    """daemon/ is cut into subpackages; its top level keeps the few shared modules."""
    top = sorted(p.name for p in (ROOT / "daemon").glob("*.py"))
    assert len(top) <= 10, top


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_it_holds_and_exports_real_names(name: str) -> None:
    """Each ``__init__`` has a docstring and an ``__all__`` whose names all exist."""
    module = importlib.import_module(name)
    assert (module.__doc__ or "").strip(), f"{name} has no docstring"
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert [n for n in exported if not hasattr(module, n)] == []
