"""One manifest server, composed: its supervisor, its call path, its tools, its prompts, its
resources and its watches."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import anyio
from anyio.abc import TaskStatus

from gantry.mcp import convert, era
from gantry.mcp.auth import AuthHook
from gantry.mcp.breaker import Breaker
from gantry.mcp.caller import Caller
from gantry.mcp.catalog import Catalog, ListedTool
from gantry.mcp.convert import CallResult
from gantry.mcp.elicitation import Asking, Elicitor
from gantry.mcp.link import Link
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.prompts import PromptListing
from gantry.mcp.resource_tool import ResourceListing
from gantry.mcp.resources import Subscriptions
from gantry.mcp.supervise import Supervisor
from gantry.mcp.validate import ArgsValidator
from gantry.tools import Registry


class Server:
    """One manifest server: a Supervisor keeps its session, a Caller calls its tools, a
    Catalog offers them, listings hold its prompts and resources, Subscriptions its watched
    resources. `on_resources`: called when its resources were listed (the resource tools)."""

    def __init__(
        self, spec: ServerSpec, registry: Registry, environ: Mapping[str, str],
        hidden: Collection[str] = (), auth: AuthHook | None = None,
        elicitor: Elicitor | None = None, keep: convert.Keep | None = None,
        on_resources: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.catalog = Catalog(spec.name, registry, hidden, self.call)
        self.watches = Subscriptions(spec)
        self.asking = Asking(spec.name, elicitor)
        self.prompts = PromptListing(spec.name)
        self.resource_listing = ResourceListing(spec, private=bool(hidden),
                                                on_change=on_resources)
        self.supervisor = Supervisor(spec, environ, auth, self.catalog, self.watches,
                                     self.asking, (self.prompts, self.resource_listing))
        self.caller = Caller(self.supervisor, self.asking, keep)
        self.catalog.call = self.caller.call  # the registered tools call it without a hop here
        self.caller.readable = lambda: self.resource_listing.offered
        # The parts' objects that are never replaced, under the names Host's users read.
        self.login: Any = self.supervisor.login
        self.stats = self.caller.stats
        self.hidden = self.catalog.hidden
        self.inflight = self.asking.inflight
        self.subscriptions = self.watches.uris

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The supervisor's task (Supervisor.run)."""
        await self.supervisor.run(task_status=task_status)

    async def call(
        self, tool: str, args: dict[str, Any], *, validator: ArgsValidator | None = None
    ) -> CallResult:
        """Call `tool` on this server (Caller.call); every failure is an error result."""
        return await self.caller.call(tool, args, validator=validator)

    async def subscribe(self, uri: str) -> None:
        """Subscribe to `uri` now if up (raising on failure), and after every restart."""
        await self.watches.subscribe(self.supervisor.session, uri)

    async def read_resource(self, uri: str) -> CallResult:
        return await self.watches.read(self.supervisor.session, self.supervisor.state, uri)

    @property
    def breaker(self) -> Breaker:
        return self.supervisor.breaker

    @breaker.setter
    def breaker(self, breaker: Breaker) -> None:
        """A breaker with other thresholds (the tests set one)."""
        self.supervisor.breaker = breaker

    @property
    def session(self) -> Any:
        return self.supervisor.session

    @property
    def link(self) -> Link | None:
        return self.supervisor.link

    @property
    def state(self) -> str:
        return self.supervisor.state

    @property
    def error(self) -> str:
        return self.supervisor.error

    @property
    def restarts(self) -> int:
        return self.supervisor.restarts

    @property
    def instructions(self) -> str:
        return self.supervisor.instructions

    @property
    def protocol(self) -> str:
        """The MCP protocol version its last session spoke ("" before one came up)."""
        return self.supervisor.protocol

    @property
    def listed(self) -> dict[str, ListedTool]:
        return self.catalog.listed

    @property
    def can_subscribe(self) -> bool:
        return self.watches.can_subscribe

    @property
    def _probe(self) -> bool:
        """A ping the supervisor still owes (after a call timed out)."""
        return self.supervisor._probe

    def status(self) -> str:
        notes = self.catalog.notes()
        tools = f"{len(self.listed)} tools" + (f" ({', '.join(notes)})" if notes else "")
        calls, errors = self.caller.totals()
        # The era before the restarts: /status's block ends with "restarts" (its readers wait
        # for it).
        speaks = f"{era.describe(self.protocol)}, " if self.protocol else ""
        return (f"{self.name}: {self.supervisor.described_state()}, {tools}, {calls} calls, "
                f"{errors} errors, {speaks}{self.restarts} restarts")
