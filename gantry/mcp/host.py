"""The MCP host: one supervisor task per manifest server, its tools in the registry.

Each server is owned by one long-lived task that opens and closes its own SDK client
context (the SDK's cancel scopes must not cross tasks); turns call into the live session from
their own tasks. A server that dies is restarted with capped exponential backoff and jitter;
a circuit breaker stops hammering one that keeps failing. Public API for other packages
(memory's MCP backend): `Host.names()`, `Host.call(server, tool, args)`, `Host.tools(server)`,
`Host.instructions(server)`.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gantry.mcp import convert, wire
from gantry.mcp.breaker import Breaker
from gantry.mcp.child import INVALID_MESSAGE, Child, open_child
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.validate import ArgsValidator, compile_schema
from gantry.tools import Registry, Tool, ToolError, mcp_source

log = logging.getLogger("gantry.mcp")

BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
STABLE_AFTER = 30.0  # up this long → the next crash starts the backoff from the beginning
INIT_TIMEOUT = 30.0
PING_TIMEOUT = 5.0
MAX_PAGES = 100


class ServerStartError(Exception):
    """A server could not start or initialize; `str()` names it and its last stderr lines."""


@dataclass
class CallResult:
    """A tools/call outcome as text for the model; `error` when the tool or server failed."""

    text: str
    error: bool = False


@dataclass
class ToolStats:
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=512))

    def record(self, seconds: float, error: bool = False, timeout: bool = False) -> None:
        self.calls += 1
        self.errors += error or timeout
        self.timeouts += timeout
        self.latencies.append(seconds)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        p50 = lat[len(lat) // 2] * 1000 if lat else 0.0
        return {"calls": self.calls, "errors": self.errors, "timeouts": self.timeouts,
                "p50_ms": round(p50, 1), "max_ms": round(lat[-1] * 1000, 1) if lat else 0.0}


@dataclass(frozen=True)
class ListedTool:
    """A server's tool as listed: its MCP name, the name the model sees, schema, validator.

    `needs_task`: its `execution.taskSupport` is "required", so a plain tools/call is refused;
    the SDK's client makes no task-augmented calls, so such a tool is never offered.
    """

    name: str
    exposed: str
    description: str
    schema: dict[str, Any]
    validator: ArgsValidator | None
    needs_task: bool = False


def needs_task(tool: Any) -> bool:
    """Whether an MCP tool can only be called as a task (taskSupport "required")."""
    return getattr(getattr(tool, "execution", None), "task_support", None) == "required"


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter in [half, full] of the step."""
    step = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** min(attempt, 20)))
    return step * (0.5 + 0.5 * (rng or random).random())


def _cause(exc: BaseException) -> BaseException:
    """The exception inside (nested) task-group exception groups: a ServerStartError if there
    is one, else the first."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    found = exc.subgroup(ServerStartError)
    inner: BaseException = found if found is not None else exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return inner


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups for the real cause."""
    exc = _cause(exc)
    return f"{type(exc).__name__}: {exc}"[:300]


