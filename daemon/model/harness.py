"""A harness that makes small models succeed with ``run_code`` (pure functions, no I/O).

Measured with Qwen2.5-Coder-1.5B-Instruct on llama-cpp-python 0.3.36
(notes/local-model.md, issue 9 and its benchmark, ``bench/small_model.py``),
each piece fixes one observed failure:

| failure                                                   | fix here                       |
|-----------------------------------------------------------|--------------------------------|
| ``tool_choice="auto"``: it never calls run_code; it writes | the code-block protocol: the   |
| pseudo calls as text. Forced (a JSON grammar): with a real | model replies with a fenced    |
| catalog, 6 of 6 snippets were one-line JavaScript          | ``python`` block, the harness  |
|                                                           | runs it as run_code            |
|                                                           | (:func:`extract_code`)         |
| the API only in the tool description: it ignores it and   | :func:`system_prompt`: short   |
| uses the kubernetes client library; the full sandbox text | rules, the catalog and a       |
| (2 500 tokens) costs a minute of prompt processing        | worked example in the system   |
|                                                           | message                        |
| raw newlines, an unescaped ``"`` in arguments JSON (when a | :func:`recover_arguments`,     |
| server does return tool calls); calls written as text     | :func:`text_tool_calls`        |
| ``await f()['items']`` (await binds looser), a trailing    | :func:`repair_code`            |
| assignment or ``return`` (result None), stub redefinitions |                                |
| ``print(x)`` last: the result is ``{"output": "x"}``      | :func:`prints_as_result`       |
| at temperature 0 it resends the failing snippet verbatim  | :data:`RETRY_TEMPERATURE`,     |
|                                                           | :data:`MAX_FAILED_SNIPPETS`    |
| after the result it restates the code, or invents facts   | :func:`result_message` (the    |
|                                                           | result, then the question      |
|                                                           | again, in the last message)    |

The backend (``daemon/backend.py``) applies them when ``[model] harness`` is
on; everything here is text in, text out.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import json
import re
from collections.abc import Iterable

__all__ = [
    "CODE_STOP",
    "HARNESS_RULES",
    "HARNESS_SYSTEM_PROMPT",
    "HELPER_NAMES",
    "MAX_FAILED_SNIPPETS",
    "NO_OUTPUT",
    "RETRY_TEMPERATURE",
    "WORKED_EXAMPLE",
    "answer_instruction",
    "assigned_names",
    "catalog_names",
    "catalog_signatures",
    "code_message",
    "compact_description",
    "extract_code",
    "is_code_only",
    "is_empty_result",
    "peek_code",
    "prints_as_result",
    "readable",
    "recover_arguments",
    "repair_code",
    "result_message",
    "retry_hint",
    "system_prompt",
    "text_tool_calls",
]

HARNESS_SYSTEM_PROMPT = """\
You are asyncai, an assistant that answers questions in a chat channel. You find \
answers by writing Python that runs in a sandbox (the run_code tool), where the \
functions listed below call the real tools. Reply to a question with one ```python \
block; its result comes back to you, and then you answer in words. The functions are \
already defined: never define them yourself, never import them, and never use other \
libraries (such as kubernetes or requests) to get data."""

HARNESS_RULES = """\
Rules for the code:
- Python 3, run at the top level of a REPL: use `await` directly.
- The functions listed below are async: call them with `await` and keyword arguments. \
They return dicts; lists of objects are under "items" (items(x) returns that list).
- End the code with an expression: its value is the result you get back.
- `asyncio`, `json` and `re` are imported; other standard modules can be imported. No \
third-party packages, files, network or subprocesses: only the functions below reach out.
- A function whose tool fails raises RuntimeError; a failed snippet comes back as its \
traceback: then fix it."""

WORKED_EXAMPLE = """\
How to answer: reply with one ```python block that calls the functions above with \
`await` and keyword arguments, filters the data in Python, and ends with an expression \
that holds the answer. Put each statement on its own line.

