"""`gantry tools list`: the tools the model is offered, built the way `gantry run` builds them.

Distroless has no shell, so this is how an operator sees what each request carries: the
built-in memory_*, cron_*, watch_* and tools_search tools next to the MCP servers' (the memory
backend's protocol tools left out, as in a run), one line each with its estimated schema
tokens, then the same `tools offered:` line `/status` prints. The servers are started and
stopped again; the database is an in-memory one, so nothing on disk is touched.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry.config import Config


class ListingError(Exception):
    """Configuration, the manifest or a server failed; `str()` is the message to print."""


@dataclass(frozen=True)
class Listing:
    """What `gantry tools list` prints: the offer, the routed catalog, what is held back."""

    offer: Any  # gantry.tools.Offer
    catalog: list[Any]  # routed MCP tools beyond the offer (empty when everything is offered)
    task_only: list[str]  # MCP tools that need task-augmented calls: never offered
    unavailable: list[tuple[str, str]] = field(default_factory=list)  # optional servers down
    eras: list[tuple[str, str]] = field(default_factory=list)  # (server, protocol version)


class _NoChannel:
    """Stands in for the channel so the cron tools can be built; nothing is ever pushed."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def push(self, chat_id: str, text: str) -> None:
        raise RuntimeError("gantry tools list pushes nothing")

    def can_push(self, chat_id: str) -> bool:
        return False


async def _never(*_args: Any) -> str:
    raise RuntimeError("gantry tools list runs no turn")


async def collect(cfg: Config, environ: Mapping[str, str]) -> Listing:
    """Register every tool a `gantry run` with `cfg` registers, then ask `offered()`."""
    import apsw

    from gantry import db
    from gantry.memory.wiring import build as build_memory
    from gantry.runtime import BootError, build_router, load_mcp, start_mcp
    from gantry.tools import Registry, offered

    registry = Registry(result_max_chars=cfg.tool_result_max_chars)
    conn = apsw.Connection(":memory:")
    db.migrate(conn)
    failed: Exception | None = None
    down: list[tuple[str, str]] = []
    try:
        host = load_mcp(cfg, environ, registry)
        router = build_router(cfg, registry, host)
        async with anyio.create_task_group() as tg:
            try:  # caught in here, not as an exception group outside
                if host is not None:
                    await start_mcp(host, tg)
                    down = host.unavailable()  # optional servers not up (not after the stop)
                if cfg.cron_enabled:
                    from gantry import cron

                    scheduler = cron.setup(cfg, conn, registry, _never, _NoChannel(cfg.channel))
                    if host is not None and cfg.watch_max > 0:
                        from gantry import watch

                        watch.setup(cfg, conn, registry, host, scheduler.ticker,
                                    lambda chat_id: False)
                await build_memory(cfg, conn, registry, None, None, host)
                from gantry.skills.wiring import setup as setup_skills

                setup_skills(cfg.persona_dir, registry, router)
            except (BootError, ValueError) as exc:  # ValueError: a bad MEMORY_BACKEND
                failed = exc
            tg.cancel_scope.cancel()
    except BootError as exc:
        failed = exc
    finally:
        conn.close()
    if failed is not None:
        raise ListingError(f"gantry: {failed}")
    offer = offered(registry, router)
    shown = set(offer.names)
    catalog = [t for t in registry.tools() if offer.routed and t.source.mcp
               and t.name not in shown]
    task_only = sorted(lt.exposed for s in (host.servers.values() if host else ())
                       for lt in s.listed.values()
                       if lt.needs_task and lt.name not in s.hidden and not s.catalog.runs_tasks)
    eras = [(s.name, s.protocol) for s in (host.servers.values() if host else ()) if s.protocol]
    return Listing(offer, catalog, task_only, down, eras)


def _line(tool: Any, width: int, mark: str) -> str:
    from gantry.mcp.convert import first_line

    return f"{tool.name:<{width}}  ~{tool.tokens():>5} tokens  {mark:<12}  " + first_line(
        tool.description)


def _mark(tool: Any) -> str:
    """Where a tool comes from: built in, `routing` (tools_search), or its MCP server."""
    from gantry.tools import ROUTING

    if tool.source == ROUTING:
        return ROUTING.name
    return "built in" if tool.builtin else tool.source.name


def main(env_file: str | None) -> int:
    from gantry import config
    from gantry import log as logsetup

    try:
        environ = config.merged_environ(env_file)
        cfg = config.load(environ, offline=True)
    except config.ConfigError as exc:
        print(logsetup.strip_url_credentials(str(exc)), file=sys.stderr)
        return 1
    logsetup.setup(environ.get("LOG_LEVEL", "warning").strip().lower() or "warning",
                   [environ.get(k, "") for k in config.SECRETS])
    try:
        listing = anyio.run(collect, cfg, environ)
    except ListingError as exc:
        print(exc, file=sys.stderr)
        return 1
    tools = [*listing.offer.tools, *listing.catalog]
    width = max((len(t.name) for t in tools), default=0)
    for tool in listing.offer.tools:
        print(_line(tool, width, _mark(tool)))
    for tool in listing.catalog:
        print(_line(tool, width, f"{tool.source.name}, routed"))
    for name in listing.task_only:
        print(f"not offered: {name} (it can only be called as a task, and its server "
              "offers no tasks)")
    from gantry.mcp.era import describe as era

    for server, version in listing.eras:
        print(f"MCP server {server} speaks {era(version)}")
    for server, error in listing.unavailable:
        print(f"not connected: MCP server {server} (optional; its tools are missing): {error}")
    print(listing.offer.summary())
    sys.stdout.flush()
    return 0
