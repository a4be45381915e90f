"""The lazy package `__init__`s that keep mcp's server-side web stack out of the binary.

`import mcp.client.session` first runs `mcp/__init__.py`, `mcp/client/__init__.py` and (via
`mcp.server.caching`) `mcp/server/__init__.py`; each imports, at module level, the SDK's
in-memory client, `Client`, the low-level server and MCPServer, and through them starlette,
sse-starlette, uvicorn, python-multipart and cryptography — none of which a stdio client
runs. build/build.py writes these sources into a Nuitka package configuration
(`module_code`: the whole module replaced) so each package exports the same names, imported
on first attribute access instead. A module that needs the server half imports it by its
full name and Nuitka follows that import as usual.

The fourth replacement is for the server half gantry does run (`gantry mcp-memory` on the
SDK's low-level server over stdio): `mcp/server/lowlevel/server.py` imports the web stack at
module level for `streamable_http_app()` alone. `lowlevel_server_source` moves those imports
into the functions that use them (ast rewrite of the installed file, so it follows the SDK).

The fifth is `mcp_types/methods.py`, which imports both protocol-version model modules
(~3.5 MiB resident each) at module level to fill its (method, version) maps, although a
session speaks one version. `methods_source` makes those two imports lazy module proxies and
each such map a read-only Mapping whose values are computed on first lookup (same keys, the
very same objects), so a version module is imported only when a lookup first needs it.

The sixth is `mcp/client/session.py`: at a session's first request the SDK's
`_later_revision_fields(method, version)` reads the SERVER_RESULTS row of every revision newer
than the negotiated one (to drop their result keys), which imports every newer version module.
`session_source` appends its answers for every (method, version) row, computed at build time by
the installed function, and a `_later_revision_fields` that answers from them (the original,
kept under another name, for anything else), so a session loads only its own version's models.

Kept as data here (not a checked-in YAML) so tests/test_build_mcp_lean.py can check the
names against the installed mcp and run the client path with these exact sources.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from lean_common import LeanError, installed, loads
from lean_common import package_config as _package_config

LAZY_INIT = '''"""{package}, as frozen into gantry: the same names, each imported on first use
(build/mcp_lean.py explains why)."""

import importlib as _importlib

_WHERE = {where!r}
_FALLBACK = {fallback!r}


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None and _FALLBACK is not None and not name.startswith("__"):
        module = _FALLBACK
    if module is None:
        raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")
    value = getattr(_importlib.import_module(module), name) if module != "." + name else (
        _importlib.import_module(__name__ + module))
    globals()[name] = value
    return value


__all__ = {all_names!r}
'''

# name → module it comes from ("." + name: a submodule of the package itself).
MCP = {
    "types": ".types",
    "InputRequiredRoundsExceededError": "mcp.client._input_required",
    "Client": "mcp.client.client",
    "ClientSession": "mcp.client.session",
    "ClientSessionGroup": "mcp.client.session_group",
    "StdioServerParameters": "mcp.client.stdio",
    "stdio_client": "mcp.client.stdio",
    "ServerSession": "mcp.server.session",
    "stdio_server": "mcp.server.stdio",
    "MCPDeprecationWarning": "mcp.shared.exceptions",
    "MCPError": "mcp.shared.exceptions",
    "UrlElicitationRequiredError": "mcp.shared.exceptions",
    "InvalidUriTemplate": "mcp.shared.uri_template",
    "UriTemplate": "mcp.shared.uri_template",
    "SamplingRole": None,  # mcp_types.Role, renamed
}
MCP_CLIENT = {
    "InputRequiredRoundsExceededError": "mcp.client._input_required",
    "Transport": "mcp.client._transport",
    "CacheConfig": "mcp.client.caching",
    "CacheEntry": "mcp.client.caching",
    "CacheKey": "mcp.client.caching",
    "CacheMode": "mcp.client.caching",
    "InMemoryResponseCacheStore": "mcp.client.caching",
    "ResponseCacheStore": "mcp.client.caching",
    "Client": "mcp.client.client",
    "ClientRequestContext": "mcp.client.context",
    "ClaimContext": "mcp.client.extension",
    "ClientExtension": "mcp.client.extension",
    "NotificationBinding": "mcp.client.extension",
    "ResultClaim": "mcp.client.extension",
    "UnexpectedClaimedResult": "mcp.client.extension",
    "advertise": "mcp.client.extension",
    "ClientSession": "mcp.client.session",
    "IncomingMessage": "mcp.client.session",
}
MCP_SERVER = {
    "CacheHint": "mcp.server.caching",
    "ServerRequestContext": "mcp.server.context",
    "NotificationOptions": "mcp.server.lowlevel",
    "Server": "mcp.server.lowlevel",
    "MCPServer": "mcp.server.mcpserver",
    "InitializationOptions": "mcp.server.models",
}


def lazy_init(package: str, where: dict[str, str | None], fallback: str | None,
              all_names: list[str]) -> str:
    """Source of a package __init__ exporting `all_names` lazily."""
    fixed = {k: v for k, v in where.items() if v is not None}
    return LAZY_INIT.format(package=package, where=fixed, fallback=fallback,
                            all_names=sorted(all_names))


def sources(mcp_all: list[str]) -> dict[str, str]:
    """Module name → replacement source for the three package inits."""
    mcp_where = dict(MCP)
    # Everything else mcp/__init__ exports comes from mcp_types; SamplingRole is Role there.
    init = lazy_init("mcp", mcp_where, "mcp_types", mcp_all).replace(
        "    module = _WHERE.get(name)\n",
        "    if name == \"SamplingRole\":\n"
        "        value = _importlib.import_module(\"mcp_types\").Role\n"
        "        globals()[name] = value\n"
        "        return value\n"
        "    module = _WHERE.get(name)\n",
    )
    return {
        "mcp": init,
        "mcp.client": lazy_init("mcp.client", MCP_CLIENT, None, list(MCP_CLIENT)),
        "mcp.server": lazy_init("mcp.server", MCP_SERVER, None, list(MCP_SERVER)),
        LOWLEVEL: lowlevel_server_source(),
        METHODS: methods_source(),
        SESSION: session_source(),
    }


# ------------------------------------------------------------ the low-level server, web-free
LOWLEVEL = "mcp.server.lowlevel.server"
# Imports of these (a module or anything under it) pull starlette, sse-starlette, uvicorn,
# python-multipart or click in; measured by importing each of server.py's imports alone.
WEB_IMPORTS = (
    "starlette",
    "mcp.server.auth.middleware",
    "mcp.server.auth.routes",
    "mcp.server.streamable_http",
    "mcp.server.streamable_http_manager",
    "mcp.server.transport_security",
)

# mcp's modules that build/build.py keeps Nuitka from following (with the web stack itself):
# each imports the web stack at module level, and nothing gantry runs imports them —
# tests/test_build_mcp_lean.py checks that against the client path and `gantry mcp-memory`.
# The authorization server's endpoints (mcp.server.auth.handlers) are among them: gantry is an
# OAuth client only (mcp.client.auth, which imports none of the server half).
NOT_FOLLOWED = (*WEB_IMPORTS[1:], "mcp.server._streamable_http_modern",
                "mcp.server.auth.handlers", "mcp.server.auth.json_response",
                "mcp.server.mcpserver", "mcp.server.fastmcp", "mcp.server.sse")


def _is_web(module: str) -> bool:
    return any(module == w or module.startswith(w + ".") for w in WEB_IMPORTS)


def lowlevel_server_source(path: Path | None = None) -> str:
    """The installed server.py with its web-stack imports moved into the functions using them.

    A name imported from the web stack may be used only inside function bodies; simple
    constants used as defaults (ints, strings) are inlined with the installed value. Anything
    else fails the build with LeanError instead of shipping a module that breaks at run time.
    """
    if path is None:
        path = installed(LOWLEVEL)
    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body):
        raise LeanError(f"{path}: no `from __future__ import annotations`")
    lazy: dict[str, tuple[str, str]] = {}  # local name -> (module, imported name)
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import) and any(_is_web(a.name) for a in node.names):
            raise LeanError(f"{path}:{node.lineno}: plain `import` of the web stack")
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                and _is_web(node.module)):
            body.append(node)
            continue
        for alias in node.names:
            local = alias.asname or alias.name
            value = getattr(importlib.import_module(node.module), alias.name)
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                body.append(ast.parse(f"{local} = {value!r}").body[0])
            else:
                lazy[local] = (node.module, alias.name)
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        scope = node.body if isinstance(node, ast.ClassDef) else [node]
        for stmt in scope:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defaults = ast.Module(body=[ast.Expr(d) for d in (
                    *stmt.args.defaults, *stmt.args.kw_defaults, *stmt.decorator_list)
                    if d is not None], type_ignores=[])
                hit = loads([defaults]) & set(lazy)
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} evaluated at def time")
                used = sorted(loads([ast.Module(body=stmt.body, type_ignores=[])])
                              & set(lazy))
                if used:
                    imports = [ast.ImportFrom(module=lazy[n][0], names=[ast.alias(
                        name=lazy[n][1], asname=None if lazy[n][1] == n else n)], level=0)
                        for n in used]
                    at = 1 if (stmt.body and isinstance(stmt.body[0], ast.Expr)
                               and isinstance(stmt.body[0].value, ast.Constant)) else 0
                    stmt.body[at:at] = imports
            else:
                hit = loads([ast.Module(body=[stmt], type_ignores=[])]) & set(lazy)
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} used outside a function")
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# ------------------------------------------------ mcp_types.methods, one protocol version at a time
METHODS = "mcp_types.methods"
VERSION_MODULE = re.compile(r"mcp_types\._v\d")

METHODS_PRELUDE = '''
import collections.abc as _abc


class _LazyModule:
    """A protocol-version module, imported on first attribute access (build/mcp_lean.py)."""

    __slots__ = ("_load", "_module")

    def __init__(self, load):
        self._load = load
        self._module = None

    def __getattr__(self, name):
        module = self._module
        if module is None:
            module = self._module = self._load()
        return getattr(module, name)


class _LazyMap(_abc.Mapping):
    """A read-only map whose values are computed on first lookup, then kept; keys, `in`,
    `len` and iteration never compute one (build/mcp_lean.py)."""

    __slots__ = ("_thunks", "_values")

    def __init__(self, thunks):
        self._thunks = thunks
        self._values = {}

    def __getitem__(self, key):
        values = self._values
        if key in values:
            return values[key]
        value = values[key] = self._thunks[key]()
        return value

    def __contains__(self, key):
        return key in self._thunks

    def __iter__(self):
        return iter(self._thunks)

    def __len__(self):
        return len(self._thunks)

    def __repr__(self):
        return f"{type(self).__name__}({dict(self)!r})"

    def copy(self):
        return dict(self)

    def __or__(self, other):
        return dict(self) | other if isinstance(other, _abc.Mapping) else NotImplemented

    def __ror__(self, other):
        return dict(other) | dict(self) if isinstance(other, _abc.Mapping) else NotImplemented
'''


def _import_time(node: ast.AST) -> list[ast.AST]:
    """The nodes under `node` that run when the module is imported: not function or lambda
    bodies, not annotations (`from __future__ import annotations` keeps them strings)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        found.append(n)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(d for d in (*n.args.defaults, *n.args.kw_defaults) if d is not None)
            if not isinstance(n, ast.Lambda):
                stack.extend(n.decorator_list)
            continue
        if isinstance(n, ast.AnnAssign):
            stack.extend(x for x in (n.target, n.value) if x is not None)
            continue
        if isinstance(n, ast.arg):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return found


