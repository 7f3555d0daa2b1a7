"""The house rules of the layout (issue 12, DESIGN.md "Layout"), checked on the source.

- no import cycles between modules, counting every import: top-level, inside
  functions and under ``TYPE_CHECKING``;
- ``channels``, ``sessions`` and ``servers`` import nothing of ``daemon``, and
  ``servers`` nothing of the rest;
- each module's docstring states its one job: its summary (first paragraph) is
  a sentence;
- a module over 800 lines says in its first lines why it is one piece (a
  number does not decide the cuts, issue 27: a coherent module may run long);
- no function of daemon/, channels/ or sessions/ takes more than six
  positional parameters (keyword-only ones are free);
- a module that is not a package's face hands on in ``__all__`` only names it
  defines: no re-export shims;
- ``daemon/`` keeps at most ten modules at its top level;
- every package's ``__init__`` has a docstring and an ``__all__`` of real names;
- no package imports another package's private module (issue 27): from
  outside a package, only the names its ``__init__`` hands on in ``__all__``;
- code mode is three rooms, ``catalog/``, ``sandbox/`` and ``repl/``, each a
  part of its own in the layering.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("daemon", "channels", "sessions", "servers")
LONG_MODULE = 800
MAX_POSITIONAL = 6


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


def _imported(name: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """Each import in ``name``'s source as (module, name taken from it; None: the module itself).

    Relative imports are made absolute; ``from pkg import sub`` takes the
    submodule ``pkg.sub`` itself when there is one.
    """
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield (sub, None) if sub in MODULES else (module, alias.name)


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports anywhere in its source."""
    targets = {module for module, _ in _imported(name, path)}
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
    assert "daemon.approvals" in GRAPH["daemon.tools"]
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


PACKAGES_BY_NAME = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _handed_on(package: str) -> dict[str, set[str | None]]:
    """What ``package``'s ``__init__`` hands on in ``__all__``, by the module it comes from.

    ``{"pkg.mod": {"Name", ...}}``; ``None`` in a set: the module itself is
    handed on (``from pkg import mod`` with ``"mod"`` in ``__all__``).
    """
    path = MODULES[package]
    exported: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            exported = set(ast.literal_eval(node.value))  # type: ignore[union-attr]
    handed: dict[str, set[str | None]] = {}
    for module, taken in _imported(package, path):
        shown = module.rpartition(".")[2] if taken is None else taken
        if shown in exported:
            handed.setdefault(module, set()).add(taken)
    return handed


HANDED_ON = {package: _handed_on(package) for package in PACKAGES_BY_NAME}


def _private_imports() -> set[str]:
    """Every import of a module that its package does not hand on, from outside that package.

    A module is private to its package when the package's ``__init__`` does
    not hand its names on in ``__all__``; a subpackage is a package with its
    own face. Inside a package (subpackages included) its own modules are
    free to import each other.
    """
    wrong: set[str] = set()
    for name, path in MODULES.items():
        for module, taken in _imported(name, path):
            package = module.rpartition(".")[0]
            if module not in MODULES or module in PACKAGES_BY_NAME:
                continue  # outside the house, or a package's face
            if name == package or name.startswith(package + "."):
                continue  # a package's own modules
            if taken not in HANDED_ON.get(package, {}).get(module, set()):
                wrong.add(f"{name} -> {module}" + (f".{taken}" if taken else ""))
    return wrong


def test_the_private_import_checker_sees_what_it_must() -> None:
    """The checker knows a face when it sees one, and a private module when it sees one."""
    assert "Catalog" in HANDED_ON["daemon.code_mode.catalog"]["daemon.code_mode.catalog.catalog"]
    assert "daemon.code_mode.catalog.shapes" not in HANDED_ON["daemon.code_mode.catalog"]
    assert "Store" in HANDED_ON["sessions"]["sessions.store"]


def test_code_mode_has_its_three_rooms() -> None:
    """code_mode/ is cut into catalog/, sandbox/ and repl/, with the shared modules on top."""
    rooms = {p.parent.name for p in (ROOT / "daemon" / "code_mode").glob("*/__init__.py")}
    assert rooms == {"catalog", "sandbox", "repl"}


def test_no_package_imports_another_packages_private_module() -> None:
    """Outsiders take only what a package's ``__init__`` hands on in ``__all__``.

    Every module of the house is checked: daemon/, channels/, sessions/ and servers/.
    """
    assert sorted(_private_imports()) == []


