"""The built-in resource_list / resource_read tools: the model lists and reads the resources
of the servers that have any (docs/mcp.md, "Prompts and resources").

A server's resources are listed at every start and again on
`notifications/resources/list_changed` (`ResourceListing`, one per server); the two tools
are registered while at least one server offers resources (the capability, a non-empty list
of resources or templates, and no `resources = false` in the manifest), their `server`
parameter naming only those. Text comes back as a tool result (capped like every tool
result); a blob (an image, a PDF, any binary) is kept in the outbox and the result names
its attachment id, so the model can send it with send_attachment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from gantry.clip import clip
from gantry.mcp import convert
from gantry.mcp.convert import READ_TOOL
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.trouble import describe, within
from gantry.tools import Registry, Source, Tool, ToolError

log = logging.getLogger("gantry.mcp")

LIST_TOOL = "resource_list"
SOURCE = Source("resources")  # its own namespace: replaced as servers' lists change
MAX_PAGES = 10  # resources/list pages read per listing
MAX_LISTED = 500  # resources (and templates) kept per server
MAX_SHOWN = 100  # of them in one resource_list result
MAX_CONTENTS = 20  # contents of one resources/read shown
TEXT_MAX = 300  # of a name or description shown


@dataclass(frozen=True)
class Entry:
    """One listed resource, or a resource template (`template`: its uri is an RFC 6570
    template the model fills in before reading)."""

    uri: str
    name: str
    mime: str = ""
    description: str = ""
    size: int | None = None
    template: bool = False


def entry(item: Any, template: bool = False) -> Entry:
    """A listed Resource or ResourceTemplate, its texts clipped."""
    uri = getattr(item, "uri_template" if template else "uri", "") or ""
    size = getattr(item, "size", None)
    return Entry(str(uri)[:2000], clip(str(getattr(item, "name", "") or ""), TEXT_MAX),
                 str(getattr(item, "mime_type", "") or "")[:100],
                 clip(str(getattr(item, "description", "") or ""), TEXT_MAX),
                 size if isinstance(size, int) and not isinstance(size, bool) else None,
                 template)


def entry_line(e: Entry) -> str:
    about = ", ".join(x for x in (e.mime, f"{e.size} B" if e.size is not None else "") if x)
    line = f"- {'template ' if e.template else ''}{e.uri}"
    line += f" — {e.name}" if e.name else ""
    line += f" ({about})" if about else ""
    return line + (f": {e.description}" if e.description else "")


def listing_text(server: str, entries: list[Entry], complete: bool) -> str:
    """What resource_list answers: one line per resource, templates last, bounded."""
    if not entries:
        return f"MCP server {server!r} lists no resources now."
    shown = entries[:MAX_SHOWN]
    lines = [f"Resources of MCP server {server!r} (read one with {READ_TOOL}, server "
             f"{server!r} and its uri):"]
    lines += [entry_line(e) for e in shown]
    if any(e.template for e in shown):
        lines.append("A template's {placeholders} are filled in to make a uri to read.")
    more = len(entries) - len(shown)
    if more or not complete:
        lines.append(f"({more} more not shown)" if more else "(the server has more; not all "
                     "were listed)")
    return "\n".join(lines)


def read_text(uri: str, contents: list[Any], keep: convert.Keep | None) -> str:
    """What resource_read answers: each content's text, or its blob kept (an attachment)."""
    if not contents:
        return f"resource {uri} has no content"
    parts = [convert.resource_text(c, keep) for c in contents[:MAX_CONTENTS]]
    if len(contents) > MAX_CONTENTS:
        parts.append(f"({len(contents) - MAX_CONTENTS} more contents not shown)")
    return "\n".join(parts)


class ResourceListing:
    """One server's resources and templates as last listed (supervise.Listing)."""

    what = "resources"

    def __init__(self, spec: ServerSpec, private: bool = False,
                 on_change: Callable[[], None] | None = None) -> None:
        self.spec = spec
        self.private = private  # the memory backend's server: its resources stay its own
        self.on_change = on_change
        self.capable = False  # the server declares the resources capability
        self.entries: list[Entry] = []
        self.complete = True  # every page was read (none cut at MAX_PAGES or MAX_LISTED)

    @property
    def offered(self) -> bool:
        """Whether the resource tools read this server's resources."""
        return (self.spec.resources and not self.private and self.capable
                and bool(self.entries))

    def changed(self, message: Any) -> bool:
        from mcp_types import ResourceListChangedNotification

        return isinstance(message, ResourceListChangedNotification)

    async def refresh(self, session: Any, capabilities: Any) -> None:
        self.capable = getattr(capabilities, "resources", None) is not None
        if self.spec.resources and not self.private and self.capable:
            self.entries, self.complete = await list_entries(session)
        else:
            self.entries, self.complete = [], True
        log.info("mcp resources listed", extra={"server": self.spec.name,
                                                "resources": len(self.entries)})
        if self.on_change is not None:
            self.on_change()