Worked example (only an illustration: list_orders is not one of your functions).
Question: in store north, which open orders are over 100, with their totals?
```python
orders = await list_orders(store='north', status='open')
big = [o for o in items(orders) if o['total'] > 100]
[{'id': o['id'], 'total': o['total']} for o in big]
```
The question names the store, and asks about orders: so the code lists the orders, \
passing the store as an argument."""

# Generation stops after the code block's closing fence: what a small model writes
# after it (explanations, invented results) only costs time.
CODE_STOP = "\n```\n"

# A failed snippet is tried again with a little randomness: at temperature 0 a small
# model resends the very same snippet. After this many failures it answers instead.
RETRY_TEMPERATURE = 0.7
MAX_FAILED_SNIPPETS = 3

# run_code's text for "nothing printed, None last" (daemon/code_mode/contract.py; a test
# keeps the two equal): a result that answers nothing, so the harness asks again.
NO_OUTPUT = "(no output; the last expression was None)"

_DEF_NAME = re.compile(r"^async def ([A-Za-z_][A-Za-z0-9_]*)\(", re.MULTILINE)


def catalog_names(description: str) -> set[str]:
    """The sandbox functions a ``run_code`` description lists (its ``async def`` stubs)."""
    return set(_DEF_NAME.findall(description))


_SECTION = re.compile(r"^(Helpers, |Available functions)", re.MULTILINE)


def compact_description(description: str) -> str:
    """The run_code description cut down for a small model: :data:`HARNESS_RULES`, then
    its helpers and its catalog of functions (what is specific to this deployment).

    The full description (sandbox rules, return contract, limits) is about 2 500
    tokens before the catalog: a minute of prompt processing on 2 cores, and
    more than a 1.5B model keeps track of. A description without those
    sections is kept whole.
    """
    m = _SECTION.search(description)
    if m is None:
        return description
    return f"{HARNESS_RULES}\n\n{description[m.start() :].strip()}"


Signature = tuple[frozenset[str], frozenset[str]]  # (keyword parameters, required ones)
_STUB = re.compile(r"^async def (\w+)\((.*)\)\s*(?:->.*)?:\s*$", re.MULTILINE)


def catalog_signatures(description: str) -> dict[str, Signature]:
    """The parameters of each ``async def`` stub a run_code description lists."""
    found: dict[str, Signature] = {}
    for m in _STUB.finditer(description):
        try:
            tree = ast.parse(f"async def {m.group(1)}({m.group(2)}): ...")
        except SyntaxError:
            continue
        fn = tree.body[0]
        assert isinstance(fn, ast.AsyncFunctionDef)  # what was parsed
        a = fn.args
        params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
        positional = [*a.posonlyargs, *a.args]
        required = {x.arg for x in positional[: len(positional) - len(a.defaults)]}
        required |= {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None}
        found[m.group(1)] = (frozenset(params), frozenset(required))
    return found


def system_prompt(base: str, run_code_description: str, example: str = WORKED_EXAMPLE) -> str:
    """The system message: ``base``, the run_code rules and catalog, then the worked example.

    llama-cpp-python shows tool descriptions to the model only as JSON inside
    its template (or not at all with ``chatml-function-calling``); the system
    message always arrives as plain text. It depends only on its inputs, so
    the server's prompt-prefix cache stays valid from run to run.
    """
    return f"{base.rstrip()}\n\n# run_code\n\n{run_code_description.strip()}\n\n{example.strip()}"


def answer_instruction(question: str, source: str = "the result above") -> str:
    """The user line that asks for the answer: from the result, in words, no code."""
    return (
        f"Answer my question now, using {source}. My question was:\n"
        f"{question.strip()}\n"
        "Reply in one to three plain sentences that state every name and number from the "
        "result. Do not write code and do not describe the code. If the result is empty, "
        "say that nothing matched; if it is an error, say that you could not find out, and why."
    )


_RESULT_SHOWN = 6_000  # characters of a result repeated in the answer request


def result_message(
    result: str,
    question: str,
    *,
    failed: bool,
    retry: bool,
    shapes: str | None = None,
    empty: bool = False,
) -> str:
    """The user message that carries a run_code result back in the code-block protocol.

    It follows the question directly: the failed attempt is not replayed as an
    assistant turn, since a small model copies its own last code verbatim (it
    sent the same failing snippet three times, even at temperature 0.7). A
    failure that may be retried asks for a new block; an empty result
    that may be retried lets the model choose between answering and a new
    block; otherwise the result comes with the request to answer the
    (repeated) question, so the last thing the model reads is the data and
    what to do with it. ``shapes`` (from :func:`peek_code`) shows what the
    snippet's variables really hold: a small model guesses keys, and the
    traceback alone does not tell it the right ones.
    """
    shown = result if len(result) <= _RESULT_SHOWN else result[:_RESULT_SHOWN] + " …"
    seen = (
        f"\n\nWhat your variables hold now (paths and values; the first item of each "
        f"list):\n{shapes}"
        if shapes
        else ""
    )
    q = question.strip()
    if failed and retry:
        return (
            f"Your last attempt failed:\n{shown}{seen}\n\nWrite a new ```python block that "
            f"answers my question, using the keys shown above: {q}"
        )
    if empty and retry:
        return (
            f"Your last attempt returned {shown}{seen}\n\nIf nothing matches, answer my "
            "question in words. Otherwise write a new ```python block, using the keys shown "
            f"above. My question: {q}"
        )
    if failed:
        return f"The code failed:\n{shown}\n\n{answer_instruction(question)}"
    return f"The code returned:\n{readable(shown)}\n\n{answer_instruction(question)}"


def readable(result: str, limit: int = 40) -> str:
    """A JSON list or dict result as one line per item (``- name: a, phase: Failed``):
    in compact JSON a 1.5B model dropped two of five items from its answer."""
    try:
        value = json.loads(result)
    except ValueError:
        return result

    def one(v: object) -> str:
        if isinstance(v, dict):
            return ", ".join(
                f"{k}: {one(x) if isinstance(x, dict | list) else x}" for k, x in v.items()
            )
        return json.dumps(v, ensure_ascii=False) if isinstance(v, list) else str(v)

    if isinstance(value, list) and 0 < len(value) <= limit:
        return f"{len(value)} items:\n" + "\n".join(f"- {one(v)}" for v in value)
    if isinstance(value, dict) and 0 < len(value) <= limit:
        return "\n".join(
            f"{k}: {one(v) if isinstance(v, dict | list) else v}" for k, v in value.items()
        )
    return result


def is_empty_result(text: str) -> bool:
    """Whether run_code returned an empty value (often a filter that matched by mistake)."""
    return text.startswith("(empty result")


def assigned_names(code: str, limit: int = 4) -> list[str]:
    """The first top-level names a snippet assigns (the data it fetched, usually)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return _assigned(tree)[:limit]


