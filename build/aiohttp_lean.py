"""aiohttp's connector as frozen into gantry: its two default SSL contexts built on first use.

`aiohttp/connector.py` builds two SSLContexts at import (`_SSL_CONTEXT_VERIFIED`,
`_SSL_CONTEXT_UNVERIFIED`); each loads the system CA store, about 50 ms apiece on every start.
They serve only requests that bring no context of their own, and gantry always brings one
(gantry.tls, handed to aiogram's session). build/build.py hands Nuitka this rewrite of the
installed file (ast, so it follows aiohttp): the two assignments become one cached function,
and every read of either name inside a function becomes a call of it. A name read anywhere
else, or assignments that no longer look as expected, fail the build with LeanError instead
of shipping a module that breaks at run time. tests/test_build_aiohttp_lean.py runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lean_common import LeanError, installed
from lean_common import package_config as _package_config

CONNECTOR = "aiohttp.connector"
# name -> the `verified` argument aiohttp passes to _make_ssl_context for it
CONTEXTS = {"_SSL_CONTEXT_VERIFIED": True, "_SSL_CONTEXT_UNVERIFIED": False}
FACTORY = "_make_ssl_context"
LAZY = "_gantry_default_ssl_context"

LAZY_SOURCE = f'''
_gantry_ssl_contexts = {{}}


def {LAZY}(verified):
    """aiohttp's default context, built the first time a request needs it (gantry)."""
    context = _gantry_ssl_contexts.get(verified)
    if context is None:
        context = _gantry_ssl_contexts[verified] = {FACTORY}(verified)
    return context
'''


def _context_assignment(node: ast.stmt) -> tuple[str, bool] | None:
    """(name, verified) if `node` is `_SSL_CONTEXT_X = _make_ssl_context(<bool>)`."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id in CONTEXTS):
        return None
    call = node.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == FACTORY and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, bool)):
        raise LeanError(f"line {node.lineno}: {node.targets[0].id} is no longer "
                        f"`{FACTORY}(True|False)`")
    name = node.targets[0].id
    if call.args[0].value is not CONTEXTS[name]:
        raise LeanError(f"line {node.lineno}: {name} = {FACTORY}({call.args[0].value})")
    return name, call.args[0].value


class _ReadsToCalls(ast.NodeTransformer):
    """Inside one function: `_SSL_CONTEXT_X` (a read) → `_gantry_default_ssl_context(bool)`."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in CONTEXTS:
            return node
        if not isinstance(node.ctx, ast.Load):
            raise LeanError(f"line {node.lineno}: {node.id} is assigned inside a function")
        call = ast.Call(func=ast.Name(id=LAZY, ctx=ast.Load()),
                        args=[ast.Constant(value=CONTEXTS[node.id])], keywords=[])
        return ast.copy_location(call, node)


def _functions(node: ast.stmt) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node]
    if isinstance(node, ast.ClassDef):
        return [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return []


def _mentions(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in CONTEXTS]


def connector_source(path: Path | None = None) -> str:
    """The installed connector.py with its default SSL contexts built on first use."""
    path = installed(CONNECTOR) if path is None else path
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = []
    found: dict[str, int] = {}
    for node in tree.body:
        hit = _context_assignment(node)
        if hit is not None:
            if hit[0] in found:
                raise LeanError(f"line {node.lineno}: {hit[0]} assigned twice")
            found[hit[0]] = node.lineno
            continue
        body.append(node)
    missing = sorted(set(CONTEXTS) - set(found))
    if missing:
        raise LeanError(f"{path}: no module-level {missing} = {FACTORY}(...) any more")
    if not any(isinstance(n, ast.FunctionDef) and n.name == FACTORY for n in body):
        raise LeanError(f"{path}: {FACTORY}() is gone")
    where = max(found.values())
    for node in body:
        functions = _functions(node)
        for fn in functions:
            for part in (*fn.args.defaults, *fn.args.kw_defaults, *fn.decorator_list):
                if part is not None and _mentions(part):
                    raise LeanError(f"line {fn.lineno}: a default SSL context is evaluated "
                                    "when the function is defined")
            fn.body = [_ReadsToCalls().visit(stmt) for stmt in fn.body]
        if isinstance(node, ast.ClassDef):
            rest = [n for n in node.body if n not in functions]
            if any(_mentions(n) for n in (*rest, *node.bases, *node.decorator_list)):
                raise LeanError(f"line {node.lineno}: a default SSL context is used in a "
                                "class body")
        elif not functions and _mentions(node):
            raise LeanError(f"line {node.lineno}: a default SSL context is used at module level")
    index = next(i for i, n in enumerate(body) if getattr(n, "lineno", 0) > where)
    body[index:index] = ast.parse(LAZY_SOURCE).body
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def package_config() -> str:
    """A Nuitka user package configuration (YAML) replacing aiohttp/connector.py."""
    return _package_config("aiohttp_lean.py", {CONNECTOR: connector_source()},
                           {CONNECTOR: "default SSL contexts built on first use, not at import"})
