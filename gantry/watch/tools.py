"""The watch_* tools the model calls: add, list and cancel watches of the chat it talks in.

Like the cron tools, every watch is bound to the session of the turn that added it
(gantry.tools.CALLER), and list and cancel only see that session's watches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gantry.cron.schedule import describe
from gantry.cron.tools import number_arg, zone
from gantry.tools import CALLER, Source, Tool, ToolError
from gantry.watch.store import CapReached, Watch, WatchStore

SOURCE = Source("watch")
DEFAULT_INTERVAL = 900  # seconds: a quarter of an hour
MIN_INTERVAL = 60  # as for cron's "every N minutes"
MAX_INTERVAL = 7 * 86400
INSTRUCTION_MAX_CHARS = 4_000
LABEL_MAX_CHARS = 80


@dataclass
class WatchTools:
    store: WatchStore
    host: Any  # gantry.mcp.host.Host
    runner: Any  # gantry.watch.runner.Runner
    max_watches: int
    min_interval: int
    tz_name: str
    now: Callable[[], float]
    poke: Callable[[], None] = lambda: None
    can_push: Callable[[str], bool] = lambda chat_id: True

    def _session(self) -> str:
        session = CALLER.get()
        if not session:
            raise ToolError("watch tools work only inside a conversation turn")
        return session

    def _tool(self, exposed: str) -> tuple[str, Any]:
        """(server, listed tool) for a `{server}__{tool}` name the model is offered."""
        for server in self.host.names():
            hidden = self.host.servers[server].hidden
            for lt in self.host.tools(server):
                if lt.exposed == exposed and lt.name not in hidden and not lt.needs_task:
                    return server, lt
        raise ToolError(f"no MCP tool named {exposed!r}; give a tool you are offered, "
                        "named {server}__{tool}")

    def _interval(self, raw: Any) -> int:
        if raw is None:
            return max(DEFAULT_INTERVAL, self.min_interval)
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ToolError("`interval_seconds` must be a number of seconds")
        if not self.min_interval <= raw <= MAX_INTERVAL:
            raise ToolError(f"`interval_seconds` must be between {self.min_interval} and "
                            f"{MAX_INTERVAL} (a week)")
        return int(raw)

    async def add(self, args: dict[str, Any]) -> str:
        session = self._session()
        exposed, resource = args.get("tool"), args.get("resource")
        instruction = args.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise ToolError("`instruction` is required: what you should do with new items, "
                            "e.g. 'Tell the user which parcel shipped.'")
        if len(instruction) > INSTRUCTION_MAX_CHARS:
            raise ToolError(f"`instruction` is {len(instruction)} chars; keep it under "
                            f"{INSTRUCTION_MAX_CHARS}")
        if (exposed is None) == (resource is None):
            raise ToolError("give exactly one of `tool` (an MCP tool to poll) and `resource` "
                            "(an MCP resource URI)")
        id_field = args.get("id_field", "id")
        if not isinstance(id_field, str) or not id_field.strip():
            raise ToolError("`id_field` must be the name of the field that identifies an item")
        interval = self._interval(args.get("interval_seconds"))
        arguments = args.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ToolError("`arguments` must be an object: the tool's arguments")
        tool: str | None = None
        uri: str | None = None
        if exposed is not None:
            if not isinstance(exposed, str):
                raise ToolError("`tool` must be a tool name such as server__tool")
            server, listed = self._tool(exposed)
            tool = listed.name
            if listed.validator is not None and (bad := listed.validator.violation(arguments)):
                raise ToolError(bad)
        else:
            if not isinstance(resource, str) or not resource.strip() or len(resource) > 2000:
                raise ToolError("`resource` must be a resource URI")
            uri = resource.strip()
            server = self._server(args.get("server"))
        label = args.get("label") or (exposed if tool else uri)
        if not isinstance(label, str):
            raise ToolError("`label` must be text")
        label = label.strip()[:LABEL_MAX_CHARS]
        if not self.can_push(session.split(":", 1)[-1]):
            raise ToolError("watch messages can only be sent to a private chat with an allowed "
                            "user; this chat cannot receive them, so nothing is watched")
        try:
            watch_id = self.store.add(
                session_id=session, server=server, tool=tool, exposed=exposed, args=arguments,
                uri=uri, id_field=id_field.strip(), label=label,
                instruction=instruction.strip(), interval_s=float(interval),
                max_watches=self.max_watches, now=self.now())
        except CapReached:
            raise ToolError(f"the limit of {self.max_watches} active watches (WATCH_MAX) is "
                            "reached; cancel one first (watch_list shows them)") from None
        how = f"checks every {_every(interval)}"
        if uri is not None:
            watch = self.store.get(watch_id)
            assert watch is not None
            await self.runner.subscribe(watch)
            if watch_id in self.runner.subscribed:
                how = "the server notifies changes (no polling)"
        self.poke()
        return (f"watch #{watch_id} ({label}) added: {how}; the first check only notes what "
                "is there now, later new items wake you with the instruction")

    def _server(self, raw: Any) -> str:
        names = self.host.names()
        if raw is None and len(names) == 1:
            return str(names[0])
        if not isinstance(raw, str) or raw not in names:
            raise ToolError(f"`server` must name the MCP server of the resource, one of: "
                            f"{', '.join(names)}")
        return raw

    async def list_watches(self, args: dict[str, Any]) -> str:
        watches = self.store.listed(self._session())
        if not watches:
            return "no watches in this chat"
        return "\n".join(watch_line(w, self.tz_name, w.id in self.runner.subscribed)
                         for w in watches)

    async def cancel(self, args: dict[str, Any]) -> str:
        session = self._session()
        raw = number_arg(args.get("id"), "`id` must be a watch number from watch_list")
        watch = self.store.cancel(raw, session, self.now())
        if watch is None:
            raise ToolError(f"no watch #{raw} in this chat; watch_list shows its watches")
        self.runner.forget(watch)
        return f"cancelled watch #{raw}"

    def tools(self) -> list[Tool]:
        return [
            Tool(
                "watch_add",
                "Watch something for new items without asking the model each time: gantry "
                "calls an MCP tool you are offered (`tool`, named server__tool, with "
                "`arguments`) every `interval_seconds`, or follows an MCP resource "
                "(`resource` URI, `server`), and reads a JSON list of items from the result "
                "(items are told apart by `id_field`). The first check only notes what is "
                "there. When new items appear you get `instruction` and the new items as a "
                "message from the watch in this chat; your reply is sent to the user, or "
                "nothing if it starts with [silent].",
                {
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string",
                                 "description": "the MCP tool to poll, e.g. shop__orders"},
                        "arguments": {"type": "object",
                                      "description": "the tool's arguments"},
                        "resource": {"type": "string",
                                     "description": "instead of a tool: a resource URI"},
                        "server": {"type": "string",
                                   "description": "the MCP server of `resource`"},
                        "interval_seconds": {
                            "type": "integer",
                            "description": f"seconds between checks (at least "
                            f"{self.min_interval}; default {DEFAULT_INTERVAL})"},
                        "label": {"type": "string", "description": "a short name"},
                        "instruction": {
                            "type": "string",
                            "description": "what to do with new items, e.g. 'Tell the "
                            "user which parcel shipped.'"},
                        "id_field": {"type": "string",
                                     "description": "the field that identifies an item",
                                     "default": "id"},
                    },
                    "required": ["instruction"],
                },
                self.add,
                SOURCE,
            ),
            Tool(
                "watch_list",
                "List the watches of this chat: what each watches, how often, its state.",
                {"type": "object", "properties": {}},
                self.list_watches,
                SOURCE,
            ),
            Tool(
                "watch_cancel",
                "Cancel a watch of this chat by its id (from watch_list).",
                {"type": "object",
                 "properties": {"id": {"type": "integer", "description": "the watch id"}},
                 "required": ["id"]},
                self.cancel,
                SOURCE,
            ),
        ]


def _every(seconds: float) -> str:
    s = int(seconds)
    if s % 3600 == 0:
        return f"{s // 3600} h"
    if s % 60 == 0:
        return f"{s // 60} min"
    return f"{s} s"


def watch_line(watch: Watch, tz: str, pushed: bool = False) -> str:
    """One watch as a line for the model, /status and the operator."""
    if watch.state == "paused":
        when = f"paused after {watch.failures} failures (last: {watch.last_error or '?'})"
    elif pushed:
        when = "on change (subscribed)"
    elif watch.next_at is None:
        when = watch.state
    else:
        at = describe(datetime.fromtimestamp(watch.next_at, UTC), zone(tz))
        when = f"every {_every(watch.interval_s)}, next {at}"
    seeded = "not checked yet" if watch.cursor is None else f"{watch.polls} checks"
    return f"#{watch.id} {watch.label} · {watch.target} · {when} · {seeded}"