def _assigned(tree: ast.Module) -> list[str]:
    found: list[str] = []
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        for target in targets:
            for node in ast.walk(target):
                if not isinstance(node, ast.Name) or node.id.startswith("_"):
                    continue
                if node.id not in found:
                    found.append(node.id)
    return found


# Monty Python (no globals(), no yield). The value is shown as access paths with their
# values for the first item of each list: `pods['items'][0]['status']['phase'] ==
# 'Running'`. A small model copies a path it sees exactly; a sketch shaped like a
# literal it pasted into its code as an assignment (a SyntaxError at "...").
_PEEK_PATHS = """\
def _peek_paths(x, path, out, depth=0):
    if len(out) >= 30 or depth > 8:
        return
    if isinstance(x, dict):
        if len(x) == 0:
            out.append(path + ' == {}')
        for k in list(x)[:20]:
            _peek_paths(x[k], path + '[' + repr(k) + ']', out, depth + 1)
    elif isinstance(x, (list, tuple)):
        out.append('len(' + path + ') == ' + str(len(x)))
        if len(x) > 0:
            _peek_paths(x[0], path + '[0]', out, depth + 1)
    elif isinstance(x, str) and len(x) > 80:
        out.append(path + '[:80] == ' + repr(x[:80]))
    else:
        out.append(path + ' == ' + repr(x))
"""
_PEEK_ONE = """\
try:
    _peek_out = []
    _peek_paths({name}, '{name}', _peek_out)
    print('\\n'.join(_peek_out))
except Exception:
    pass
"""


def peek_code(names: Iterable[str]) -> str:
    """A snippet that prints each named variable's access paths and values (the first
    item of each list), skipping names the failed snippet never set."""
    return _PEEK_PATHS + "".join(_PEEK_ONE.format(name=n) for n in names)


def code_message(code: str) -> str:
    """How an assistant turn that ran code is replayed: the fenced block it wrote."""
    return f"```python\n{code}\n```"


