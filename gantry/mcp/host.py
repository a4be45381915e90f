"""The MCP host: every manifest server (server.py), started at boot, supervised until shutdown.

Public API for other packages (memory's MCP backend): `Host.names()`, `Host.call(server, tool,
args)`, `Host.tools(server)`, `Host.instructions(server)`; watches add `Host.can_subscribe`,
`Host.subscribe`, `Host.read_resource` and `Host.on_resource_updated` (resubscribed after every
restart); the /prompt commands `Host.prompts` and `Host.get_prompt`. A server's parts:
supervise.py (its connection), caller.py (its calls), catalog.py (its tools), prompts.py (its
prompts), resource_tool.py (its resources, for the model), resources.py (its subscriptions),
elicitation.py (its questions to the user).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup

from gantry.mcp import convert
from gantry.mcp.auth import AuthHook
from gantry.mcp.catalog import ListedTool
from gantry.mcp.convert import CallResult
from gantry.mcp.elicitation import Elicitor
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.prompts import Got, ListedPrompt, PromptError, get_prompt, prompt_message
from gantry.mcp.resource_tool import ResourceTools
from gantry.mcp.server import Server
from gantry.mcp.trouble import ServerStartError, cause, describe
from gantry.tools import Registry

__all__ = ["CallResult", "Host", "ListedTool", "Server", "ServerStartError"]

log = logging.getLogger("gantry.mcp")


class Host:
    """Every manifest server, started concurrently at boot, supervised until shutdown."""

    def __init__(
        self, specs: Sequence[ServerSpec], registry: Registry, environ: Mapping[str, str],
        hidden: Mapping[str, Collection[str]] | None = None, *,
        auth: AuthHook | None = None, elicitor: Elicitor | None = None,
        keep: convert.Keep | None = None,
    ) -> None:
        """`hidden`: per server, MCP tool names not registered as model tools (the memory
        backend's protocol tools, which the builtin memory_* tools already route to).
        `auth`: gives a remote server's HTTP client its httpx2.Auth (None: no auth).
        `elicitor`: relays servers' questions to the turn's user (else none are asked).
        `keep`: where tool results' binary content is kept (gantry.outbox)."""
        hidden = hidden or {}
        self.elicitor = elicitor
        self.keep = keep
        self.registry = registry
        self.servers: dict[str, Server] = {}
        self.resource_tools = ResourceTools(registry, self.servers, keep)
        for s in specs:
            self.servers[s.name] = Server(s, registry, environ, hidden.get(s.name, ()), auth,
                                          elicitor, keep, self.resource_tools.update)

    def use_tasks(self, book: Any) -> None:
        """Record every server's task calls in `book` (a TaskBook): they survive a restart."""
        for server in self.servers.values():
            server.caller.tasks.book = book

    def names(self) -> list[str]:
        return list(self.servers)

    async def start(self, tg: TaskGroup) -> None:
        """Start every server concurrently in `tg`; raise ServerStartError naming each failure."""
        failures: list[str] = []

        async def one(server: Server) -> None:
            try:
                await tg.start(server.run)
            except Exception as exc:
                inner = cause(exc)
                failures.append(str(inner) if isinstance(inner, ServerStartError) else
                                f"MCP server {server.name!r} could not start: {describe(inner)}")

        started = time.monotonic()
        async with anyio.create_task_group() as boot:
            for server in self.servers.values():
                boot.start_soon(one, server)
        if failures:
            raise ServerStartError("\n".join(failures))
        log.info("mcp servers up", extra={
            "servers": {s.name: len(s.listed) for s in self.servers.values()},
            "ms": round((time.monotonic() - started) * 1000)})

    async def call(self, server: str, tool: str, args: dict[str, Any]) -> CallResult:
        """Call a tool by its MCP name (memory's MCP backend uses this)."""
        s = self.servers.get(server)
        if s is None:
            return CallResult(f"no MCP server named {server!r}", error=True)
        listed = next((t for t in s.listed.values() if t.name == tool), None)
        return await s.call(tool, args, validator=listed.validator if listed else None)

    def can_subscribe(self, server: str) -> bool:
        s = self.servers.get(server)
        return s is not None and s.can_subscribe

    async def subscribe(self, server: str, uri: str) -> None:
        await self.servers[server].subscribe(uri)

    def unsubscribe(self, server: str, uri: str) -> None:
        """Not subscribed again after the next restart (this session's subscription stays)."""
        s = self.servers.get(server)
        if s is not None:
            s.subscriptions.discard(uri)

    async def read_resource(self, server: str, uri: str) -> CallResult:
        s = self.servers.get(server)
        if s is None:
            return CallResult(f"no MCP server named {server!r}", error=True)
        return await s.read_resource(uri)

    def on_resource_updated(self, callback: Callable[[str, str], None]) -> None:
        """`callback(server, uri)` on notifications/resources/updated and after a restart
        resubscribed `uri`; it must not block (it runs in the session's reader)."""
        for s in self.servers.values():
            s.watches.on_updated = callback

    def prompts(self) -> list[tuple[str, ListedPrompt]]:
        """(server, prompt) for every prompt the servers list, in manifest order."""
        return [(s.name, p) for s in self.servers.values() for p in s.prompts.listed.values()]

    async def get_prompt(self, server: str, name: str, arguments: Mapping[str, str]) -> Got:
        """prompts/get, as the user's message (text bounded like a tool result); PromptError
        says why not."""
        s = self.servers.get(server)
        if s is None:
            raise PromptError(f"no MCP server named {server!r}")
        if s.session is None:
            raise PromptError(f"MCP server {server!r} is {s.state}; try again shortly")
        result = await get_prompt(s.session, server, s.spec.timeout_seconds, name, arguments)
        reader = server if s.resource_listing.offered else ""
        return prompt_message(result.messages, self.registry.result_max_chars, self.keep,
                              reader)

    def tools(self, server: str) -> list[ListedTool]:
        s = self.servers.get(server)
        return list(s.listed.values()) if s else []

    def instructions(self, server: str) -> str:
        s = self.servers.get(server)
        return s.instructions if s else ""

    def unavailable(self) -> list[tuple[str, str]]:
        """(name, last error) of each server without a session: an optional one that has
        not come up, or one being restarted."""
        return [(s.name, s.error or s.state) for s in self.servers.values() if s.session is None]

    def status_lines(self) -> list[str]:
        return [s.status() for s in self.servers.values()]

    def telemetry(self) -> dict[str, dict[str, Any]]:
        return {f"{s.name}/{tool}": st.summary()
                for s in self.servers.values() for tool, st in s.stats.items()}

