"""`gantry tools list`: start the manifest's servers, print what the model would see, stop.

Distroless has no shell, so this is how an operator checks a manifest: one line per tool
(name, estimated schema tokens, first line of the description) and a total.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import anyio


async def _collect(specs: Any, environ: Mapping[str, str]) -> list[Any]:
    from gantry.mcp.host import Host, ServerStartError
    from gantry.tools import Registry

    host = Host(specs, Registry(), environ)
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


def main(env_file: str | None) -> int:
    from gantry import config
    from gantry import log as logsetup
    from gantry.mcp.manifest import DEFAULT_PATH, ManifestError, load

    try:
        environ = config.merged_environ(env_file)
    except config.ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    logsetup.setup(environ.get("LOG_LEVEL", "warning").strip().lower() or "warning",
                   [environ.get(k, "") for k in config.SECRETS])
    path = environ.get("MCP_MANIFEST", "").strip() or DEFAULT_PATH
    try:
        specs = load(path, environ)
    except ManifestError as exc:
        print(f"gantry: {exc}", file=sys.stderr)
        return 1
    if not specs:
        print(f"0 tools (no MCP servers in {path})")
        return 0
    from gantry.mcp.convert import first_line
    from gantry.mcp.host import ServerStartError, schema_tokens

    try:
        listed = anyio.run(_collect, specs, environ)
    except ServerStartError as exc:
        print(f"gantry: {exc}", file=sys.stderr)
        return 1
    width = max((len(t.exposed) for t in listed), default=0)
    total = 0
    for tool in sorted(listed, key=lambda t: t.exposed):
        tokens = schema_tokens(tool)
        total += tokens
        print(f"{tool.exposed:<{width}}  ~{tokens:>5} tokens  {first_line(tool.description)}")
    print(f"{len(listed)} tools from {len(specs)} servers, ~{total} tokens of schemas per "
          "request (est.)")
    sys.stdout.flush()
    return 0