# What each part of daemon/ may import besides itself: what its package
# docstring says. ``daemon.X`` is a subpackage or a top-level module.
SHARED = {
    "daemon.approvals",
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
    "daemon.tools": {"daemon.approvals"},
    "daemon.limits": set(),
    "daemon.backoff": set(),
    "daemon.logging": set(),
    "daemon.crashpoints": set(),
    # an ASGI app on the daemon's loop: the console's and the metrics' one way to serve
    "daemon.asgi": set(),
    "daemon.local_model": {"daemon.errors"},
    "daemon.code_mode": SHARED | set(CODE_MODE_ROOMS),
    "daemon.code_mode.catalog": SHARED | {"daemon.code_mode"},
    "daemon.code_mode.sandbox": SHARED | {"daemon.code_mode", "daemon.code_mode.catalog"},
    "daemon.code_mode.repl": SHARED | {"daemon.code_mode", "daemon.code_mode.sandbox"},
    "daemon.mcp": SHARED,
    "daemon.config": SHARED | {"daemon.mcp", "channels"},
    "daemon.runtime": SHARED
    | {
        "daemon.code_mode",
        "daemon.code_mode.catalog",
        "daemon.code_mode.repl",
        "daemon.config",
        "channels",
        "sessions",
    },
    "daemon.approvals": set(),  # the lowest floor: daemon.tools carries its values
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
    "daemon.cluster": SHARED
    | {"daemon.config", "daemon.runtime", "daemon.code_mode.repl", "sessions", "channels"},
    # the console (issue 30): reads the store, decides through the runtime's desk
    "daemon.web": SHARED
    | {"daemon.asgi", "daemon.config", "daemon.runtime", "sessions", "channels"},
    # reads the runs' timelines (issue 30); imported by daemon.app and the console only
    "daemon.telemetry": SHARED | {"daemon.asgi", "daemon.runtime"},
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


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_docstring_states_its_one_job(name: str) -> None:
    """Every module opens with a docstring whose summary (its first paragraph) is
    one sentence: it ends with a full stop and says something (four words at least)."""
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    assert doc, f"{name} has no module docstring"
    summary = " ".join(doc.split("\n\n")[0].split())
    assert summary.endswith("."), f"{name}: the summary is not a sentence: {summary!r}"
    assert len(summary.split()) >= 4, f"{name}: the summary says nothing: {summary!r}"


def test_a_module_over_800_lines_says_at_its_top_why_it_is_one_piece() -> None:
    """A long module says in its first lines why it must be one piece."""
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > LONG_MODULE
        and "one piece" not in "\n".join(path.read_text().splitlines()[:15])
    }
    assert not long


def _positional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The ordinary positional parameters of ``function``: positional-only and
    positional-or-keyword ones, without the ``self`` or ``cls`` of a method."""
    names = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _long_signatures() -> set[str]:
    """Every function of daemon/, channels/ and sessions/ with more than six
    positional parameters, as ``module:line name(count)``."""
    found: set[str] = set()
    for name, path in MODULES.items():
        if name.split(".")[0] not in ("daemon", "channels", "sessions"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            functions = ast.FunctionDef | ast.AsyncFunctionDef
            if isinstance(node, functions) and (n := len(_positional(node))) > MAX_POSITIONAL:
                found.add(f"{name}:{node.lineno} {node.name}({n})")
    return found


def test_the_signature_checker_counts_what_it_must() -> None:
    """``self`` and keyword-only parameters do not count; positional-only ones do."""
    tree = ast.parse(
        "class C:\n"
        "    def m(self, a, b, c, d, e, f, *, g, h): ...\n"
        "def g(a, b, /, c, d, e, f, g=1): ...\n"
    )
    found = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert _positional(found["m"]) == ["a", "b", "c", "d", "e", "f"]
    assert len(_positional(found["g"])) == 7


def test_no_function_takes_more_than_six_positional_parameters() -> None:
    """What travels together is one value (a context, a run), or passed by keyword:
    a call with seven positional arguments is one whose order nobody can check."""
    assert sorted(_long_signatures()) == []


def _re_exports() -> set[str]:
    """Names a module (not a package's ``__init__``) lists in ``__all__`` but imports."""
    found: set[str] = set()
    for name, path in MODULES.items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom | ast.Import)
            for alias in node.names
        }
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                names = ast.literal_eval(node.value)
                found.update(f"{name}.{n}" for n in names if n in imported)
    return found


def test_a_module_hands_on_only_its_own_names() -> None:
    """A name has one home: importers import it from the module that defines it."""
    assert sorted(_re_exports()) == []


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
