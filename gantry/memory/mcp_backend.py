"""MEMORY_BACKEND=mcp:<server>: memory kept by a manifest MCP server instead of SQLite.

Two server shapes, told apart by their tool list: (a) `memory_store / memory_recall /
memory_forget` (e.g. `gantry mcp-memory`), (b) aigpt's `save_memory / read_memory /
read_core / compress`, whose memories also arrive in the initialize `instructions`.
aigpt never sets isError, so its `{"error": ...}` bodies are failures too.

The backend talks to a `ServerPort`; `HostPort` adapts the MCP host (gantry.mcp.host.Host:
`names()`, `tools(server)`, `instructions(server)`, `call(server, tool, args)`),
`SessionPort` a bare `mcp.ClientSession`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gantry.memory import Memory
from gantry.memory.store import (
    DURABLE,
    FORGET_MAX,
    HYDRATE_HITS,
    HYDRATE_MAX,
    RECALL_MAX,
    MemoryInputError,
    Row,
    format_line,
    parse_line,
    row_text,
    terms,
    validate,
)

SHAPE_TOOLS = ("memory_store", "memory_recall", "memory_forget")
SHAPE_AIGPT = ("save_memory", "read_memory", "compress")
# Every memory-protocol tool of either shape: the backend server's copies are not offered to
# the model (gantry's memory_* tools stand for them).
PROTOCOL_TOOLS = frozenset((*SHAPE_TOOLS, *SHAPE_AIGPT, "read_core"))
_HIT = re.compile(
    r"#(\S+) \((fact|preference|person|episode|insight)\) ([^:\n]*): (.*?)"
    r"(?: \((\d{4}-\d\d-\d\d)\))?\Z"
)
_STORED = re.compile(r"(stored|already stored as) #(\S+?):")


class BackendError(ValueError):
    """The named server is missing or has neither memory shape (stops boot; operator text)."""


class ServerPort(Protocol):
    """One MCP server as memory needs it."""

    def tool_names(self) -> list[str]: ...

    def instructions(self) -> str: ...

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]: ...


class HostPort:
    """A server of the MCP host (issue 11's gantry.mcp.host.Host public API)."""

    def __init__(self, host: Any, server: str) -> None:
        self.host, self.server = host, server

    def tool_names(self) -> list[str]:
        return [t.name for t in self.host.tools(self.server)]

    def instructions(self) -> str:
        return str(self.host.instructions(self.server) or "")

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        result = await self.host.call(self.server, tool, args)
        return result.text, bool(result.error)


class SessionPort:
    """A connected, initialized `mcp.ClientSession` (tests, or any direct client)."""

    def __init__(self, session: Any, tools: Sequence[str], instructions: str = "") -> None:
        self.session, self._tools, self._instructions = session, list(tools), instructions

    @classmethod
    async def open(cls, session: Any) -> SessionPort:
        init = await session.initialize()
        listed = await session.list_tools()
        return cls(session, [t.name for t in listed.tools], init.instructions or "")

    def tool_names(self) -> list[str]:
        return list(self._tools)

    def instructions(self) -> str:
        return self._instructions

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        result = await self.session.call_tool(tool, args)
        text = "\n".join(getattr(c, "text", "") for c in result.content if hasattr(c, "text"))
        return text, bool(getattr(result, "is_error", False) or getattr(result, "isError", False))


def detect(port: ServerPort, server: str) -> Memory:
    """The backend for this server's tool list, or BackendError naming what it has."""
    names = set(port.tool_names())
    if set(SHAPE_TOOLS) <= names:
        return ToolsMemory(port, server)
    if set(SHAPE_AIGPT) <= names:
        return AigptMemory(port, server)
    have = ", ".join(sorted(names)[:20]) or "no tools"
    raise BackendError(
        f"MEMORY_BACKEND=mcp:{server}: the server exposes neither memory_store/memory_recall/"
        f"memory_forget nor aigpt's save_memory/read_memory/compress (it has: {have}); "
        "point MEMORY_BACKEND at a memory server or use MEMORY_BACKEND=builtin"
    )


async def connect_backend(host: Any, server: str) -> Memory:
    """The MCP memory backend over the running host; BackendError if it cannot be used."""
    if host is None:
        raise BackendError(
            f"MEMORY_BACKEND=mcp:{server} needs MCP servers, but none are running; add "
            f"[servers.{server}] to MCP_MANIFEST or use MEMORY_BACKEND=builtin"
        )
    if server not in host.names():
        known = ", ".join(host.names()) or "none"
        raise BackendError(
            f"MEMORY_BACKEND=mcp:{server}: no MCP server named {server!r} in the manifest "
            f"(servers: {known})"
        )
    return detect(HostPort(host, server), server)


# ---------------------------------------------------------------------- parsing (pure)


def parse_hits(text: str) -> list[Row]:
    """Rows from `#id (kind) subject: content (date)` lines; other lines become facts."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        m = _HIT.match(line)
        if m:
            rows.append(Row(m.group(1), m.group(2), m.group(3), m.group(4),
                            created_at=m.group(5) or ""))
    return rows


@dataclass(frozen=True)
class Records:
    """aigpt's read_memory answer: rows, each record's text exactly as the server holds it
    (what a rewrite must send back), how many records gantry could not read, and whether the
    server keeps every memory in one record (an older aigpt)."""

    rows: list[Row] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    unreadable: int = 0
    single: bool = False


def read_records(text: str) -> Records:
    """aigpt's read_memory output → Records (row id = the record's TID, else its position)."""
    from gantry.memory.atproto import record_text

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
        data = [line for line in text.splitlines() if line.strip()]
    if isinstance(data, dict) and "error" in data:
        raise MemoryInputError(f"the memory server failed: {str(data['error'])[:300]}")
    single = isinstance(data, dict)
    if isinstance(data, dict):  # an older aigpt: one record holding every memory as text
        try:
            body = record_text(data)[0]
        except ValueError:
            return Records(unreadable=1, single=True)
        data = [line.removeprefix("- ") for line in body.splitlines() if line.strip()]
    if not isinstance(data, list):
        return Records(unreadable=1)
    rows, texts, unreadable = [], [], 0
    for i, item in enumerate(data, 1):
        try:
            text_, created = record_text(item)
        except ValueError:
            unreadable += 1
            continue
        uri = item.get("uri", "") if isinstance(item, dict) else ""
        rid = uri.rsplit("/", 1)[-1] if isinstance(uri, str) and uri.count("/") >= 3 else str(i)
        kind, subject, content = parse_line(text_)
        rows.append(Row(rid, kind, subject, content, created_at=created or ""))
        texts.append(text_)
    return Records(rows, texts, unreadable, single)


def parse_records(text: str) -> list[Row]:
    """The rows of aigpt's read_memory output (see read_records)."""
    return read_records(text).rows