class Server:
    """One manifest server: its supervisor task, live session, tools, breaker, stats."""

    def __init__(
        self, spec: ServerSpec, registry: Registry, environ: Mapping[str, str],
        hidden: Collection[str] = (), keep: convert.Keep | None = None,
    ) -> None:
        self.spec = spec
        self.keep = keep  # where binary results go so the model can send them (gantry.outbox)
        self.name = spec.name
        self.source = mcp_source(spec.name)  # its own namespace: never a built-in's source
        self.registry = registry
        self.environ = environ
        self.state = "starting"
        self.session: Any = None
        self.child: Child | None = None
        self.listed: dict[str, ListedTool] = {}
        self.hidden = frozenset(hidden)  # MCP names callable via Host.call, never offered
        self._task_only_said: frozenset[str] = frozenset()
        self.instructions: str = ""
        self.breaker = Breaker()
        self.stats: dict[str, ToolStats] = {}
        self.restarts = 0
        self.warned: set[str] = set()  # kinds of wire trouble logged already (child.py)
        # Calls are numbered as they start; a breaker failure is charged for calls numbered
        # above `_charged_upto` only, so the calls one crash or one hang hits count once.
        self._started_calls = 0
        self._charged_upto = 0
        self._wake = anyio.Event()
        self._refresh = False
        self._probe = False

    # ------------------------------------------------------------------ supervisor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start, serve, restart forever (until cancelled). The first start must succeed."""
        first = True
        attempt = 0
        while True:
            up_at = 0.0
            try:
                async with open_child(self.spec, self.environ, self.warned) as (
                    child, read, write
                ):
                    self.child = child
                    session = await self._connect(child, read, write)
                    async with session:
                        await self._initialize(session, child)
                        self.session = session
                        self.state = "up"
                        up_at = time.monotonic()
                        # Not breaker.success(): a server that restarts fine but fails every
                        # call must still trip it. After an open spell the next call probes.
                        if first:
                            first = False
                            task_status.started()
                        else:
                            log.info("mcp server restarted",
                                     extra={"server": self.name, "tools": len(self.listed)})
                        await self._serve(session, child)
                        reason = child.reason
                        self.session = None
            except Exception as exc:
                # open_child's task group wraps what its body raised in an exception group.
                cause = _cause(exc)
                if first:
                    if isinstance(cause, ServerStartError):
                        raise cause from None
                    tail = self.child.tail() if self.child else ""
                    raise ServerStartError(self._start_message(_describe(cause), tail)) from None
                self.breaker.failure()
                if isinstance(cause, ServerStartError):
                    reason = str(cause).split("\n", 1)[0]
                else:
                    reason = _describe(cause)
                    log.warning("mcp server failed", extra={"server": self.name,
                                                             "error": reason})
            finally:
                self.session = None
            if up_at and time.monotonic() - up_at >= STABLE_AFTER:
                attempt = 0
            delay = max(backoff(attempt), self.breaker.remaining())
            attempt += 1
            self.restarts += 1
            self.state = "open" if self.breaker.state == "open" else "restarting"
            log.warning("mcp server down; restarting",
                        extra={"server": self.name, "reason": reason,
                               "in_seconds": round(delay, 2), "attempt": attempt,
                               "breaker": self.breaker.state})
            await anyio.sleep(delay)
            self.state = "restarting"

    def _start_message(self, error: str, tail: str) -> str:
        msg = f"MCP server {self.name!r} ({self.spec.command}) could not start: {error}"
        if tail:
            msg += "\nlast lines of its stderr:\n  " + "\n  ".join(tail.splitlines()[-10:])
        return msg

    async def _connect(self, child: Child, read: Any, write: Any) -> Any:
        from mcp.client.session import ClientSession
        from mcp_types import Implementation

        from gantry import __version__

        # The default read timeout bounds requests the SDK sends on its own (tools/list when
        # a called tool's output schema is not cached); ours carry their own timeouts.
        return ClientSession(
            read, write,
            read_timeout_seconds=INIT_TIMEOUT,
            message_handler=self._on_message,
            client_info=Implementation(name="gantry", version=__version__),
        )

    async def _initialize(self, session: Any, child: Child) -> None:
        """initialize + tools/list; a child that dies meanwhile fails it at once (its stdout
        closes, and the SDK fails the pending request)."""
        step = "initialize"
        try:
            with anyio.fail_after(INIT_TIMEOUT):
                result = await session.initialize()
                step = "tools/list"
                await self._list_tools(session)
        except Exception as exc:
            await anyio.sleep(0.2)  # its exit status and last stderr lines
            code = child.process.returncode
            if isinstance(exc, TimeoutError):
                why = f"no answer to {step} within {INIT_TIMEOUT:g} s"
            elif code is not None:
                why = f"it exited with code {code}"
            else:
                why = _describe(exc)
            raise ServerStartError(self._start_message(why, child.tail())) from None
        self.instructions = result.instructions or ""

    async def _serve(self, session: Any, child: Child) -> None:
        """Wait for death, a tools/list_changed, or a suspected hang (ping it)."""
        while not child.closed.is_set():
            async with anyio.create_task_group() as tg:

                async def closed() -> None:
                    await child.closed.wait()
                    tg.cancel_scope.cancel()

                async def woken() -> None:
                    await self._wake.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(closed)
                tg.start_soon(woken)
            self._wake = anyio.Event()
            if child.closed.is_set():
                return
            if self._refresh:
                self._refresh = False
                try:
                    with anyio.fail_after(INIT_TIMEOUT):
                        await self._list_tools(session)
                    log.info("mcp tools refreshed",
                             extra={"server": self.name, "tools": len(self.listed)})
                except Exception as exc:
                    log.warning("mcp tools/list failed", extra={"server": self.name,
                                                                 "error": str(exc)[:200]})
            if self._probe:
                self._probe = False
                with anyio.move_on_after(PING_TIMEOUT) as scope:
                    try:
                        await session.send_ping()
                    except Exception:
                        scope.cancel()
                if scope.cancelled_caught:
                    # The calls in flight on it fail as it stops; the timeout that started
                    # this was charged already, and they are the same episode.
                    self._charged_upto = self._started_calls
                    child.mark_closed("it stopped answering (ping failed after a timeout)")
                    return

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._refresh = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.warning("mcp transport error", extra={"server": self.name,
                                                       "error": str(message)[:200]})

    async def _list_tools(self, session: Any) -> None:
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
        names = convert.exposed_names(self.name, [t.name for t in tools])
        listed: dict[str, ListedTool] = {}
        for t in tools:
            schema = convert.parameters(t.input_schema)
            listed[names[t.name]] = ListedTool(
                t.name, names[t.name], t.description or "", schema,
                compile_schema(schema, names[t.name]), needs_task(t),
            )
        self.listed = listed
        self._register()

    def _register(self) -> None:
        tools = [
            Tool(lt.exposed, lt.description, lt.schema, partial(self._tool_call, lt),
                 self.source)
            for lt in self.listed.values() if lt.name not in self.hidden and not lt.needs_task
        ]
        held = sorted(lt.name for lt in self.listed.values() if lt.name in self.hidden)
        if held:
            log.info("mcp tools kept off the model's list (used by gantry itself)",
                     extra={"server": self.name, "tools": held})
        task_only = frozenset(lt.name for lt in self.listed.values()
                              if lt.needs_task and lt.name not in self.hidden)
        if task_only and task_only != self._task_only_said:  # once, not at every restart
            log.warning("mcp tools not offered: they can only be called as tasks "
                        "(taskSupport required), which gantry does not do",
                        extra={"server": self.name, "tools": sorted(task_only)})
        self._task_only_said = task_only
        taken = {n for n in self.registry.names() if self.registry.source(n) != self.source}
        clash = [t.name for t in tools if t.name in taken]
        if clash:
            log.warning("mcp tools dropped: name taken by another source",
                        extra={"server": self.name, "tools": clash})
        self.registry.replace_source(self.source, [t for t in tools if t.name not in taken])

    # ------------------------------------------------------------------ calls

    async def _tool_call(self, listed: ListedTool, args: dict[str, Any]) -> str:
        result = await self.call(listed.name, args, validator=listed.validator)
        if result.error:
            raise ToolError(result.text)
        return result.text

    async def call(
        self, tool: str, args: dict[str, Any], *, validator: ArgsValidator | None = None
    ) -> CallResult:
        """Call `tool` on this server; every failure is a CallResult with error=True.

        The timeout is the SDK request's own (its clock runs from the moment the request is
        handed to our transport, whose write buffer never makes that wait): one cancel scope
        per call instead of two, and the server gets a courtesy notifications/cancelled.
        """
        if validator is not None and (problem := validator.violation(args)) is not None:
            return CallResult(problem, error=True)
        if (where := wire.lone_surrogate(args)) is not None:
            return CallResult(f"invalid arguments: at {where}: the text contains a lone "
                              "surrogate (half of a UTF-16 pair), which is not valid Unicode; "
                              "send whole characters", error=True)
        stats = self.stats.get(tool)
        if stats is None:
            stats = self.stats[tool] = ToolStats()
        session = self.session
        if session is None or not self.breaker.allow():
            stats.record(0.0, error=True)
            wait = self.breaker.remaining()
            later = f" in about {int(wait) + 1} s" if wait else " shortly"
            state = "unavailable" if self.breaker.state != "closed" else self.state
            return CallResult(f"MCP server {self.name!r} is {state}; retry{later}", error=True)
        started = time.monotonic()
        self._started_calls += 1
        number = self._started_calls
        try:
            result = await session.call_tool(tool, args, self.spec.timeout_seconds)
        except Exception as exc:
            return self._call_failed(tool, stats, started, number, exc)
        finally:
            self.breaker.settle()
        self.breaker.success()
        error = bool(getattr(result, "is_error", False))
        stats.record(time.monotonic() - started, error=error)
        text = convert.result_text(result.content, result.structured_content, error, self.keep)
        return CallResult(text, error=error)

    def _charge(self, number: int) -> None:
        """One breaker failure per episode: calls already in flight when one was charged
        (the others a crash or a hang hit) add none. A half-open probe started after every
        charge so far, so its failure always counts."""
        if number > self._charged_upto:
            self._charged_upto = self._started_calls
            self.breaker.failure()

    def _call_failed(
        self, tool: str, stats: ToolStats, started: float, number: int, exc: Exception
    ) -> CallResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT

        elapsed = time.monotonic() - started
        if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
            stats.record(elapsed, timeout=True)
            self._charge(number)
            self._probe = True  # hung tool or hung server? a ping tells
            self._wake.set()
            return CallResult(f"the tool {tool!r} on MCP server {self.name!r} did not answer "
                              f"within {self.spec.timeout_seconds:g} s", error=True)
        stats.record(elapsed, error=True)
        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            self._charge(number)
            return CallResult(f"MCP server {self.name!r} stopped while running {tool!r}; it is "
                              "being restarted, retry later", error=True)
        if isinstance(exc, MCPError) and exc.code == PARSE_ERROR and exc.message == INVALID_MESSAGE:
            self.breaker.success()  # it answered, if garbled: alive, and this call is over
            return CallResult(f"MCP server {self.name!r} sent an invalid message in reply to "
                              f"{tool!r}", error=True)
        if isinstance(exc, MCPError):
            self.breaker.success()  # it answered: the server is alive
            return CallResult(f"MCP server {self.name!r} rejected the call: {exc.message}",
                              error=True)
        log.warning("mcp call failed", extra={"server": self.name, "tool": tool,
                                              "error": f"{type(exc).__name__}: {exc}"[:300]})
        return CallResult(f"calling {tool!r} on MCP server {self.name!r} failed: "
                          f"{type(exc).__name__}: {str(exc)[:300]}", error=True)

    def status(self) -> str:
        state = "open circuit" if self.breaker.state != "closed" else self.state
        calls = sum(s.calls for s in self.stats.values())
        errors = sum(s.errors for s in self.stats.values())
        held = sum(lt.name in self.hidden for lt in self.listed.values())
        tasks = sum(lt.needs_task and lt.name not in self.hidden for lt in self.listed.values())
        notes = []
        if held:
            notes.append(f"{held} for memory only")
        if tasks:
            notes.append(f"{tasks} task-only, not offered")
        tools = f"{len(self.listed)} tools" + (f" ({', '.join(notes)})" if notes else "")
        return (f"{self.name}: {state}, {tools}, {calls} calls, "
                f"{errors} errors, {self.restarts} restarts")


