"""The MCP host: one supervisor task per manifest server, its tools in the registry.

Each server is owned by one long-lived task that opens and closes its own SDK client
context (the SDK's cancel scopes must not cross tasks); turns call into the live session from
their own tasks. A server that dies is restarted with capped exponential backoff and jitter;
a circuit breaker stops hammering one that keeps failing. Public API for other packages
(memory's MCP backend): `Host.names()`, `Host.call(server, tool, args)`, `Host.tools(server)`,
`Host.instructions(server)`; watches add `Host.can_subscribe`, `Host.subscribe`,
`Host.read_resource` and `Host.on_resource_updated` (resubscribed after every restart).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gantry import elicit
from gantry.mcp import convert, wire
from gantry.mcp.breaker import Breaker
from gantry.mcp.child import INVALID_MESSAGE
from gantry.mcp.deadline import MAX_CALL_SECONDS, Deadline
from gantry.mcp.elicitation import Elicitor, InFlight
from gantry.mcp.link import AuthHook, Link, delivery, open_link
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.validate import ArgsValidator, compile_schema
from gantry.tools import Registry, Tool, ToolError, mcp_source

log = logging.getLogger("gantry.mcp")

BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
STABLE_AFTER = 30.0  # up this long → the next crash starts the backoff from the beginning
# A remote server that went away is no crashing child: trying it costs one connect, so it is
# tried again at most this far apart, charging the breaker nothing, and at once for a call.
REMOTE_BACKOFF_CAP = 2.0
INIT_TIMEOUT = 30.0
PING_TIMEOUT = 5.0
MAX_PAGES = 100
# A call that keeps reporting progress outlives timeout_seconds of silence, up to this many
# times timeout_seconds (and never past MAX_CALL_SECONDS): a server that reports progress
# forever must still end.
PROGRESS_CAP_FACTOR = 10
CAPPED = "capped"  # the MCPError message of a call cut at call_cap() after progress
ASKED = "asked"  # … of one cut at its cap (or MAX_CALL_SECONDS) after asking the user
RENEW_WAIT = 30.0  # how long a call whose request never arrived waits for the new session


class NotSent(Exception):
    """A call that provably never reached its remote server, which cannot be reached now."""


def call_cap(timeout: float) -> float:
    """The absolute limit of one tools/call, however much progress it reports."""
    return max(timeout, min(PROGRESS_CAP_FACTOR * timeout, MAX_CALL_SECONDS))


class ServerStartError(Exception):
    """A server could not start or initialize; `str()` names it and its last stderr lines."""


@dataclass
class CallResult:
    """A tools/call outcome as text for the model; `error` when the tool or server failed."""

    text: str
    error: bool = False
    structured: Any = None  # the result's structuredContent (watches read items from it)


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
    structured: bool = False  # it declares an output schema: its items are structuredContent


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


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _redacted(text: str) -> str:
    """Text for /status and check: header values, URL keys and tokens hidden."""
    from gantry.log import Redactor

    return Redactor().text(text)


def _besides(text: str, known: str) -> str:
    """What `text` adds to `known`: a connection failure's cause, named both by the transport
    and by the exception, is told once (every log line and /status carry it)."""
    if text in known:
        return ""
    return text.split(known, 1)[1].strip() if known and known in text else text


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups for the real cause."""
    exc = _cause(exc)
    return f"{type(exc).__name__}: {exc}"[:300]


