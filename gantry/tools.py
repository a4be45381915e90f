"""The tool registry: one shape for every tool the model may call.

MCP servers, the built-in memory tools and the cron tools all plug in the same way: a
`Tool` with a name, a JSON-Schema and an async `call`. The agent only sees this registry,
and `offered()` says which of its tools one model call carries (the request, `/status` and
`gantry tools list` all use it).
"""

from __future__ import annotations

import difflib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import msgspec

from gantry import log as logsetup
from gantry.model.messages import FunctionDef, ToolDef
from gantry.model.salvage import canonical, parse_arguments, resolve_name
from gantry.session import est_tokens

log = logging.getLogger("gantry.tools")

# OpenAI's rule for function names; providers reject anything else.
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolFn = Callable[[dict[str, Any]], Awaitable[str]]

# The session id ("<channel>:<chat>") of the turn whose tool calls are running: tools bound
# to a chat (cron) read it, since a tool's call only receives its arguments.
CALLER: ContextVar[str] = ContextVar("gantry_caller", default="")


class ToolError(Exception):
    """A tool failed in a way the model should be told about (the text is shown to it)."""


@dataclass(frozen=True)
class Source:
    """Who registered a tool, the key of bulk (un)registration. Built-in parts and MCP
    servers are separate namespaces, so a server named `memory` or `cron` replacing its own
    tools can never touch gantry's memory_* or cron_* tools."""

    name: str
    mcp: bool = False

    def __str__(self) -> str:
        return f"MCP server {self.name!r}" if self.mcp else f"built-in {self.name}"


BUILTIN = Source("builtin")
# The router's own helper (tools_search): sent to the model only when routing, and shown as
# such, not as one more built-in capability.
ROUTING = Source("routing")


def mcp_source(server: str) -> Source:
    return Source(server, mcp=True)


@dataclass(frozen=True)
class Tool:
    """One callable tool; `source` groups tools for bulk (un)registration.

    `private` tools read or change the owner's private data (long-term memory): a turn whose
    reply others read (a group chat) is neither offered them nor allowed to run them.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    call: ToolFn
    source: Source = BUILTIN
    private: bool = False

    @property
    def builtin(self) -> bool:
        return not self.source.mcp

    def schema(self) -> ToolDef:
        return ToolDef(FunctionDef(self.name, self.description or None, self.parameters))

    def tokens(self) -> int:
        """The estimated tokens (chars/4) this tool's definition costs in every request: the
        JSON that goes on the wire."""
        return est_tokens(len(msgspec.json.encode(self.schema()).decode()))


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model; `error` marks failures so logs and tests can tell."""

    text: str
    error: bool = False
    chars: int = 0


def truncate(text: str, limit: int) -> str:
    """Cap a tool result at `limit` chars, saying how much was cut so the model knows."""
    if len(text) <= limit:
        return text
    note = f"\n[truncated: {len(text) - limit} of {len(text)} chars cut]"
    keep = max(0, limit - len(note))
    return text[:keep] + note