class Host:
    """Every manifest server, started concurrently at boot, supervised until shutdown."""

    def __init__(
        self, specs: Sequence[ServerSpec], registry: Registry, environ: Mapping[str, str],
        hidden: Mapping[str, Collection[str]] | None = None, keep: convert.Keep | None = None,
    ) -> None:
        """`hidden`: per server, MCP tool names not registered as model tools (the memory
        backend's protocol tools, which the builtin memory_* tools already route to);
        `keep`: where tool results' binary content is kept (gantry.outbox)."""
        hidden = hidden or {}
        self.servers = {s.name: Server(s, registry, environ, hidden.get(s.name, ()), keep)
                        for s in specs}

    def names(self) -> list[str]:
        return list(self.servers)

    async def start(self, tg: TaskGroup) -> None:
        """Start every server concurrently in `tg`; raise ServerStartError naming each failure."""
        failures: list[str] = []

        async def one(server: Server) -> None:
            try:
                await tg.start(server.run)
            except Exception as exc:
                cause = _cause(exc)
                failures.append(str(cause) if isinstance(cause, ServerStartError) else
                                f"MCP server {server.name!r} could not start: {_describe(cause)}")

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

    def tools(self, server: str) -> list[ListedTool]:
        s = self.servers.get(server)
        return list(s.listed.values()) if s else []

    def instructions(self, server: str) -> str:
        s = self.servers.get(server)
        return s.instructions if s else ""

    def status_lines(self) -> list[str]:
        return [s.status() for s in self.servers.values()]

    def telemetry(self) -> dict[str, dict[str, Any]]:
        return {f"{s.name}/{tool}": st.summary()
                for s in self.servers.values() for tool, st in s.stats.items()}