def rank_local(rows: Sequence[Row], query: str, limit: int, every: bool = False) -> list[Row]:
    """Rows sharing words with `query`: most shared words first, then newest."""
    wanted = set(terms(query))
    if not wanted:
        return []
    scored = []
    for pos, row in enumerate(rows):
        have = set(terms(row_text(row.subject, row.content), limit=10_000))
        hits = len(wanted & have)
        if hits and (not every or hits == len(wanted)):
            scored.append((hits, row.created_at, pos, row))
    scored.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return [t[3] for t in scored[:limit]]


def _json_error(text: str) -> str | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and "error" in data:
        return str(data["error"])[:300]
    return None


# ---------------------------------------------------------------------- shape (a)


class ToolsMemory:
    """A server with memory_store / memory_recall / memory_forget."""

    KEEP_STORED = 100  # rows stored this run, remembered for hydration (see _standing)

    def __init__(self, port: ServerPort, server: str) -> None:
        self.port, self.name = port, f"mcp:{server} memory_* tools"
        self.stored: dict[str, Row] = {}  # line → row, oldest first

    async def _call(self, tool: str, args: dict[str, Any]) -> str:
        text, error = await self.port.call(tool, args)
        if error or _json_error(text):
            raise MemoryInputError(text.removeprefix("error: ")[:500])
        return text

    async def store(self, kind: str, subject: str, content: str) -> tuple[Row, bool]:
        kind, subject, content = validate(kind, subject, content)
        text = await self._call("memory_store",
                                {"kind": kind, "subject": subject, "content": content})
        m = _STORED.match(text)
        row = Row(m.group(2) if m else "?", kind, subject, content)
        self.stored.pop(row.line(), None)
        self.stored[row.line()] = row
        while len(self.stored) > self.KEEP_STORED:
            del self.stored[next(iter(self.stored))]
        return row, not (m and m.group(1).startswith("already"))

    async def recall(self, query: str, limit: int = RECALL_MAX) -> list[Row]:
        return parse_hits(await self._call("memory_recall", {"query": query}))[:limit]

    async def forget(self, row_id: str | None, query: str | None) -> tuple[list[Row], int]:
        args: dict[str, Any] = {"query": query or ""}
        if row_id is not None:
            rid = row_id.lstrip("#")
            args = {"id": int(rid) if rid.isdecimal() else rid}
        text = await self._call("memory_forget", args)
        more = re.search(r"\((\d+) more matched", text)
        deleted = parse_hits(text)
        for row in deleted:
            self.stored.pop(row.line(), None)
        return deleted, int(more.group(1)) if more else 0

    async def _standing(self) -> list[Row]:
        """Facts, preferences and people shown every turn, newest first. From `read_memory`
        when the server also has it (gantry mcp-memory): fresh each turn. Otherwise the
        initialize instructions, a snapshot from connect time, plus what this run stored."""
        if "read_memory" in self.port.tool_names():
            rows = parse_records(await self._call("read_memory", {}))[::-1]
        else:
            rows = list(reversed(self.stored.values()))
            for line in self.port.instructions().splitlines():
                if line.startswith("- ("):
                    kind, subject, content = parse_line(line[2:])
                    rows.append(Row("", kind, subject, content))
        return [r for r in rows if r.kind in DURABLE]

    async def hydrate(self, text: str, limit: int = HYDRATE_MAX) -> list[Row]:
        out = {r.line(): r for r in (await self.recall(text, HYDRATE_HITS))[:limit]}
        for row in await self._standing():
            if len(out) >= limit:
                break
            out.setdefault(row.line(), row)
        return list(out.values())[:limit]

    async def counts(self) -> dict[str, int]:
        return {}


