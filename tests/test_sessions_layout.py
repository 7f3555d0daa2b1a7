"""The shape of the sessions package: what it exports, and what it may import."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import sessions
import sessions.store

PACKAGE = Path(sessions.__file__).parent


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules([str(PACKAGE)]))


def test_package_exports_what_it_names():
    """sessions.__all__ lists names that exist, Store among them."""
    for name in sessions.__all__:
        assert hasattr(sessions, name), name
    assert {"Store", "StoreError", "DEFAULT_DB_PATH"} <= set(sessions.__all__)


def test_store_module_keeps_its_public_names():
    """sessions.store hands on the Store alone; the names it re-exported before the store
    became ports are imported from the modules that define them (issue 27)."""
    assert set(sessions.store.__all__) == {"Store"}
    for name in sessions.store.__all__:
        assert hasattr(sessions.store, name), name


def test_every_module_says_what_it_holds_and_exports_real_names():
    """Each module of sessions/ has a docstring, and its __all__ names exist."""
    for name in _modules():
        module = importlib.import_module(f"sessions.{name}")
        assert module.__doc__, f"sessions.{name} has no docstring"
        for exported in getattr(module, "__all__", ()):
            assert hasattr(module, exported), f"sessions.{name}.{exported}"


def test_sessions_imports_nothing_from_daemon():
    """sessions/ stands below daemon/: no module imports it, not even for type checking."""
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for imported in names:
                assert imported.split(".")[0] != "daemon", f"{path.name} imports {imported}"
