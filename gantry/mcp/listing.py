"""`gantry tools search`: start the manifest's servers, rank their tools for a query, stop.

(`gantry tools list`, which needs the built-in tools too, lives in gantry.toolset.)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import anyio


async def _collect(specs: Any, environ: Mapping[str, str]) -> list[Any]:
    import os

    from gantry.mcp.auth import oauth_hook
    from gantry.mcp.host import Host, ServerStartError
    from gantry.tools import Registry

    data_dir = environ.get("DATA_DIR", "").strip() or "/data"
    host = Host(specs, Registry(), environ,
                auth=oauth_hook(specs, os.path.join(data_dir, "gantry.db")))
    failed: ServerStartError | None = None
    async with anyio.create_task_group() as tg:
        try:
            await host.start(tg)
        except ServerStartError as exc:  # caught here, not as an exception group outside
            failed = exc
        listed = [t for name in host.names() for t in host.tools(name)]
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return listed


class ListingError(Exception):
    """The manifest or a server failed; `str()` is the one line to print."""


def _catalog(env_file: str | None) -> tuple[list[Any], int, str]:
    """(the tools the manifest's servers list, how many servers, the manifest path)."""
    from gantry import config
    from gantry import log as logsetup
    from gantry.mcp.manifest import DEFAULT_PATH, ManifestError, load

    try:
        environ = config.merged_environ(env_file)
    except config.ConfigError as exc:
        raise ListingError(str(exc)) from None
    logsetup.setup(environ.get("LOG_LEVEL", "warning").strip().lower() or "warning",
                   [environ.get(k, "") for k in config.SECRETS])
    path = environ.get("MCP_MANIFEST", "").strip() or DEFAULT_PATH
    try:
        specs = load(path, environ)
    except ManifestError as exc:
        raise ListingError(f"gantry: {exc}") from None
    if not specs:
        return [], 0, path
    from gantry.mcp.host import ServerStartError

    try:
        return anyio.run(_collect, specs, environ), len(specs), path
    except ServerStartError as exc:
        raise ListingError(f"gantry: {exc}") from None


def search(env_file: str | None, query: str, catalog: str | None, top: int,
           queries: str | None) -> int:
    """`gantry tools search`: rank a catalog file, or the manifest's servers' tools."""
    from gantry.mcp.routing import CatalogError, ToolDoc, load_catalog, search_main

    if not query and not queries:
        print("gantry tools search: give a QUERY or --queries FILE", file=sys.stderr)
        return 2
    try:
        if catalog is not None:
            docs = load_catalog(catalog)
        else:
            listed, _servers, _path = _catalog(env_file)
            docs = [ToolDoc(t.exposed, t.description, t.schema) for t in listed]
    except (CatalogError, ListingError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return search_main(docs, query, queries, max(1, top))

