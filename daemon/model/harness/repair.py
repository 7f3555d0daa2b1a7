"""AST repairs of a small model's snippet: what it predictably gets wrong, fixed
before the snippet runs (:func:`repair_code`; pure, no I/O).
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Callable, Iterable
from copy import deepcopy as copy_tree

from daemon.code_mode.catalog import RESERVED_NAMES, SEARCH_HELPERS
from daemon.code_mode.sandbox import SANDBOX_MODULES
from daemon.model.harness.peek import top_level_targets
from daemon.model.harness.prompts import Signature
from daemon.model.harness.rules import acts, on

__all__ = ["repair_code"]


class _UnawaitHelpers(ast.NodeTransformer):
    """``await describe(...)`` → ``describe(...)``: the two search helpers of a large
    catalog (issue 19) answer at once, so awaiting their value is a TypeError, and
    a model that awaits every function it is shown will await them too. So do the
    helpers of every scope (code mode's ``RESERVED_NAMES``): ``await count_by(...)`` failed
    three times in a row ("'dict' object can't be awaited"). A catalog function of
    that name (which is awaited) keeps its ``await``."""

    def __init__(self, tools: set[str]) -> None:
        self.tools = tools
        self.changed = False
        self.helpers = False

    def visit_Await(self, node: ast.Await) -> ast.AST:
        self.generic_visit(node)
        call = node.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in (*SEARCH_HELPERS, *RESERVED_NAMES)
            and call.func.id not in self.tools
        ):
            if call.func.id in SEARCH_HELPERS:
                self.changed = True
            else:
                self.helpers = True
            return call
        return node


class _AwaitPrecedence(ast.NodeTransformer):
    """``await f(x)['k']`` → ``(await f(x))['k']``; the same through ``.attr`` and calls.

    ``await`` binds looser than subscripts and attribute calls, so the model's
    ``await list_objects(...)['items']`` subscripts the coroutine. The rewrite
    moves the ``await`` onto the innermost call of a plain name, which is what
    the model meant.
    """

    def __init__(self) -> None:
        self.changed = False

    def visit_Await(self, node: ast.Await) -> ast.AST:
        self.generic_visit(node)
        inner = node.value
        parent: ast.AST | None = None
        cur: ast.AST = inner
        while True:
            if isinstance(cur, ast.Subscript | ast.Attribute):
                parent, cur = cur, cur.value
            elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
                parent, cur = cur.func, cur.func.value
            else:
                break
        if parent is None or not (isinstance(cur, ast.Call) and isinstance(cur.func, ast.Name)):
            return node
        # parent is a Subscript or an Attribute (the loop above), both have .value;
        # mypy only knows it as an ast.AST
        parent.value = ast.Await(value=cur)  # type: ignore[attr-defined]
        self.changed = True
        return inner


def _is_stub_of(node: ast.AST, names: set[str]) -> bool:
    """A function of one of ``names`` whose body is only a docstring, ``pass`` or ``...``."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name not in names:
        return False
    for stmt in node.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring or ``...``
        return False
    return True


def _imports_only(node: ast.AST, names: set[str]) -> bool:
    """``from x import a, b`` where every name is a sandbox function (they need no import)."""
    return isinstance(node, ast.ImportFrom) and all(a.name in names for a in node.names)


class _RenameHelpers(ast.NodeTransformer):
    """``items = items(r)`` → ``items_ = items(r)``: a variable named like a helper is
    renamed everywhere except where it is called (the call means the helper)."""

    def __init__(self, names: set[str]):
        self.names = names

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.names:
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            return node
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Name(id=node.id + "_", ctx=node.ctx), node)
        return node


class _KnownFunctions(ast.NodeTransformer):
    """A call of a function the catalog does not have, with keyword arguments that fit
    exactly one close catalog name, calls that one: ``get_objects(workspace=...,
    resource=...)`` → ``list_objects(...)`` (the model called its invention three
    times in a row, hint or not)."""

    def __init__(self, signatures: dict[str, Signature], local: set[str]):
        self.signatures = signatures
        self.local = local
        self.renamed: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Name) or node.args:
            return node
        name = func.id
        if name in self.signatures or name in self.local or hasattr(builtins, name):
            return node
        given = {k.arg for k in node.keywords}
        if None in given:  # **kwargs: cannot tell
            return node
        fits = [
            f
            for f, (params, required) in self.signatures.items()
            if required <= given and given <= params
        ]
        close = difflib.get_close_matches(name, fits, n=1, cutoff=0.7)
        if close:
            node.func = ast.copy_location(ast.Name(id=close[0], ctx=ast.Load()), func)
            self.renamed.append(f"{name} → {close[0]}")
        return node