# ---------------------------------------------------------------------- shape (b)


class AigptMemory:
    """An aigpt-style server: one record per statement, `compress` rewrites the set."""

    def __init__(self, port: ServerPort, server: str) -> None:
        self.port, self.name = port, f"mcp:{server} aigpt"

    async def _call(self, tool: str, args: dict[str, Any]) -> str:
        text, error = await self.port.call(tool, args)
        problem = _json_error(text)
        if error or problem:
            raise MemoryInputError(f"the memory server failed: {problem or text[:300]}")
        return text

    async def _all(self) -> list[Row]:
        return parse_records(await self._call("read_memory", {}))

    async def store(self, kind: str, subject: str, content: str) -> tuple[Row, bool]:
        kind, subject, content = validate(kind, subject, content)
        line = format_line(kind, subject, content)
        for row in await self._all():
            if row.line() == line:
                return row, False
        await self._call("save_memory", {"content": line})
        return Row("new", kind, subject, content), True

    async def recall(self, query: str, limit: int = RECALL_MAX) -> list[Row]:
        return rank_local(await self._all(), query, limit)

    async def forget(self, row_id: str | None, query: str | None) -> tuple[list[Row], int]:
        """Delete by rewriting the set: `compress` with every other record's text exactly as
        the server holds it. Refused when that rewrite could lose or alter a record."""
        found = read_records(await self._call("read_memory", {}))
        rows = found.rows
        if row_id is not None:
            doomed, more = [r for r in rows if r.id == row_id.lstrip("#")], 0
        else:
            matches = rank_local(rows, query or "", len(rows), every=True)
            doomed, more = matches[:FORGET_MAX], max(0, len(matches) - FORGET_MAX)
        if not doomed:
            return [], 0
        if found.unreadable:
            raise MemoryInputError(
                f"refused: {found.unreadable} of the aigpt server's records are in a form "
                "gantry cannot read, and forgetting rewrites the whole set (compress), which "
                "would destroy them; delete this memory on the server itself"
            )
        if found.single:
            raise MemoryInputError(
                "refused: this aigpt server keeps every memory in one record, and gantry "
                "cannot rewrite it without changing the others; delete on the server itself"
            )
        gone = {id(r) for r in doomed}
        keep = [t for r, t in zip(rows, found.texts, strict=True) if id(r) not in gone]
        if not keep:
            raise MemoryInputError(
                "refused: this would delete every memory on the aigpt server (its compress "
                "cannot store an empty set); delete fewer, or clear it on the server itself"
            )
        await self._call("compress", {"items": keep})
        return doomed, more

    async def hydrate(self, text: str, limit: int = HYDRATE_MAX) -> list[Row]:
        rows = await self._all()
        out = {r.line(): r for r in rank_local(rows, text, min(HYDRATE_HITS, limit))}
        for row in reversed(rows):  # newest first
            if len(out) >= limit:
                break
            out.setdefault(row.line(), row)
        return list(out.values())

    async def counts(self) -> dict[str, int]:
        return {"records": len(await self._all())}