def _lazy_map(value: ast.expr | None, versions: set[str]) -> ast.Call | None:
    """`MappingProxyType({k: <uses a version name>, ...})` → `_LazyMap({k: lambda: ..., ...})`."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "MappingProxyType" and len(value.args) == 1
            and not value.keywords and isinstance(value.args[0], ast.Dict)):
        return None
    table = value.args[0]
    if not any(loads([v]) & versions for v in table.values):
        return None
    thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                            kw_defaults=[], defaults=[]), body=v)
              for v in table.values]
    return ast.Call(func=ast.Name("_LazyMap", ast.Load()),
                    args=[ast.Dict(keys=table.keys, values=thunks)], keywords=[])


def methods_source(path: Path | None = None) -> str:
    """The installed mcp_types/methods.py with its version modules imported on first use.

    `import mcp_types._vX as name` becomes a lazy proxy and each module-level
    `MappingProxyType({...})` whose values use one a `_LazyMap` of lambdas. Anything else that
    would touch a version module (or a lazy map's values) at import time fails the build with
    LeanError naming the line, so an mcp_types upgrade cannot quietly break or un-lazy it.
    """
    if path is None:
        path = installed(METHODS)
    tree = ast.parse(path.read_text())
    future = next((i for i, n in enumerate(tree.body) if isinstance(n, ast.ImportFrom)
                   and n.module == "__future__"
                   and any(a.name == "annotations" for a in n.names)), None)
    if future is None:
        raise LeanError(f"{path}: no `from __future__ import annotations`")
    versions: set[str] = set()
    maps: set[str] = set()
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import) and any(VERSION_MODULE.match(a.name) for a in node.names):
            if len(node.names) != 1 or node.names[0].asname is None:
                raise LeanError(f"{path}:{node.lineno}: expected `import mcp_types._vX as name`")
            module, local = node.names[0].name, node.names[0].asname
            load = f"_load_{local}"
            body.extend(ast.parse(f"def {load}():\n    import {module} as module\n"
                                  f"    return module\n\n\n{local} = _LazyModule({load})\n").body)
            versions.add(local)
            continue
        if isinstance(node, ast.ImportFrom) and (
                VERSION_MODULE.match(node.module or "") or (node.module == "mcp_types" and any(
                    VERSION_MODULE.match(f"mcp_types.{a.name}") for a in node.names))):
            raise LeanError(f"{path}:{node.lineno}: `from ... import` of a version module")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            lazy = _lazy_map(node.value, versions)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if lazy is not None:
                if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                    raise LeanError(f"{path}:{node.lineno}: a lazy map needs one plain name")
                node.value = lazy
                maps.add(targets[0].id)
        body.append(node)
    if not versions:
        raise LeanError(f"{path}: no `import mcp_types._vX as name` left to make lazy")
    prelude = ast.parse(METHODS_PRELUDE).body
    tree.body = [*body[:future + 1], *prelude, *body[future + 1:]]
    for node in body:
        parents = {id(c): p for p in ast.walk(node) for c in ast.iter_child_nodes(p)}
        for n in _import_time(node):
            if not isinstance(n, ast.Name) or isinstance(n.ctx, ast.Store):
                continue
            if n.id in versions:
                raise LeanError(f"{path}:{n.lineno}: {n.id} used at import time")
            if n.id in maps and not _keys_only(n, parents.get(id(n)), node):
                raise LeanError(f"{path}:{n.lineno}: {n.id}'s values used at import time")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def version_modules(path: Path | None = None) -> list[str]:
    """The version modules methods_source imports lazily; build/build.py includes them by name
    too, so the binary has them even if Nuitka did not follow the function-level imports."""
    if path is None:
        path = installed(METHODS)
    return sorted(a.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.Import)
                  for a in n.names if VERSION_MODULE.match(a.name))


def _keys_only(name: ast.Name, parent: ast.AST | None, stmt: ast.stmt) -> bool:
    """Whether this import-time use of a lazy map reads no value: iterated (its keys), the
    right of `in`, or bound as a function default."""
    if isinstance(parent, ast.comprehension) and parent.iter is name:
        return True
    if isinstance(parent, ast.Compare) and name in parent.comparators and all(
            isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops):
        return True
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent is stmt.args


def module_path(module: str, root: Path) -> Path:
    """Where `module`'s replacement goes under a copy of site-packages at `root`."""
    package = root / module.replace(".", "/")
    return (package.with_suffix(".py") if module in (LOWLEVEL, METHODS, SESSION)
            else package / "__init__.py")


def package_config(mcp_all: list[str]) -> str:
    """A Nuitka user package configuration (YAML) replacing the inits, server.py,
    mcp_types/methods.py and mcp/client/session.py."""
    codes = sources(mcp_all)
    why = {module: "keep the server-side web stack out of a client" for module in codes}
    why[METHODS] = "import a protocol version's models on first use"
    why[SESSION] = "later-revision result fields precomputed, no newer models loaded"
    return _package_config("mcp_lean.py", codes, why)


# ---------------------------------------- mcp.client.session, newer revisions' fields precomputed
SESSION = "mcp.client.session"
LATER = "_later_revision_fields"

SESSION_APPENDIX = '''

# gantry (build/mcp_lean.py): what {name} answers for every (method, version) row of
# mcp_types.methods.SERVER_RESULTS, computed at build time by the installed function, so a
# session never imports a newer revision's models just to learn their field names.
_GANTRY_LATER_REVISION_FIELDS = {{key: frozenset(keys) for key, keys in {table!r}.items()}}
_gantry_computed_later_revision_fields = {name}


def {name}(method, version):
    found = _GANTRY_LATER_REVISION_FIELDS.get((method, version))
    if found is None:
        return _gantry_computed_later_revision_fields(method, version)
    return found
'''


def later_revision_table() -> dict[tuple[str, str], tuple[str, ...]]:
    """The installed `_later_revision_fields` for every key of SERVER_RESULTS (the only pairs
    for which it reads a row; for any other it returns an empty set without reading one)."""
    try:
        session = importlib.import_module(SESSION)
        methods = importlib.import_module(METHODS)
    except ImportError as exc:
        raise LeanError(f"{SESSION} is not importable: {exc}") from None
    compute = getattr(session, LATER, None)
    if compute is None:
        raise LeanError(f"{SESSION} no longer has {LATER}")
    return {key: tuple(sorted(compute(*key))) for key in methods.SERVER_RESULTS}


def _later_references(tree: ast.Module, path: Path) -> None:
    """LeanError unless `tree` defines LATER once at module level and uses it only as the
    callee of a plain call inside a function body (so nothing holds the original object)."""
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == LATER]
    if len(defs) != 1:
        raise LeanError(f"{path}: expected one module-level `def {LATER}`, found {len(defs)}")
    # (node, parent, inside a function body)
    stack: list[tuple[ast.AST, ast.AST | None, bool]] = [(tree, None, False)]
    while stack:
        node, parent, inside = stack.pop()
        line = getattr(node, "lineno", getattr(parent, "lineno", "?"))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                node.name == LATER and node is not defs[0]):
            raise LeanError(f"{path}:{line}: a second definition of {LATER}")
        if isinstance(node, (ast.Global, ast.Nonlocal)) and LATER in node.names:
            raise LeanError(f"{path}:{line}: `global`/`nonlocal` {LATER}")
        if isinstance(node, ast.alias) and LATER in (node.name, node.asname):
            raise LeanError(f"{path}:{line}: {LATER} imported or aliased")
        if isinstance(node, ast.Attribute) and node.attr == LATER:
            raise LeanError(f"{path}:{line}: {LATER} reached as an attribute")
        if isinstance(node, ast.Constant) and node.value == LATER:
            raise LeanError(f"{path}:{line}: {LATER} named in a string (getattr/globals?)")
        if isinstance(node, ast.Name) and node.id == LATER and not (
                inside and isinstance(node.ctx, ast.Load) and isinstance(parent, ast.Call)
                and parent.func is node):
            raise LeanError(f"{path}:{line}: {LATER} referenced other than by a plain "
                                "call inside a function body")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outer = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            if not isinstance(node, ast.Lambda):
                outer += [*node.decorator_list, *(a.annotation for a in (
                    *node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg) if a is not None and a.annotation)]
                if node.returns is not None:
                    outer.append(node.returns)
            stack.extend((n, node, inside) for n in outer)
            body = node.body if isinstance(node.body, list) else [node.body]
            stack.extend((n, node, True) for n in body)
            continue
        stack.extend((child, node, inside) for child in ast.iter_child_nodes(node))


def session_source(path: Path | None = None,
                   table: dict[tuple[str, str], tuple[str, ...]] | None = None) -> str:
    """The installed mcp/client/session.py with `_later_revision_fields` answered from a
    build-time table (`table`, default: later_revision_table()). LeanError, naming the line,
    if the installed file no longer has the shape this relies on."""
    if path is None:
        path = installed(SESSION)
    source = path.read_text()
    _later_references(ast.parse(source), path)
    if table is None:
        table = later_revision_table()
    return source.rstrip("\n") + "\n" + SESSION_APPENDIX.format(name=LATER, table=table)
