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

Kept as data here (not a checked-in YAML) so tests/test_build_mcp_lean.py can check the
names against the installed mcp and run the client path with these exact sources.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

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
NOT_FOLLOWED = (*WEB_IMPORTS[1:], "mcp.server._streamable_http_modern",
                "mcp.server.auth.json_response", "mcp.server.mcpserver", "mcp.server.fastmcp",
                "mcp.server.sse")


class LeanError(RuntimeError):
    """The installed server.py no longer has the shape the rewrite relies on."""


def _is_web(module: str) -> bool:
    return any(module == w or module.startswith(w + ".") for w in WEB_IMPORTS)


def _used_names(node: ast.AST) -> set[str]:
    """Names a function's body and defaults load (annotations are strings: not evaluated)."""
    found: set[str] = set()
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.arg):
            continue  # its annotation is never evaluated (`from __future__ import annotations`)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(n.body)
            stack.extend(n.decorator_list)
            stack.extend(d for d in (*n.args.defaults, *n.args.kw_defaults) if d is not None)
            continue
        if isinstance(n, ast.AnnAssign):
            stack.extend(x for x in (n.target, n.value) if x is not None)
            continue
        if isinstance(n, ast.Name):
            found.add(n.id)
        stack.extend(ast.iter_child_nodes(n))
    return found


def lowlevel_server_source(path: Path | None = None) -> str:
    """The installed server.py with its web-stack imports moved into the functions using them.

    A name imported from the web stack may be used only inside function bodies; simple
    constants used as defaults (ints, strings) are inlined with the installed value. Anything
    else fails the build with LeanError instead of shipping a module that breaks at run time.
    """
    if path is None:
        spec = importlib.util.find_spec("mcp")
        if spec is None or not spec.submodule_search_locations:
            raise LeanError("mcp is not installed")
        path = Path(next(iter(spec.submodule_search_locations))) / "server/lowlevel/server.py"
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
                hit = _used_names(defaults) & set(lazy)
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} evaluated at def time")
                used = sorted(_used_names(ast.Module(body=stmt.body, type_ignores=[]))
                              & set(lazy))
                if used:
                    imports = [ast.ImportFrom(module=lazy[n][0], names=[ast.alias(
                        name=lazy[n][1], asname=None if lazy[n][1] == n else n)], level=0)
                        for n in used]
                    at = 1 if (stmt.body and isinstance(stmt.body[0], ast.Expr)
                               and isinstance(stmt.body[0].value, ast.Constant)) else 0
                    stmt.body[at:at] = imports
            else:
                hit = _used_names(ast.Module(body=[stmt], type_ignores=[])) & set(lazy)
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} used outside a function")
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def module_path(module: str, root: Path) -> Path:
    """Where `module`'s replacement goes under a copy of site-packages at `root`."""
    package = root / module.replace(".", "/")
    return package / "__init__.py" if module != LOWLEVEL else package.with_suffix(".py")


def package_config(mcp_all: list[str]) -> str:
    """A Nuitka user package configuration (YAML) replacing the inits and server.py."""
    import json

    lines = ["# Generated by build/build.py from build/mcp_lean.py; do not edit.", ""]
    for module, code in sources(mcp_all).items():
        lines.append(f"- module-name: '{module}'")
        lines.append("  anti-bloat:")
        lines.append("    - description: 'gantry: keep the server-side web stack out of a client'")
        lines.append(f"      module_code: {json.dumps(code)}")
        lines.append("")
    return "\n".join(lines)