async def _pages(session: Any, method: str, field: str) -> tuple[list[Any], bool]:
    from mcp_types import PaginatedRequestParams

    out: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await getattr(session, method)(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        out.extend(getattr(page, field) or ())
        cursor = page.next_cursor
        if not cursor or len(out) >= MAX_LISTED:
            break
    return out[:MAX_LISTED], not cursor and len(out) <= MAX_LISTED


async def list_entries(session: Any) -> tuple[list[Entry], bool]:
    """resources/list and resources/templates/list (paged, bounded); a server that lists
    no templates (the method unknown to it) has none."""
    from mcp.shared.exceptions import MCPError

    listed, complete = await _pages(session, "list_resources", "resources")
    entries = [entry(r) for r in listed]
    try:
        templates, whole = await _pages(session, "list_resource_templates",
                                        "resource_templates")
    except MCPError:
        templates, whole = [], True
    entries += [entry(t, template=True) for t in templates[:MAX_LISTED - len(entries)]]
    return entries, complete and whole and len(templates) <= MAX_LISTED - len(listed)


class Reachable(Protocol):
    """What the tools need of a server (gantry/mcp/server.py's Server)."""

    spec: ServerSpec
    resource_listing: ResourceListing

    @property
    def session(self) -> Any: ...

    @property
    def state(self) -> str: ...


class ResourceTools:
    """The two tools, registered while some server offers resources (`update`)."""

    def __init__(self, registry: Registry, servers: Mapping[str, Reachable],
                 keep: convert.Keep | None = None) -> None:
        self.registry = registry
        self.servers = servers
        self.keep = keep
        self.names: list[str] = []

    def update(self) -> None:
        """Register the tools for the servers that offer resources now (none: no tools)."""
        names = sorted(n for n, s in self.servers.items() if s.resource_listing.offered)
        if names == self.names:
            return
        self.names = names
        self.registry.replace_source(SOURCE, self._tools(names) if names else [])
        log.info("resource tools", extra={"servers": names})

    def _server(self, args: dict[str, Any]) -> Reachable:
        name = str(args.get("server", "")).strip()
        server = self.servers.get(name)
        if server is None or name not in self.names:
            raise ToolError(f"no MCP server {name!r} offers resources; these do: "
                            f"{', '.join(self.names) or 'none'}")
        return server

    async def run_list(self, args: dict[str, Any]) -> str:
        server = self._server(args)
        listing = server.resource_listing
        session = server.session
        if session is not None:  # listed afresh: not every server says when its list changes
            try:
                with anyio.fail_after(server.spec.timeout_seconds):
                    listing.entries, listing.complete = await list_entries(session)
            except Exception as exc:
                log.warning("mcp resources/list failed; the last list is shown",
                            extra={"server": server.spec.name, "error": describe(exc)[:200]})
        return listing_text(server.spec.name, listing.entries, listing.complete)

    async def run_read(self, args: dict[str, Any]) -> str:
        server = self._server(args)
        name = server.spec.name
        uri = str(args.get("uri", "")).strip()
        if not uri:
            raise ToolError(f"`uri` is empty: {LIST_TOOL} lists the resources of {name!r}")
        session = server.session
        if session is None:
            raise ToolError(f"MCP server {name!r} is {server.state}; retry shortly")
        result = await within(
            lambda: session.read_resource(uri), server.spec.timeout_seconds, ToolError,
            late=f"reading {uri} on MCP server {name!r} did not finish",
            refused=f"MCP server {name!r} could not read {uri}",
            failed=f"reading {uri} on MCP server {name!r} failed")
        return read_text(uri, list(result.contents or ()), self.keep)

    def _tools(self, names: list[str]) -> list[Tool]:
        server = {"type": "string", "enum": names,
                  "description": "the MCP server whose resources these are"}
        return [
            Tool(LIST_TOOL,
                 "List the resources (documents, files, data) an MCP server offers: their "
                 "uris, names and types.",
                 {"type": "object", "properties": {"server": server}, "required": ["server"]},
                 self.run_list, SOURCE),
            Tool(READ_TOOL,
                 "Read one resource of an MCP server by its uri (from resource_list, or a "
                 "resource link in a tool result). Text comes back; a file or image is kept "
                 "for send_attachment.",
                 {"type": "object", "properties": {
                     "server": server,
                     "uri": {"type": "string", "description": "the resource's uri"}},
                  "required": ["server", "uri"]},
                 self.run_read, SOURCE),
        ]
