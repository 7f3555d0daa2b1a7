"""AST repairs of a small model's snippet: what it predictably gets wrong, fixed
before the snippet runs (:func:`repair_code`; pure, no I/O).
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Iterable

from daemon.code_mode.catalog import RESERVED_NAMES, SEARCH_HELPERS
from daemon.model.harness.peek import top_level_targets
from daemon.model.harness.prompts import Signature
from daemon.model.harness.rules import on

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


# Builtins whose first argument is iterated: given a tool result (a dict), they see its
# keys. ``max(workspaces, key=lambda w: ...)`` handed each key, a str, to the lambda,
# and the TypeError that followed read like text to parse.
_ITERATING = frozenset(
    {"max", "min", "sorted", "sum", "list", "set", "tuple", "enumerate", "any", "all"}
    | {"reversed"}
)


class _ResultLists(ast.NodeTransformer):
    """``len(pods)``, ``for p in pods`` and ``max(pods, ...)`` (the builtins that iterate
    their argument), where ``pods = await list_objects(...)``, → ``len(items(pods))``,
    ``for p in items(pods)`` and ``max(items(pods), ...)``.

    A tool returns a dict (a list sits under "items"), so the length of the
    result is its number of keys: asked for the number of Warning events, the
    model reported ``len(events)``, the four keys of kubectl's list. Neither
    the number of keys nor iterating over them is ever what it meant.
    """

    def __init__(self, results: set[str]):
        self.results = results
        self.changed = False

    def _wrap(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Name) and node.id in self.results:
            self.changed = True
            call = ast.Call(func=ast.Name(id="items", ctx=ast.Load()), args=[node], keywords=[])
            return ast.copy_location(call, node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func.id if isinstance(node.func, ast.Name) else None
        if func == "len" and len(node.args) == 1:
            node.args = [self._wrap(node.args[0])]
        elif func in _ITERATING and node.args and not isinstance(node.args[0], ast.Starred):
            node.args = [self._wrap(node.args[0]), *node.args[1:]]
        elif func in ("map", "filter") and len(node.args) == 2:
            node.args = [node.args[0], self._wrap(node.args[1])]
        elif func == "zip":
            node.args = [self._wrap(a) for a in node.args]
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.iter = self._wrap(node.iter)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.iter = self._wrap(node.iter)
        return node


def _tool_results(tree: ast.Module, functions: set[str]) -> set[str]:
    """Names bound only by ``name = await f(...)`` of a catalog function, at the top level."""
    bound: dict[str, bool] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign):
            continue
        value = stmt.value
        is_result = (
            isinstance(value, ast.Await)
            and isinstance(value.value, ast.Call)
            and isinstance(value.value.func, ast.Name)
            and value.value.func.id in functions
        )
        for target in stmt.targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    only = len(stmt.targets) == 1 and target is node
                    bound[node.id] = bound.get(node.id, True) and is_result and only
    return {name for name, ok in bound.items() if ok}


def _inline_helpers(tree: ast.Module) -> list[str]:
    """Inline each helper function the snippet defines and calls once, as
    ``v = await f()`` (or ``v = f()``), with no arguments: its body runs at the top
    level and its ``return`` value is assigned to ``v``. Returns the helpers'
    names.

    A 1.5B model wraps a fetch in ``async def get_releases(): r = await
    http_get(...); return r["releases"]``. When that fails, the data lives in the
    function's locals: the look at the variables (and the key fix after it) sees
    nothing, and the retry made the dates up. Only a plain helper moves: a body
    with one ``return``, at its end; no ``global``, ``yield`` or nested ``def``;
    no local name that the rest of the snippet uses.
    """
    defs = {
        stmt.name: stmt
        for stmt in tree.body
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and _plain_helper(stmt)
    }
    inlined: list[str] = []
    for name, fn in defs.items():
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        if len(uses) != 1:
            continue
        at = next((i for i, stmt in enumerate(tree.body) if _calls_once(stmt, fn)), None)
        if at is None:
            continue
        local = {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        outside = {
            n.id
            for stmt in tree.body
            if stmt is not fn and stmt is not tree.body[at]
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name)
        }
        if local & outside:
            continue
        call, last = tree.body[at], fn.body[-1]
        if not (isinstance(call, ast.Assign) and isinstance(last, ast.Return) and last.value):
            continue  # (never: _calls_once and _plain_helper said so)
        body = [*fn.body[:-1], ast.Assign(targets=call.targets, value=last.value)]
        tree.body[at : at + 1] = body
        tree.body.remove(fn)
        inlined.append(name)
    return inlined


def _plain_helper(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """No parameters or decorators; one ``return <value>``, last; no ``global``,
    ``nonlocal``, ``yield`` or nested function."""
    a = fn.args
    if fn.decorator_list or a.args or a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg:
        return False
    last = fn.body[-1] if fn.body else None
    if not (isinstance(last, ast.Return) and last.value is not None):
        return False
    banned = (ast.Return, ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Lambda)
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    nodes = [n for stmt in fn.body[:-1] for n in ast.walk(stmt)]
    return not any(isinstance(n, (banned, scopes)) for n in nodes)


def _calls_once(stmt: ast.stmt, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``stmt`` is ``v = await fn()`` (``v = fn()`` for a plain def)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return False
    value = stmt.value
    if isinstance(fn, ast.AsyncFunctionDef):
        if not isinstance(value, ast.Await):
            return False
        value = value.value
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == fn.name
        and not value.args
        and not value.keywords
    )


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
    inlined = _inline_helpers(tree) if on("inline-helpers") else []
    if inlined:
        repairs.append("inlined helper functions called once: " + ", ".join(inlined))
    rebound = {n for n in top_level_targets(tree) if n in RESERVED_NAMES}
    if rebound and on("rename-helpers"):
        tree = _RenameHelpers(rebound).visit(tree)
        repairs.append("renamed variables that shadowed helpers: " + ", ".join(sorted(rebound)))
    fixer = _AwaitPrecedence()
    tree = fixer.visit(tree) if on("await-precedence") else tree
    if fixer.changed:
        repairs.append("await applied to the call, not to its subscript")
    unawait = _UnawaitHelpers(names)
    tree = unawait.visit(tree) if on("unawait-helpers") else tree
    if unawait.changed:
        repairs.append("search_tools/describe called without await (they answer at once)")
    if unawait.helpers:
        repairs.append("helpers called without await (items, dig, count_by... answer at once)")
    if signatures and on("known-functions"):
        local = set(top_level_targets(tree)) | set(RESERVED_NAMES) | set(SEARCH_HELPERS)
        local |= {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        known = _KnownFunctions(signatures, local)
        tree = known.visit(tree)
        if known.renamed:
            repairs.append("called the catalog function meant: " + ", ".join(known.renamed))
    if signatures and on("positional-args"):
        positional = _PositionalArguments(signatures)
        tree = positional.visit(tree)
        if positional.bound:
            repairs.append(
                "passed a positional argument by keyword: " + ", ".join(positional.bound)
            )
    results = _tool_results(tree, names)
    if results and on("result-lists"):
        lists = _ResultLists(results)
        tree = lists.visit(tree)
        if lists.changed:
            repairs.append("the items of a tool result counted or looped over, not its keys")
    getter = _BoundGet()
    tree = getter.visit(tree) if on("bound-get") else tree
    if getter.changed:
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
    if tree.body and on("last-assignment"):
        last = tree.body[-1]
        target = None
        if isinstance(last, ast.Assign) and len(last.targets) == 1:
            target = last.targets[0]
        elif isinstance(last, ast.AnnAssign | ast.AugAssign):
            target = last.target
        if isinstance(target, ast.Name):
            tree.body.append(ast.Expr(value=ast.Name(id=target.id, ctx=ast.Load())))
            repairs.append(f"the assigned name {target.id} made the result")
    if not repairs:
        return code, []
    return ast.unparse(ast.fix_missing_locations(tree)), repairs