_FENCED = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<code>.*?)(?:\n[ \t]*```|$)", re.DOTALL)
_PYTHON = {"", "python", "python3", "py"}


def extract_code(content: str) -> str | None:
    """The code of the first Python (or unlabelled) fenced block, closed or cut off by
    :data:`CODE_STOP`; blocks in other languages (a JSON pseudo call) are skipped."""
    for m in _FENCED.finditer(content):
        code = m.group("code").strip("\n")
        if m.group("lang").lower() in _PYTHON and code.strip():
            return code
    return None


# ---- arguments ----------------------------------------------------------------------------

_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "/": "/"}
# {"code": "<anything, quotes included>" [, "restart": true|false]} — greedy: the last quote
_CODE_OBJECT = re.compile(
    r'^\s*\{\s*"code"\s*:\s*"(?P<code>.*)"\s*'
    r'(?:,\s*"restart"\s*:\s*(?P<restart>true|false)\s*)?\}\s*$',
    re.DOTALL,
)
_CODE_PREFIX = re.compile(r'^\s*\{\s*"code"\s*:\s*"(?P<code>.*)$', re.DOTALL)
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\n(?P<code>.*?)\n?```\s*$", re.DOTALL)


def _unescape(text: str) -> str:
    """Decode JSON string escapes, leaving anything else (bare quotes) as it is."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        return chr(int(esc[1:], 16)) if esc[0] == "u" else _ESCAPES[esc]

    return _JSON_ESCAPE.sub(one, text)


def recover_arguments(raw: str, field: str = "code") -> tuple[dict | None, str | None]:
    """Arguments for a ``{field: str}`` tool from text that is not valid JSON.

    Returns ``(arguments, how)``: ``how`` names the repair, or ``(None, None)``
    when nothing sensible can be recovered. Tried in order: control
    characters inside strings (raw newlines), the object with a string that
    holds unescaped quotes (everything up to the last quote before ``}``), a
    Python dict literal, an object cut off before its end, and bare code
    (not JSON at all, possibly in a markdown fence).
    """
    try:
        value = json.loads(raw, strict=False)
    except ValueError:
        pass
    else:
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return value, "raw control characters in a JSON string"
        return None, None
    if field == "code":
        m = _CODE_OBJECT.match(raw)
        if m:
            args: dict = {"code": _unescape(m.group("code"))}
            if m.group("restart"):
                args["restart"] = m.group("restart") == "true"
            return args, "unescaped quotes in the code string"
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    else:
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return value, "a Python dict instead of JSON"
    if field == "code":
        m = _CODE_PREFIX.match(raw)
        if m:
            code = re.sub(r'"\s*\}?\s*$', "", m.group("code"))
            return {"code": _unescape(code)}, "an arguments object cut off before its end"
        stripped = raw.strip()
        if stripped and not stripped.startswith(("{", "[")):
            fenced = _FENCE.match(stripped)
            return {"code": fenced.group("code") if fenced else stripped}, "bare code, not JSON"
    return None, None


_TEXT_CALL = re.compile(
    r"<tool_call>\s*(?P<tag>.*?)\s*(?:</tool_call>|$)|```(?:json)?\s*\n(?P<fence>.*?)\n?```",
    re.DOTALL,
)


def text_tool_calls(content: str, tool_names: Iterable[str]) -> list[tuple[str, dict]]:
    """Tool calls a model wrote as text: ``{"name": ..., "arguments": {...}}`` objects in
    ``<tool_call>`` tags (Qwen's own format, which llama-cpp-python's generic handler does
    not parse), in fenced blocks, or as the whole reply. Only offered tools count.
    """
    names = set(tool_names)
    found: list[tuple[str, dict]] = []
    chunks = [m.group("tag") or m.group("fence") or "" for m in _TEXT_CALL.finditer(content)]
    for chunk in chunks or [content]:
        try:
            value = json.loads(chunk.strip(), strict=False)
        except ValueError:
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict) or item.get("name") not in names:
                continue
            arguments = item.get("arguments", item.get("parameters", {}))
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments, strict=False)
                except ValueError:
                    continue
            if isinstance(arguments, dict):
                found.append((item["name"], arguments))
    return found


# ---- code ---------------------------------------------------------------------------------


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
        parent.value = ast.Await(value=cur)  # type: ignore[attr-defined]  # Subscript/Attribute
        self.changed = True
        return inner


def _is_stub(node: ast.AST) -> bool:
    """A function whose body is only a docstring, ``pass`` or ``...``."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
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


# The helpers code mode defines in every scope (daemon/code_mode/helpers.py; a test
# keeps the two equal). Rebinding one is refused before the snippet runs.
HELPER_NAMES = ("items", "names", "dig", "count_by", "to_json")


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


