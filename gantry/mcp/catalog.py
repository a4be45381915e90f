"""One server's tools: listed (tools/list, paged), named for the model, put in the registry."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

from gantry.mcp import convert
from gantry.mcp.convert import CallResult
from gantry.mcp.era import reissue_safe
from gantry.mcp.validate import ArgsValidator, compile_schema
from gantry.tools import Registry, Tool, ToolError, mcp_source

log = logging.getLogger("gantry.mcp")

MAX_PAGES = 100

# How a registered tool reaches its server: Server.call(tool, args, validator=...).
Call = Callable[..., Awaitable[CallResult]]


@dataclass(frozen=True)
class ListedTool:
    """A server's tool as listed: its MCP name, the name the model sees, schema, validator.

    `needs_task`: its `execution.taskSupport` is "required", so a plain tools/call is refused;
    it is offered when its server offers task-augmented calls (gantry/mcp/tasks.py).
    `task`: its taskSupport ("forbidden", "optional", "required").
    """

    name: str
    exposed: str
    description: str
    schema: dict[str, Any]
    validator: ArgsValidator | None
    needs_task: bool = False
    structured: bool = False  # it declares an output schema: its items are structuredContent
    task: str = "forbidden"
    reissue: bool = False  # annotated read-only or idempotent: a broken call may be sent again


def needs_task(tool: Any) -> bool:
    """Whether an MCP tool can only be called as a task (taskSupport "required")."""
    return getattr(getattr(tool, "execution", None), "task_support", None) == "required"


class Catalog:
    """The tools one server lists, and which of them the model is offered (under its source)."""

    def __init__(self, name: str, registry: Registry, hidden: Collection[str], call: Call) -> None:
        self.name = name
        self.source = mcp_source(name)  # its own namespace: never a built-in's source
        self.registry = registry
        self.call = call
        self.listed: dict[str, ListedTool] = {}
        self.hidden = frozenset(hidden)  # MCP names callable via Host.call, never offered
        self._task_only_said: frozenset[str] = frozenset()
        self.runs_tasks = False  # the server offers task-augmented tools/call
        self.every_call_a_task = False  # … in the 2026 form (the tasks extension)

    async def list_tools(self, session: Any) -> None:
        from mcp_types import PaginatedRequestParams

        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        from gantry.mcp import era, taskext
        from gantry.mcp.tasks import server_runs_tasks, task_support

        caps = getattr(session, "server_capabilities", None)
        # 2026: the server decides per call whether to answer with a task, so every call on a
        # server that offers the extension is made as one may (tasks.py).
        self.every_call_a_task = era.modern(session) and taskext.offered(caps)
        self.runs_tasks = self.every_call_a_task or server_runs_tasks(caps)
        names = convert.exposed_names(self.name, [t.name for t in tools])
        listed: dict[str, ListedTool] = {}
        for t in tools:
            schema = convert.parameters(t.input_schema)
            listed[names[t.name]] = ListedTool(
                t.name, names[t.name], t.description or "", schema,
                compile_schema(schema, names[t.name]), needs_task(t),
                structured=getattr(t, "output_schema", None) is not None,
                task=task_support(t),
                reissue=reissue_safe(t),
            )
        self.listed = listed
        self._register()

    def _register(self) -> None:
        tools = [
            Tool(lt.exposed, lt.description, lt.schema, partial(self._tool_call, lt),
                 self.source)
            for lt in self.listed.values()
            if lt.name not in self.hidden and (self.runs_tasks or not lt.needs_task)
        ]
        held = sorted(lt.name for lt in self.listed.values() if lt.name in self.hidden)
        if held:
            log.info("mcp tools kept off the model's list (used by gantry itself)",
                     extra={"server": self.name, "tools": held})
        task_only = frozenset(lt.name for lt in self.listed.values()
                              if lt.needs_task and lt.name not in self.hidden
                              and not self.runs_tasks)
        if task_only and task_only != self._task_only_said:  # once, not at every restart
            log.warning("mcp tools not offered: they can only be called as tasks "
                        "(taskSupport required), and the server does not offer tasks",
                        extra={"server": self.name, "tools": sorted(task_only)})
        self._task_only_said = task_only
        taken = {n for n in self.registry.names() if self.registry.source(n) != self.source}
        clash = [t.name for t in tools if t.name in taken]
        if clash:
            log.warning("mcp tools dropped: name taken by another source",
                        extra={"server": self.name, "tools": clash})
        self.registry.replace_source(self.source, [t for t in tools if t.name not in taken])

    async def _tool_call(self, listed: ListedTool, args: dict[str, Any]) -> str:
        result = await self.call(listed.name, args, validator=listed.validator)
        if result.error:
            raise ToolError(result.text)
        return result.text

    def as_task(self, tool: str) -> bool:
        """Whether a call of the MCP tool `tool` is made as a task (gantry/mcp/tasks.py)."""
        return self.every_call_a_task or (self.runs_tasks and any(
            lt.name == tool and lt.task != "forbidden" for lt in self.listed.values()))

    def notes(self) -> list[str]:
        """What /status says of tools listed but not offered."""
        held = sum(lt.name in self.hidden for lt in self.listed.values())
        tasks = sum(lt.needs_task and lt.name not in self.hidden and not self.runs_tasks
                    for lt in self.listed.values())
        notes = []
        if held:
            notes.append(f"{held} for memory only")
        if tasks:
            notes.append(f"{tasks} task-only, not offered")
        return notes
