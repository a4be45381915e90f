"""`gantry mcp-memory`: the builtin store served as a stdio MCP server (SDK low-level server).

Two tool families over the same rows: gantry's `memory_store / memory_recall /
memory_forget`, and aigpt's `read_core / read_memory / save_memory / compress` (seed 001),
with core (the persona) + memories as the initialize `instructions`, at most
`max_records` memories, newest kept — aigpt's `memory` setting. stdout is the protocol;
logs go to stderr.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from gantry.memory.atproto import core_record, records
from gantry.memory.store import (
    BuiltinMemory,
    MemoryInputError,
    MemoryStore,
    iso,
    parse_line,
    render_block,
)
from gantry.memory.tools import memory_tools
from gantry.tools import Tool, ToolError

log = logging.getLogger("gantry.memory.serve")

DEFAULT_MAX_RECORDS = 100
AIGPT_TOOLS: list[dict[str, Any]] = [
    {"name": "read_core", "description": "Returns the core record (identity, personality).",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "read_memory", "description": "Returns all memory records as an array.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "save_memory", "description": "Adds a single memory element.",
     "inputSchema": {"type": "object", "properties": {"content": {"type": "string"}},
                     "required": ["content"]}},
    {"name": "compress", "description": "Replaces all records with the compressed set.",
     "inputSchema": {"type": "object",
                     "properties": {"items": {"type": "array", "items": {"type": "string"}}},
                     "required": ["items"]}},
]


class ServedMemory(BuiltinMemory):
    """memory_store over `gantry mcp-memory`: its rows record that they came in over MCP."""

    async def store(self, kind: str, subject: str, content: str) -> tuple[Any, bool]:
        return self.db.add(kind, subject, content, source="mcp")


@dataclass
class MemoryService:
    """The tool logic, transport-free (so it is testable without a process)."""

    store: MemoryStore
    core: str
    did: str = "self"
    handle: str = "handle.invalid"
    max_records: int = DEFAULT_MAX_RECORDS

    def __post_init__(self) -> None:
        self.builtin = {t.name: t for t in memory_tools(ServedMemory(self.store))}

    def tool_specs(self) -> list[dict[str, Any]]:
        mine = [{"name": t.name, "description": t.description, "inputSchema": t.parameters}
                for t in self.builtin.values()]
        return mine + AIGPT_TOOLS

    def newest(self) -> list[Any]:
        rows = self.store.active_all()
        return rows[-self.max_records :] if self.max_records > 0 else []

    def instructions(self) -> str:
        parts = [p for p in (self.core.strip(), render_block(self.newest())) if p]
        return "\n\n".join(parts)

    async def call(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        """(text, is_error) for one tools/call."""
        tool: Tool | None = self.builtin.get(name)
        if tool is not None:
            try:
                return await tool.call(args), False
            except ToolError as exc:
                return f"error: {exc}", True
        handler = getattr(self, f"_aigpt_{name}", None)
        if handler is None:
            return json.dumps({"error": f"Unknown tool: {name}"}), True
        try:
            return json.dumps(handler(args), ensure_ascii=False), False
        except (MemoryInputError, ValueError) as exc:
            return json.dumps({"error": str(exc)}), True

    def _aigpt_read_core(self, args: dict[str, Any]) -> Any:
        return core_record(self.did, self.handle, self.core, iso(self.store.clock()))

    def _aigpt_read_memory(self, args: dict[str, Any]) -> Any:
        return [record for _tid, record in records(self.newest(), self.did)]

    def _aigpt_save_memory(self, args: dict[str, Any]) -> Any:
        content = args.get("content")
        if not isinstance(content, str):
            raise ValueError("content must be a string")
        kind, subject, text = parse_line(content)
        self.store.add(kind, subject, text, source="mcp")
        count = len(self.store.active_all())
        out: dict[str, Any] = {"success": True, "records": count, "limit": self.max_records}
        if count > self.max_records:
            out["note"] = "over the record limit: call compress with the items to keep"
        return out

    def _aigpt_compress(self, args: dict[str, Any]) -> Any:
        items = args.get("items")
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError("items must be an array of strings")
        items = [i for i in items if i.strip()]
        if not items:
            raise ValueError("compress with no items would delete every memory; refused")
        parsed = [parse_line(i) for i in items]
        with self.store.conn:
            keep = {int(self.store.add(k, s, c, source="mcp")[0].id) for k, s, c in parsed}
            old = [int(r.id) for r in self.store.active_all() if int(r.id) not in keep]
            for rid in old:
                self.store.conn.execute("DELETE FROM memory WHERE id = ?", (rid,))
        return {"success": True, "records": len(keep), "deleted": len(old)}


def _server(service: MemoryService) -> Any:
    from mcp.server.lowlevel import Server
    from mcp_types import CallToolResult, ListToolsResult, TextContent
    from mcp_types import Tool as McpTool

    from gantry import __version__

    tools = [McpTool.model_validate(spec) for spec in service.tool_specs()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        text, error = await service.call(params.name, dict(params.arguments or {}))
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)

    return Server(
        "gantry-memory", version=__version__, instructions=service.instructions(),
        on_list_tools=list_tools, on_call_tool=call_tool,
    )


async def serve_stdio(service: MemoryService) -> None:
    from mcp.server.stdio import stdio_server

    server = _server(service)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(
    data_dir: str, persona_dir: str, did: str = "self", max_records: int = DEFAULT_MAX_RECORDS
) -> int:
    """Entry of `gantry mcp-memory`; returns the exit code."""
    import os
    import sys

    import anyio

    from gantry import db
    from gantry.persona import PersonaError, load

    try:
        db.ensure_data_dir(data_dir)
        conn = db.connect(os.path.join(data_dir, "gantry.db"))
    except db.DatabaseError as exc:
        print(f"gantry mcp-memory: {exc}", file=sys.stderr)
        return 1
    try:
        core = load(persona_dir).text
    except PersonaError as exc:
        print(f"gantry mcp-memory: {exc}; serving without core", file=sys.stderr)
        core = ""
    store = MemoryStore(conn)
    service = MemoryService(store, core, did=did, max_records=max_records)
    try:
        anyio.run(serve_stdio, service)
    except KeyboardInterrupt:
        return 130
    finally:
        conn.close()
    return 0
