"""Module-level names a snippet binds, found from its text alone.

Two users: the reserved-helper check (a snippet may not rebind ``items``,
``dig``…) and the variables note (which names the snippets of a scope left
behind). Both only need the *module-level* bindings: names bound inside a
``def`` or ``lambda`` are local, comprehension variables are local, but a
walrus inside a module-level comprehension, the target of a module-level
``for``, an ``except … as`` name and a ``global`` declaration inside a
function all bind at module level.

The snippet is parsed with the stdlib :mod:`ast` under
``PyCF_ALLOW_TOP_LEVEL_AWAIT`` (Monty accepts top-level ``await``). Monty's
parser also accepts newer syntax than this CPython 3.11 does (PEP 701
f-strings such as ``f"{d["x"]}"``), so a snippet that does not parse here is
scanned line by line instead; that fallback can miss a binding, which only
means a name is not listed or not rejected.

A snippet longer than :data:`PARSE_MAX_CHARS` is scanned line by line too:
``compile`` holds the GIL for its whole parse (up to a second for 256 KiB of
dense code), which would stall the event loop even from a worker thread,
while the scan is Python code that yields the GIL, and each of its patterns
is linear in the line it reads.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["PARSE_MAX_CHARS", "Binding", "BindingKind", "module_bindings"]

# Parsed with ast up to this size: about 50 ms of GIL-holding parse at worst.
PARSE_MAX_CHARS = 16 * 1024

BindingKind = Literal[
    "assign", "def", "class", "import", "for", "with", "except", "match", "global"
]


@dataclass(frozen=True)
class Binding:
    """One module-level binding of a name, with the line (1-based) it is on."""

    name: str
    kind: BindingKind
    line: int


_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def module_bindings(code: str) -> list[Binding]:
    """Every module-level binding in ``code``, in source order (names may repeat)."""
    return list(_bindings(code))


# Each run_code parses its snippet twice, for the reserved-name check before it
# runs and for the variables note after; the second is a cache hit (issue 17).
@functools.lru_cache(maxsize=8)
def _bindings(code: str) -> tuple[Binding, ...]:
    if len(code) > PARSE_MAX_CHARS:
        return tuple(_scan_lines(code))
    try:
        tree = compile(code, "<snippet>", "exec", flags=_FLAGS, dont_inherit=True)
        collector = _Collector(walrus=":=" in code)
        collector.visit(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # ValueError: a NUL byte in the source; RecursionError, MemoryError:
        # nesting too deep for the parser or the walk (``1+1+…+1``). Monty
        # will report the real error when the snippet runs; the scan is best effort.
        return tuple(_scan_lines(code))
    return tuple(sorted(collector.found, key=lambda b: b.line))


class _Collector(ast.NodeVisitor):
    """Walks module-level code; does not descend into function or class bodies.

    ``walrus``: the text holds ``:=``. Without one, no expression binds a name
    (a walrus is the only expression that binds outside itself), so the walk
    skips every expression: most of a snippet's nodes, and most of the time.
    """

    def __init__(self, *, walrus: bool = True) -> None:
        self.found: list[Binding] = []
        self._expressions = walrus

    def visit(self, node: ast.AST) -> None:
        """Visit ``node``, unless it is an expression that cannot bind."""
        if self._expressions or not isinstance(node, ast.expr):
            super().visit(node)

    def _add(self, name: str, kind: BindingKind, node: ast.AST) -> None:
        self.found.append(Binding(name, kind, getattr(node, "lineno", 0)))

    def _targets(self, target: ast.expr, kind: BindingKind) -> None:
        # Names, tuple/list unpacking and starred targets bind; attribute and
        # subscript targets (x.a = 1, d["k"] = 1) mutate an object instead.
        if isinstance(target, ast.Name):
            self._add(target.id, kind, target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._targets(elt, kind)
        elif isinstance(target, ast.Starred):
            self._targets(target.value, kind)
        else:
            # The subscript or attribute expression itself may hold a walrus.
            self.visit(target)

    # statements -----------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        """``a = b = 1``, ``a, *b = xs``."""
        self.visit(node.value)
        for target in node.targets:
            self._targets(target, "assign")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        """``x: int = 1`` binds; a bare ``x: int`` only declares."""
        if node.value is not None:
            self.visit(node.value)
            self._targets(node.target, "assign")

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        """``x += 1`` rebinds ``x``."""
        self.visit(node.value)
        self._targets(node.target, "assign")

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        """The loop target binds at module level; so does anything in the body."""
        self.visit(node.iter)
        self._targets(node.target, "for")
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        """``with x as y`` binds ``y``."""
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._targets(item.optional_vars, "with")
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        """``except E as e`` binds ``e`` (and unbinds it afterwards)."""
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._add(node.name, "except", node)
        for stmt in node.body:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        """``import a.b`` binds ``a``; ``import a as b`` and ``from m import a as b`` bind ``b``."""
        for alias in node.names:
            if alias.name == "*":
                continue
            name = alias.asname or alias.name.split(".")[0]
            self._add(name, "import", node)

    visit_ImportFrom = visit_Import

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators and defaults run at module level; the body does not,
        # except for names it declares global.
        if not isinstance(node, ast.Lambda):
            for deco in node.decorator_list:
                self.visit(deco)
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default)
        if not isinstance(node, ast.Lambda):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Global):
                    for name in inner.names:
                        self._add(name, "global", inner)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """``def f`` binds ``f``."""
        self._function(node)
        self._add(node.name, "def", node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        """A walrus inside a lambda binds in the lambda, not the module."""
        self._function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """``class C`` binds ``C``; its body is a class scope."""
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._add(node.name, "class", node)

    def visit_Global(self, node: ast.Global) -> None:
        """``global x`` at module level is a no-op; it binds nothing by itself."""

    # match statement captures -----------------------------------------------------

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        """``case [x]`` / ``case _ as x`` bind ``x``."""
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self._add(node.name, "match", node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        """``case [a, *rest]`` binds ``rest``."""
        if node.name:
            self._add(node.name, "match", node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        """``case {"k": v, **rest}`` binds ``v`` and ``rest``."""
        self.generic_visit(node)
        if node.rest:
            self._add(node.rest, "match", node)

    # expressions -------------------------------------------------------------------

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        """A walrus at module level (also inside a comprehension) binds there."""
        self.visit(node.value)
        self._targets(node.target, "assign")


# Line-based fallback ----------------------------------------------------------------

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DEF = re.compile(rf"^(?:async\s+)?def\s+({_IDENT})")
_CLASS = re.compile(rf"^class\s+({_IDENT})")
_FOR = re.compile(r"^(?:async\s+)?for\s+")
# Only where a whitespace run starts: ``\s+in`` tried inside a long run is quadratic.
_IN = re.compile(r"(?<!\s)\s+in\s")
_IMPORT = re.compile(r"^import\s+(.+)$")
_FROM = re.compile(r"^from\s+\S+\s+import\s+\(?([^)#]+)")
_WITH_AS = re.compile(rf"\bas\s+({_IDENT})")
_EXCEPT_AS = re.compile(rf"^except\b.*\bas\s+({_IDENT})\s*:")
# ``a = …``, ``a, b = …``, ``a: T = …``, ``a += …`` at the start of a statement.
_ASSIGN = re.compile(
    rf"^((?:\*?{_IDENT}\s*,\s*)*\*?{_IDENT})\s*(?::[^=]*)?(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)"
)
# Only where an identifier starts: tried inside a long one, the pattern is quadratic.
_WALRUS = re.compile(rf"(?<![A-Za-z0-9_])({_IDENT})\s*:=")
_GLOBAL = re.compile(rf"^global\s+({_IDENT}(?:\s*,\s*{_IDENT})*)")


def _names(text: str) -> list[str]:
    # Keywords are never bound; they slip in from lines like ``else: x = 1``.
    return [n for n in re.findall(_IDENT, text) if not keyword.iskeyword(n)]


def _scan_lines(code: str) -> list[Binding]:
    """Best-effort bindings for a snippet CPython cannot parse.

    Lines inside a module-level ``def``/``class`` body are skipped (except
    ``global`` declarations); every other line is module-level code, including
    the bodies of module-level ``if``/``for``/``with``/``try`` blocks.
    """
    found: list[Binding] = []
    body_indent: int | None = None  # indentation of the def/class we are inside
    for lineno, raw in enumerate(code.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        if body_indent is not None:
            if indent > body_indent:
                if m := _GLOBAL.match(stripped):
                    found += [Binding(n, "global", lineno) for n in _names(m.group(1))]
                continue
            body_indent = None
        if m := _DEF.match(stripped):
            found.append(Binding(m.group(1), "def", lineno))
            body_indent = indent
            continue
        if m := _CLASS.match(stripped):
            found.append(Binding(m.group(1), "class", lineno))
            body_indent = indent
            continue
        if (m := _FOR.match(stripped)) and (target := _IN.search(stripped, m.end())):
            found += [Binding(n, "for", lineno) for n in _names(stripped[m.end() : target.start()])]
        elif m := _IMPORT.match(stripped):
            for part in m.group(1).split(","):
                words = part.split()
                if len(words) == 3 and words[1] == "as":
                    found.append(Binding(words[2], "import", lineno))
                elif words:
                    found.append(Binding(words[0].split(".")[0], "import", lineno))
        elif m := _FROM.match(stripped):
            for part in m.group(1).split(","):
                words = part.split()
                if len(words) == 3 and words[1] == "as":
                    found.append(Binding(words[2], "import", lineno))
                elif len(words) == 1 and words[0] != "*":
                    found.append(Binding(words[0], "import", lineno))
        elif m := _EXCEPT_AS.match(stripped):
            found.append(Binding(m.group(1), "except", lineno))
        elif stripped.startswith(("with ", "async with ")):
            found += [Binding(n, "with", lineno) for n in _WITH_AS.findall(stripped)]
        elif m := _ASSIGN.match(stripped):
            found += [Binding(n, "assign", lineno) for n in _names(m.group(1))]
        if ":=" in stripped:
            found += [Binding(n, "assign", lineno) for n in _WALRUS.findall(stripped)]
    return found