class _PositionalArguments(ast.NodeTransformer):
    """A catalog function called with one positional argument, where exactly one of
    its required parameters is not given by keyword: the argument is passed by that
    keyword (``read_query("SELECT ...")`` → ``read_query(query="SELECT ...")``).

    Serves every tool with one obvious argument (a query, a URL, a path): the stubs
    are keyword-only, and a small model that writes the call positionally gets
    "takes keyword arguments only", then sends the same line again and again."""

    def __init__(self, signatures: dict[str, Signature]):
        self.signatures = signatures
        self.bound: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Name) or len(node.args) != 1:
            return node
        if isinstance(node.args[0], ast.Starred) or func.id not in self.signatures:
            return node
        given = {k.arg for k in node.keywords}
        if None in given:  # **kwargs: cannot tell
            return node
        _, required = self.signatures[func.id]
        missing = sorted(required - given)
        if len(missing) != 1:
            return node
        node.keywords.insert(0, ast.keyword(arg=missing[0], value=node.args[0]))
        node.args = []
        self.bound.append(f"{func.id}({missing[0]}=...)")
        return node


class _BoundGet(ast.NodeTransformer):
    """``key=d.get`` → ``key=lambda k: d[k]``: Monty has no bound ``dict.get`` to pass
    around (AttributeError), a common ``max(d, key=d.get)``."""

    def __init__(self) -> None:
        self.changed = False

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        self.generic_visit(node)
        v = node.value
        if (
            node.arg == "key"
            and isinstance(v, ast.Attribute)
            and v.attr == "get"
            and isinstance(v.value, ast.Name)
        ):
            arg = ast.arguments(
                posonlyargs=[],
                args=[ast.arg(arg="_k")],
                kwonlyargs=[],
                kw_defaults=[],
                defaults=[],
            )
            body = ast.Subscript(
                value=ast.Name(id=v.value.id, ctx=ast.Load()),
                slice=ast.Name(id="_k", ctx=ast.Load()),
                ctx=ast.Load(),
            )
            node.value = ast.Lambda(args=arg, body=body)
            self.changed = True
        return node