class Server:
    """One manifest server: its supervisor task, live session, tools, breaker, stats."""

    def __init__(
        self, spec: ServerSpec, registry: Registry, environ: Mapping[str, str],
        hidden: Collection[str] = (), auth: AuthHook | None = None,
        elicitor: Elicitor | None = None, keep: convert.Keep | None = None,
    ) -> None:
        self.spec = spec
        self.elicitor = elicitor  # None: the elicitation capability is not declared
        self.inflight = InFlight()
        self.keep = keep  # where binary results go so the model can send them (gantry.outbox)
        self.name = spec.name
        self.source = mcp_source(spec.name)  # its own namespace: never a built-in's source
        self.registry = registry
        self.environ = environ
        self.state = "starting"
        self.session: Any = None
        self.link: Link | None = None
        self.auth = auth  # gives a remote server's HTTP client its httpx2.Auth (link.py)
        # An OAuth server's login state (gantry/mcp/oauth.py Gate), from the hook that has one.
        gate = getattr(auth, "gate", None)
        self.login: Any = gate(spec) if gate is not None else None
        if self.login is not None:
            self.login.on_refused = self._login_lost
        self.error = ""  # why it is not up, for /status and check (an optional server's)
        self._next_up = anyio.Event()  # set (and replaced) as each new session comes up
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
        self._demand = anyio.Event()  # set by a call that needs a remote server reached now
        self._tried = anyio.Event()  # set (and replaced) as each try to connect fails
        self._refresh = False
        self._probe = False
        self.can_subscribe = False  # its capabilities include resources.subscribe
        self.subscriptions: set[str] = set()  # resource URIs, subscribed again on restart
        self.on_resource_updated: Callable[[str, str], None] | None = None

    # ------------------------------------------------------------------ supervisor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start, serve, restart forever (until cancelled). The first start must succeed,
        unless the server is optional (`required = false`): then boot goes on without it and
        it is retried in the background, its failures logged once until it is first up."""
        first = True
        ever_up = False
        attempt = 0
        while True:
            up_at = 0.0
            renew = False
            self._demand = anyio.Event()  # a call asking for a try now: this one serves it
            if self.login is not None and self.login.check() is not None:
                first = self._needs_login(first, task_status)
                await self.login.wait()
                continue
            try:
                auth = self.auth(self.spec) if self.auth is not None and self.spec.remote else None
                async with open_link(self.spec, self.environ, self.warned, auth) as (
                    link, read, write
                ):
                    self.link = link
                    session = await self._connect(link, read, write)
                    async with session:
                        await self._initialize(session, link)
                        await self._resubscribe(session)
                        self.session = session
                        self.state = "up"
                        self.error = ""
                        came_up, self._next_up = self._next_up, anyio.Event()
                        came_up.set()
                        up_at = time.monotonic()
                        # Not breaker.success(): a server that restarts fine but fails every
                        # call must still trip it. After an open spell the next call probes.
                        if first:
                            first = False
                            task_status.started()
                        elif not ever_up:
                            log.info("mcp server up", extra={"server": self.name,
                                                             "tools": len(self.listed)})
                        else:
                            log.info("mcp server restarted",
                                     extra={"server": self.name, "tools": len(self.listed)})
                        ever_up = True
                        await self._serve(session, link)
                        reason = link.reason
                        renew = link.renew
                        self.session = None
            except Exception as exc:
                if self.login is not None and self.login.reason is not None:
                    first = self._needs_login(first, task_status)
                    continue  # not a failure of the server: it waits for `gantry mcp login`
                # open_link's task groups wrap what its body raised in an exception group.
                cause = _cause(exc)
                if isinstance(cause, ServerStartError):
                    message = str(cause)
                else:
                    tail = self.link.tail() if self.link else ""
                    message = self._start_message(_describe(cause), tail)
                if first and self.spec.required:
                    raise ServerStartError(message) from None
                if not self.spec.remote:
                    self.breaker.failure()
                if not up_at:  # the calls waiting on this try to reach it are answered
                    tried, self._tried = self._tried, anyio.Event()
                    tried.set()
                reason = message.split("\n", 1)[0] if ever_up else message
                if first:
                    first = False
                    log.warning("optional mcp server unavailable; gantry runs without it and "
                                "keeps retrying", extra={"server": self.name, "error": message})
                    task_status.started()
            finally:
                self.session = None
            if up_at and (self.spec.remote or time.monotonic() - up_at >= STABLE_AFTER):
                attempt = 0
            # A dropped session is no failure: re-initialise at once (but not in a loop).
            quick = renew and up_at and time.monotonic() - up_at >= 1.0
            if quick:
                delay = 0.0
            elif self.spec.remote:
                delay = min(REMOTE_BACKOFF_CAP, backoff(attempt))
            else:
                delay = max(backoff(attempt), self.breaker.remaining())
            attempt += not quick
            self.restarts += 1
            self.state = "open" if self.breaker.state == "open" else "restarting"
            self.error = _redacted(reason.split("\n", 1)[0])
            # An optional server that never came up was logged once; its retries are debug.
            if quick:
                log.info("mcp session lost; re-initialising",
                         extra={"server": self.name, "reason": reason})
            else:
                log.log(logging.WARNING if ever_up else logging.DEBUG,
                        "mcp server down; restarting",
                        extra={"server": self.name, "reason": reason,
                               "in_seconds": round(delay, 2), "attempt": attempt,
                               "breaker": self.breaker.state})
            with anyio.move_on_after(delay):
                await self._demand.wait()
            self.state = "restarting"

    def _needs_login(self, first: bool, task_status: TaskStatus[None]) -> bool:
        """An OAuth server without a usable login: boot goes on without it (logging in is the
        operator's step, in another process), and it waits for one. Returns the new `first`."""
        self.state, self.error = "needs login", self.login.reason or ""
        if first:
            task_status.started()
        return False

    def _login_lost(self) -> None:
        """The stored OAuth tokens stopped working: close the connection they serve."""
        if self.link is not None:
            self.link.mark_closed("its OAuth login no longer works")

    def _login_text(self) -> str:
        return f"MCP server {self.name!r} needs an OAuth login: {self.login.reason}"

    def _start_message(self, error: str, tail: str) -> str:
        verb = "could not connect" if self.spec.remote else "could not start"
        msg = f"MCP server {self.name!r} ({self.spec.where}) {verb}: {error}"
        if self.spec.remote:
            extra = _besides(tail, error)
            if extra:
                msg += f" {extra}" if extra.startswith("(") else f" ({extra})"
            return _redacted(msg)
        if tail:
            msg += "\nlast lines of its stderr:\n  " + "\n  ".join(tail.splitlines()[-10:])
        return msg

    async def _connect(self, link: Link, read: Any, write: Any) -> Any:
        from mcp.client.session import ClientSession
        from mcp_types import Implementation

        from gantry import __version__

        # The default read timeout bounds requests the SDK sends on its own (tools/list when
        # a called tool's output schema is not cached); ours carry their own timeouts.
        return ClientSession(
            read, write,
            read_timeout_seconds=INIT_TIMEOUT,
            message_handler=self._on_message,
            elicitation_callback=self._on_elicit if self.elicitor is not None else None,
            client_info=Implementation(name="gantry", version=__version__),
        )

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """A server's elicitation/create: asked of the user of the turn whose call it serves."""
        assert self.elicitor is not None
        return await self.elicitor.answer(self.name, self.inflight, params)

    async def _initialize(self, session: Any, link: Link) -> None:
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
            ended = link.ended()
            if isinstance(exc, TimeoutError):
                why = f"no answer to {step} within {INIT_TIMEOUT:g} s"
            elif ended is not None:  # a remote's HTTP status, and what its body said
                extra = _besides(_describe(exc), ended) if self.spec.remote else ""
                why = f"{ended}; {extra}" if extra else ended
            else:
                why = _describe(exc)
            raise ServerStartError(self._start_message(why, link.tail())) from None
        self.instructions = result.instructions or ""
        resources = getattr(result.capabilities, "resources", None)
        self.can_subscribe = bool(getattr(resources, "subscribe", False))

    async def _serve(self, session: Any, link: Link) -> None:
        """Wait for death, a tools/list_changed, or a suspected hang (ping it)."""
        while not link.closed.is_set():
            async with anyio.create_task_group() as tg:

                async def closed() -> None:
                    await link.closed.wait()
                    tg.cancel_scope.cancel()

                async def woken() -> None:
                    await self._wake.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(closed)
                tg.start_soon(woken)
            self._wake = anyio.Event()
            if link.closed.is_set():
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
                    link.mark_closed("it stopped answering (ping failed after a timeout)")
                    return

    async def _resubscribe(self, session: Any) -> None:
        """A new session has no subscriptions: send them again, and have each resource read
        again (it may have changed while the server was down)."""
        for uri in sorted(self.subscriptions):
            try:
                await self._subscribe(session, uri)
            except Exception as exc:
                log.warning("mcp resource resubscribe failed",
                            extra={"server": self.name, "uri": uri, "error": _describe(exc)})
            if self.on_resource_updated is not None:
                self.on_resource_updated(self.name, uri)

    async def _subscribe(self, session: Any, uri: str) -> None:
        from mcp_types import EmptyResult, SubscribeRequest, SubscribeRequestParams

        with anyio.fail_after(self.spec.timeout_seconds):
            await session.send_request(
                SubscribeRequest(params=SubscribeRequestParams(uri=uri)), EmptyResult)

    async def subscribe(self, uri: str) -> None:
        """Subscribe to `uri` now if up (raising on failure), and after every restart."""
        self.subscriptions.add(uri)
        if self.session is not None:
            await self._subscribe(self.session, uri)

    async def read_resource(self, uri: str) -> CallResult:
        """resources/read as text (text contents joined); every failure is an error result."""
        session = self.session
        if session is None:
            return CallResult(f"MCP server {self.name!r} is {self.state}", error=True)
        try:
            with anyio.fail_after(self.spec.timeout_seconds):
                result = await session.read_resource(uri)
        except TimeoutError:
            return CallResult(f"reading {uri} on MCP server {self.name!r} timed out", error=True)
        except Exception as exc:
            return CallResult(f"reading {uri} on MCP server {self.name!r} failed: "
                              f"{_describe(exc)}", error=True)
        texts = [c.text for c in result.contents if getattr(c, "text", None) is not None]
        if not texts:
            return CallResult(f"resource {uri} has no text content", error=True)
        return CallResult("\n".join(texts))

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ResourceUpdatedNotification, ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._refresh = True
            self._wake.set()
        elif isinstance(message, ResourceUpdatedNotification):
            if self.on_resource_updated is not None:
                self.on_resource_updated(self.name, str(message.params.uri))
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
                structured=getattr(t, "output_schema", None) is not None,
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

        The timeout is our Deadline's, not the SDK request's: it stops while the server waits
        for the user to answer an elicitation (gantry/mcp/elicitation.py). A call cut by it
        is cancelled in the SDK, which sends the server a courtesy notifications/cancelled.
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
        if self.login is not None and self.login.reason is not None:
            stats.record(0.0, error=True)
            return CallResult(self._login_text(), error=True)
        if session is None and self.spec.remote:
            session = await self._reach(None, min(RENEW_WAIT, self.spec.timeout_seconds))
            if session is None:
                stats.record(0.0, error=True)
                return CallResult(self._unreached(), error=True)
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
            result = await self._send_call(session, tool, args)
        except Exception as exc:
            if self.login is not None and self.login.reason is not None:
                stats.record(time.monotonic() - started, error=True)
                return CallResult(self._login_text(), error=True)
            return self._call_failed(tool, stats, started, number, exc)
        finally:
            self.breaker.settle()
        self.breaker.success()
        error = bool(getattr(result, "is_error", False))
        stats.record(time.monotonic() - started, error=error)
        text = convert.result_text(result.content, result.structured_content, error, self.keep)
        return CallResult(text, error=error, structured=result.structured_content)

    async def _send_call(self, session: Any, tool: str, args: dict[str, Any]) -> Any:
        """tools/call, with progress as life: each notifications/progress moves the deadline
        to timeout_seconds from then, but never past call_cap(). A request that provably
        never reached the server (remote.py) is sent once more, on the next session; if
        there is none, or it did not arrive again, NotSent says so."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        timeout = self.spec.timeout_seconds
        with anyio.CancelScope() as scope:
            deadline = Deadline(scope, timeout, call_cap(timeout), MAX_CALL_SECONDS)

            async def progress(done: float, total: float | None, message: str | None) -> None:
                deadline.alive()

            with self.inflight.running(elicit.TURN.get(), deadline):
                for attempt in range(2):
                    with delivery() as ticket:
                        try:
                            # Ours is the timeout (the SDK's knows neither progress nor holds).
                            return await session.call_tool(tool, args, math.inf,
                                                           progress_callback=progress)
                        except Exception:
                            if not ticket.undelivered:
                                raise
                    if attempt:
                        break
                    session = await self._reach(session, RENEW_WAIT)
                    if session is None:
                        break
                    log.info("mcp call sent again: it never reached the server",
                             extra={"server": self.name, "tool": tool})
        if ticket.undelivered:  # (also when the deadline ran out while it waited to be sent)
            raise NotSent
        why = (ASKED if deadline.questions else CAPPED) if deadline.capped else "timed out"
        raise MCPError(code=REQUEST_TIMEOUT, message=why)

    async def _reach(self, old: Any, wait: float) -> Any:
        """A session other than `old`: the current one, or the next once up, asking the
        supervisor to try now. None if a try to connect failed, or after `wait` s."""
        tried = self._tried
        with anyio.move_on_after(wait):
            while self.session is None or self.session is old:
                self._demand.set()
                async with anyio.create_task_group() as tg:
                    for event in (self._next_up, tried):
                        tg.start_soon(_cancel_on, event, tg.cancel_scope)
                if tried.is_set():
                    break
        return self.session if self.session is not old else None

    def _unreached(self) -> str:
        """What a call that was not sent answers: the connection's last trouble, if known."""
        trouble = _redacted(self.link.tail()) if self.link is not None else ""
        why = f" ({trouble[:200]})" if trouble else ""
        return (f"MCP server {self.name!r} is not reachable{why}; the call was not sent, "
                "retry later")

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
        if isinstance(exc, NotSent):  # it never left: not the server's failure, nor a timeout
            stats.record(elapsed, error=True)
            return CallResult(self._unreached(), error=True)
        if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
            stats.record(elapsed, timeout=True)
            self._charge(number)
            self._probe = True  # hung tool or hung server? a ping tells
            self._wake.set()
            if exc.message == CAPPED:
                return CallResult(
                    f"the tool {tool!r} on MCP server {self.name!r} kept reporting progress "
                    f"but did not finish within {call_cap(self.spec.timeout_seconds):g} s "
                    "(the limit for a call that reports progress)", error=True)
            if exc.message == ASKED:
                return CallResult(
                    f"the tool {tool!r} on MCP server {self.name!r} asked the user and did not "
                    f"finish within {call_cap(self.spec.timeout_seconds):g} s, the limit for "
                    "one call (time the user took to answer aside; questions left unanswered "
                    "count)", error=True)
            return CallResult(f"the tool {tool!r} on MCP server {self.name!r} did not answer "
                              f"within {self.spec.timeout_seconds:g} s", error=True)
        stats.record(elapsed, error=True)
        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            self._charge(number)
            if self.spec.remote:  # the network, or the server? a ping tells
                self._probe = True
                self._wake.set()
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
        if self.session is None and self.login is not None and self.login.reason:
            state = f"needs login ({self.login.reason})"
        elif self.session is None and self.error:
            from gantry.clip import clip

            optional = "optional, " if not self.spec.required else ""
            state += f" ({optional}last error: {clip(self.error, 200)})"
        return (f"{self.name}: {state}, {tools}, {calls} calls, "
                f"{errors} errors, {self.restarts} restarts")


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
        self.servers = {s.name: Server(s, registry, environ, hidden.get(s.name, ()), auth,
                                       elicitor, keep)
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
            s.on_resource_updated = callback

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