@dataclass
class Registry:
    """Name → Tool, plus the limits that apply to every call."""

    result_max_chars: int = 16_000
    _tools: dict[str, Tool] = field(default_factory=dict)
    version: int = 0  # bumped on every change, so indexes over the catalog know to rebuild

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def source(self, name: str) -> Source | None:
        """Which source registered `name` (None if no such tool)."""
        tool = self._tools.get(name)
        return tool.source if tool else None

    def tools(self) -> list[Tool]:
        return [self._tools[n] for n in sorted(self._tools)]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def register(self, tool: Tool) -> None:
        if not NAME_RE.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} is not allowed by OpenAI-compatible APIs")
        if tool.name in self._tools and self._tools[tool.name].source != tool.source:
            raise ValueError(
                f"tool {tool.name!r} from {tool.source} collides with one from "
                f"{self._tools[tool.name].source}"
            )
        self._tools[tool.name] = tool
        self.version += 1

    def replace_source(self, source: Source, tools: Iterable[Tool]) -> None:
        """Swap every tool of `source` for `tools` (an MCP server restarted or changed)."""
        new = list(tools)
        stray = [t.name for t in new if t.source != source]
        if stray:
            raise ValueError(f"tools {stray} do not belong to {source}")
        for name in [n for n, t in self._tools.items() if t.source == source]:
            del self._tools[name]
        self.version += 1
        for tool in new:
            self.register(tool)

    def schemas(
        self, names: Iterable[str] | None = None, *, shared: bool = False
    ) -> list[ToolDef]:
        """Every tool's schema, or only those of `names` (a routed turn's offer); `shared`
        (others read the reply) leaves the private tools out."""
        chosen = sorted(self._tools) if names is None else sorted(set(names) & set(self._tools))
        return [self._tools[n].schema() for n in chosen if not (shared and self._tools[n].private)]

    def resolve(self, name: str) -> str | None:
        """The registered name `name` means: itself, or the one tool it equals with `-` and
        `_` swapped (a server prefix misspelt by a small model); None if none or several."""
        return resolve_name(name, self._tools)

    def closest(self, name: str, *, shared: bool = False, count: int = 3) -> list[str]:
        """The registered names nearest to a name that is none of them, best first: compared
        with case and `-`/`_` runs folded, so `time_get_current_time` finds
        `time__get_current_time`."""
        names = [n for n in self.names() if not (shared and self._tools[n].private)]
        folded: dict[str, str] = {}
        for n in names:
            folded.setdefault(canonical(n), n)
        near = difflib.get_close_matches(canonical(name), list(folded), n=count, cutoff=0.6)
        return [folded[n] for n in near]

    async def call(self, name: str, arguments: str, *, shared: bool = False) -> ToolResult:
        """Run one call; every failure becomes an error result the model can read. In a
        `shared` turn a private tool is refused, not run: hiding it is not enough, since a
        model can call a tool it was not offered."""
        tool = self._tools.get(name)  # the usual case: the exact name, without resolving
        if tool is None:
            tool = self._tools.get(self.resolve(name) or name)
        if tool is None:
            offered = [n for n in self.names() if not (shared and self._tools[n].private)]
            known = ", ".join(offered[:20]) or "none"
            near = self.closest(name, shared=shared)
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            return self._error(name, f"unknown tool {name!r}; {hint}available tools: {known}")
        name = tool.name
        if shared and tool.private:
            return self._error(
                name,
                f"{name} is not available in this chat: others read the replies here, and it "
                "reads or changes the owner's private data (memory). Answer without it.",
            )
        args, problem = parse_arguments(arguments)
        if args is None:
            return self._error(name, problem)
        started = time.monotonic()
        try:
            text = await tool.call(args)
        except ToolError as exc:
            return self._error(name, str(exc))
        except Exception as exc:
            log.exception("tool raised", extra={"tool": name})
            return self._error(name, f"the tool failed: {type(exc).__name__}: {exc}")
        if log.isEnabledFor(logging.INFO):  # the hot path: no record work when it is off
            logsetup.emit(log, logging.INFO, "tool call", {
                "tool": name, "ms": round((time.monotonic() - started) * 1000),
                "chars": len(text)})
        return ToolResult(truncate(text, self.result_max_chars), chars=len(text))

    def _error(self, name: str, message: str) -> ToolResult:
        log.warning("tool call failed", extra={"tool": name, "error": message[:300]})
        text = truncate(f"error: {message}", self.result_max_chars)
        return ToolResult(text, error=True, chars=len(text))


@dataclass(frozen=True)
class Offer:
    """The tools one model call carries. When `routed`, each call also gets the best of the
    `catalog` MCP tools for its message, at most `per_call` of them."""

    tools: tuple[Tool, ...]
    routed: bool = False
    catalog: int = 0
    per_call: int = 0

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def schema_tokens(self) -> int:
        return sum(t.tokens() for t in self.tools)

    def schemas(self) -> list[ToolDef]:
        return [t.schema() for t in self.tools]

    def summary(self) -> str:
        """The line `/status` and `gantry tools list` both print: the count and its parts
        (built in, the router's helper, MCP servers'), which add up to it, and the cost."""
        builtin = sum(t.builtin and t.source != ROUTING for t in self.tools)
        helpers = "".join(f" + {t.name}" for t in self.tools if t.source == ROUTING)
        mcp = sum(t.source.mcp for t in self.tools)
        parts = f"{builtin} built in{helpers}" + (f" + {mcp} MCP" if mcp else "")
        line = (f"tools offered: {len(self.tools)} ({parts}), "
                f"~{self.schema_tokens} schema tokens per request (est.)")
        if self.routed:
            line += (f"; routed: the MCP tools are the best of {self.catalog} for each "
                     f"message, at most {self.per_call}")
        return line


class Selector(Protocol):
    """What `offered` needs of a tool router (gantry.mcp.routing.Router)."""

    def select(self, session: str, texts: Sequence[str]) -> Offer: ...


def offered(registry: Registry, router: Selector | None = None, session: str = "",
            texts: Sequence[str] = (), *, shared: bool = False) -> Offer:
    """The tool set one model call of `session` carries, `texts` being its messages newest
    first: every registered tool, or the router's choice for a big catalog, less the private
    ones in a `shared` turn. The request, `/status` and `gantry tools list` all ask this, so
    they cannot disagree."""
    offer = Offer(tuple(registry.tools())) if router is None else router.select(session, texts)
    if not shared:
        return offer
    return replace(offer, tools=tuple(t for t in offer.tools if not t.private))