def _dead_imports(tree: ast.Module) -> tuple[list[ast.stmt], list[str]]:
    """The top-level imports of modules the sandbox does not have (``requests``,
    ``pandas``) whose names the snippet never reads, and those modules' names. Such
    an import can only fail: the code never uses it.

    A small model starts a fetch with ``import requests`` out of habit, then calls
    the sandbox's own function; the import fails before anything runs, and the
    retry, shown that, often keeps the line (seen three times in one dev run). An
    import whose name the code does read is left: its error is the real one.
    """
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    dead: list[ast.stmt] = []
    modules: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            names = [a.name for a in stmt.names]
            bound = {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            names = [stmt.module]
            bound = {a.asname or a.name for a in stmt.names}
        else:
            continue
        absent = [m for m in names if m.split(".")[0] not in SANDBOX_MODULES]
        if absent and len(absent) == len(names) and not bound & read:
            dead.append(stmt)
            modules.extend(absent)
    return dead, modules


def _transformed(
    tree: ast.Module, visitor: ast.NodeTransformer, rule: str, changed: Callable[[], object]
) -> tuple[ast.Module, bool]:
    """``visitor`` run over a copy of ``tree``, and whether the copy is kept: where
    ``changed()`` says the visitor changed something and ``rule`` acts there. Otherwise
    ``tree`` as it was (so a rule that would change nothing is not reached)."""
    copy = visitor.visit(copy_tree(tree))
    if acts(rule, bool(changed())):
        return copy, True
    return tree, False


def repair_code(
    code: str, functions: Iterable[str] | dict[str, Signature] = ()
) -> tuple[str, list[str]]:
    """Fix what small models predictably get wrong; returns ``(code, repairs)``.

    Code that does not parse, or needs no repair, comes back unchanged (so
    the sandbox reports the real error). ``functions`` are the catalog's
    names (stub redefinitions and imports of them are dropped), or its
    :func:`catalog_signatures` (then an invented function whose arguments fit
    a close catalog one is renamed too). Each repair is a rule of
    :data:`~daemon.model.harness.rules.RULES`, named beside it, and acts only when on.
    """
    names = set(functions)
    signatures = functions if isinstance(functions, dict) else {}
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        literal = code.replace("\\n", "\n")
        if "\n" in code or literal == code or not on("literal-newlines"):
            return code, []
        try:  # a double-escaped snippet: "a = 1\\nb = 2" arrived as one line
            tree = ast.parse(literal)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return code, []
        fixed, more = repair_code(literal, functions)
        return fixed, ["literal \\n sequences made newlines", *more]
    repairs: list[str] = []
    body = [
        stmt for stmt in tree.body if not (_is_stub_of(stmt, names) or _imports_only(stmt, names))
    ]
    if len(body) != len(tree.body) and on("drop-stubs"):
        repairs.append("dropped redefinitions or imports of the sandbox functions")
        tree.body = body
    dead, modules = _dead_imports(tree)
    if acts("dead-imports", bool(dead)):
        tree.body = [stmt for stmt in tree.body if stmt not in dead]
        repairs.append(
            "dropped imports the code never uses of modules the sandbox lacks: "
            + ", ".join(modules)
        )
    rebound = {n for n in top_level_targets(tree) if n in RESERVED_NAMES}
    if rebound and on("rename-helpers"):
        tree = _RenameHelpers(rebound).visit(tree)
        repairs.append("renamed variables that shadowed helpers: " + ", ".join(sorted(rebound)))
    # Each transformer below runs on a copy, and its rule is asked only where the copy
    # changed (acts): a rule that would change nothing is not reached (rules.reaching).
    fixer = _AwaitPrecedence()
    tree, done = _transformed(tree, fixer, "await-precedence", lambda: fixer.changed)
    if done:
        repairs.append("await applied to the call, not to its subscript")
    unawait = _UnawaitHelpers(names)
    tree, done = _transformed(
        tree, unawait, "unawait-helpers", lambda: unawait.changed or unawait.helpers
    )
    if done and unawait.changed:
        repairs.append("search_tools/describe called without await (they answer at once)")
    if done and unawait.helpers:
        repairs.append("helpers called without await (items, dig, count_by... answer at once)")
    if signatures:
        local = set(top_level_targets(tree)) | set(RESERVED_NAMES) | set(SEARCH_HELPERS)
        local |= {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        known = _KnownFunctions(signatures, local)
        tree, done = _transformed(tree, known, "known-functions", lambda: known.renamed)
        if done:
            repairs.append("called the catalog function meant: " + ", ".join(known.renamed))
        positional = _PositionalArguments(signatures)
        tree, done = _transformed(tree, positional, "positional-args", lambda: positional.bound)
        if done:
            repairs.append(
                "passed a positional argument by keyword: " + ", ".join(positional.bound)
            )
    getter = _BoundGet()
    tree, done = _transformed(tree, getter, "bound-get", lambda: getter.changed)
    if done:
        repairs.append("key=d.get made a lambda")
    last_return = tree.body[-1] if tree.body else None
    if (
        isinstance(last_return, ast.Return)
        and last_return.value is not None
        and on("top-level-return")
    ):
        # `return x` at the top level (a function body habit): x is the result
        tree.body[-1] = ast.Expr(value=last_return.value)
        repairs.append("a top-level return made the last expression")
    last = tree.body[-1] if tree.body else None
    target = None
    if isinstance(last, ast.Assign) and len(last.targets) == 1:
        target = last.targets[0]
    elif isinstance(last, ast.AnnAssign | ast.AugAssign):
        target = last.target
    if isinstance(target, ast.Name) and on("last-assignment"):
        tree.body.append(ast.Expr(value=ast.Name(id=target.id, ctx=ast.Load())))
        repairs.append(f"the assigned name {target.id} made the result")
    if not repairs:
        return code, []
    return ast.unparse(ast.fix_missing_locations(tree)), repairs