def repair_code(
    code: str, functions: Iterable[str] | dict[str, Signature] = ()
) -> tuple[str, list[str]]:
    """Fix what small models predictably get wrong; returns ``(code, repairs)``.

    Code that does not parse, or needs no repair, comes back unchanged (so
    the sandbox reports the real error). ``functions`` are the catalog's
    names (stub redefinitions and imports of them are dropped), or its
    :func:`catalog_signatures` (then an invented function whose arguments fit
    a close catalog one is renamed too).
    """
    names = set(functions)
    signatures = functions if isinstance(functions, dict) else {}
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        literal = code.replace("\\n", "\n")
        if "\n" in code or literal == code:
            return code, []
        try:  # a double-escaped snippet: "a = 1\\nb = 2" arrived as one line
            tree = ast.parse(literal)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return code, []
        fixed, repairs = repair_code(literal, functions)
        return fixed, ["literal \\n sequences made newlines", *repairs]
    repairs: list[str] = []
    body = [
        stmt
        for stmt in tree.body
        if not ((_is_stub(stmt) and stmt.name in names) or _imports_only(stmt, names))  # type: ignore[attr-defined]
    ]
    if len(body) != len(tree.body):
        repairs.append("dropped redefinitions or imports of the sandbox functions")
        tree.body = body
    rebound = {n for n in _assigned(tree) if n in HELPER_NAMES}
    if rebound:
        tree = _RenameHelpers(rebound).visit(tree)
        repairs.append("renamed variables that shadowed helpers: " + ", ".join(sorted(rebound)))
    fixer = _AwaitPrecedence()
    tree = fixer.visit(tree)
    if fixer.changed:
        repairs.append("await applied to the call, not to its subscript")
    if signatures:
        local = set(_assigned(tree)) | set(HELPER_NAMES)
        local |= {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        known = _KnownFunctions(signatures, local)
        tree = known.visit(tree)
        if known.renamed:
            repairs.append("called the catalog function meant: " + ", ".join(known.renamed))
    getter = _BoundGet()
    tree = getter.visit(tree)
    if getter.changed:
        repairs.append("key=d.get made a lambda")
    if tree.body and isinstance(tree.body[-1], ast.Return) and tree.body[-1].value is not None:
        # `return x` at the top level (a function body habit): x is the result
        tree.body[-1] = ast.Expr(value=tree.body[-1].value)
        repairs.append("a top-level return made the last expression")
    if tree.body:
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


_JAVASCRIPT = re.compile(
    r"(^|[\s;(])(let|const|var) \w+ =|=>|===|!==|\bconsole\.log\(|\bMath\.\w+\("
)


_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")


def retry_hint(code: str, error: str, functions: Iterable[str] = ()) -> str | None:
    """A line to add to an error result that names a mistake the traceback does not.

    Seen with a 1.5B model: the same JavaScript snippet sent again and again,
    since its SyntaxError never says "this is not Python"; and invented
    functions (get_objects, list_nodes) called again after their NameError.
    """
    known = sorted(set(functions))
    m = _UNDEFINED.search(error)
    if m and known and m.group(1) not in known:
        close = difflib.get_close_matches(m.group(1), known, n=2, cutoff=0.5)
        nearest = f" (perhaps {' or '.join(close)})" if close else ""
        return (
            f"Hint: there is no function {m.group(1)}{nearest}. The functions are: "
            + ", ".join(known)
            + "."
        )
    if "SyntaxError" in error and _JAVASCRIPT.search(code):
        return (
            "Hint: this code is JavaScript, but run_code runs Python 3. Rewrite it in "
            "Python: `x = await f(a='b')`, list comprehensions instead of .map/.filter, "
            "max(xs, key=...) instead of Math.max, and end with an expression, not return."
        )
    return None


# ---- results and replies ------------------------------------------------------------------


def prints_as_result(text: str) -> str:
    """``{"output": "<printed>"}`` (the last expression was None) → the printed text.

    A small model ends on ``print(...)`` more often than on an expression;
    the printed text is then its answer, and a JSON wrapper only adds noise.
    Blank printed output is :data:`NO_OUTPUT`: nothing was shown.
    """
    if not text.startswith('{"output"'):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and set(value) == {"output"} and isinstance(value["output"], str):
        return value["output"].rstrip("\n") if value["output"].strip() else NO_OUTPUT
    return text


def is_code_only(reply: str) -> bool:
    """Whether a reply is nothing but a fenced code block (no answer in words)."""
    return bool(_FENCE.match(reply.strip()))
