"""The call path of one server's tools: validation, the breaker, the deadline (progress and
questions), calls that never reached a remote server, and what each failure tells the model."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry.mcp import convert, era, mrtr, wire
from gantry.mcp.child import INVALID_MESSAGE
from gantry.mcp.convert import CallResult
from gantry.mcp.deadline import MAX_CALL_SECONDS, Deadline
from gantry.mcp.elicitation import Asking
from gantry.mcp.link import delivery
from gantry.mcp.supervise import Supervisor
from gantry.mcp.tasks import Tasks
from gantry.mcp.validate import ArgsValidator

log = logging.getLogger("gantry.mcp")

# A call that keeps reporting progress outlives timeout_seconds of silence, up to this many
# times timeout_seconds (and never past MAX_CALL_SECONDS): a server that reports progress
# forever must still end.
PROGRESS_CAP_FACTOR = 10
CAPPED = "capped"  # the MCPError message of a call cut at call_cap() after progress
ASKED = "asked"  # … of one cut at its cap (or MAX_CALL_SECONDS) after asking the user
RENEW_WAIT = 30.0  # how long a call whose request never arrived waits for the new session
BROKEN_GRACE = 0.5  # a broken 2026 call waits this long to learn whether its link is gone


class NotSent(Exception):
    """A call that provably never reached its remote server, which cannot be reached now."""


class Broken(Exception):
    """A 2026-era call whose stream broke after it may have reached the server, not sent
    again (gantry/mcp/era.py: it is not safe to, or the one re-issue broke too)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why  # era.UNSAFE, era.TWICE or era.GONE


def call_cap(timeout: float) -> float:
    """The absolute limit of one tools/call, however much progress it reports."""
    return max(timeout, min(PROGRESS_CAP_FACTOR * timeout, MAX_CALL_SECONDS))


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


class Caller:
    """Calls one server's tools through its supervisor's session; keeps their stats."""

    def __init__(self, supervisor: Supervisor, asking: Asking,
                 keep: convert.Keep | None = None) -> None:
        self.supervisor = supervisor
        self.spec = supervisor.spec
        self.name = supervisor.name
        self.asking = asking  # the calls in flight, for the server's questions to the user
        self.keep = keep  # where binary results go so the model can send them (gantry.outbox)
        # Whether resource_read reads this server's resources (its links then say so).
        self.readable: Callable[[], bool] = lambda: False
        self.stats: dict[str, ToolStats] = {}
        self.tasks = Tasks(self.name)  # calls made as tasks; its book is set at boot
        self.cap = call_cap(self.spec.timeout_seconds)  # the spec is fixed: computed once

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
        sup = self.supervisor
        session = sup.session
        if session is not None and sup.link is not None and sup.link.closed.is_set():
            session = None  # its connection is gone: the supervisor is replacing it
        if sup.login is not None and sup.login.reason is not None:
            stats.record(0.0, error=True)
            return CallResult(sup.login_text(), error=True)
        if session is None and self.spec.remote:
            session = await sup.reach(None, min(RENEW_WAIT, self.spec.timeout_seconds))
            if session is None:
                stats.record(0.0, error=True)
                return CallResult(sup.unreached(), error=True)
        if session is None or not sup.breaker.allow():
            stats.record(0.0, error=True)
            wait = sup.breaker.remaining()
            later = f" in about {int(wait) + 1} s" if wait else " shortly"
            state = "unavailable" if sup.breaker.state != "closed" else sup.state
            return CallResult(f"MCP server {self.name!r} is {state}; retry{later}", error=True)
        started = time.monotonic()
        number = sup.number()
        try:
            result = await self._send_call(session, tool, args)
        except Exception as exc:
            if sup.login is not None and sup.login.reason is not None:
                stats.record(time.monotonic() - started, error=True)
                return CallResult(sup.login_text(), error=True)
            return self._call_failed(tool, stats, started, number, exc)
        finally:
            sup.breaker.settle()
        sup.breaker.success()
        error = bool(getattr(result, "is_error", False))
        stats.record(time.monotonic() - started, error=error)
        text = convert.plain_text(result.content)  # one text block: no walk, no reader
        if text is None:
            reader = self.name if self.readable() else ""
            text = convert.result_text(result.content, result.structured_content, error,
                                       self.keep, reader)
        return CallResult(text, error=error, structured=result.structured_content)

    async def _send_call(self, session: Any, tool: str, args: dict[str, Any]) -> Any:
        """tools/call, with progress as life: each notifications/progress moves the deadline
        to timeout_seconds from then, but never past call_cap(). A request that provably
        never reached the server (remote.py) is sent once more, on the next session; if
        there is none, or it did not arrive again, NotSent says so."""
        timeout = self.spec.timeout_seconds
        catalog = self.supervisor.catalog
        if (catalog.runs_tasks or catalog.every_call_a_task) and catalog.as_task(tool):
            return await self.tasks.call(session, tool, args, self.asking, timeout, self.cap)
        deadline = Deadline(timeout, self.cap, MAX_CALL_SECONDS)
        with deadline:

            async def progress(done: float, total: float | None, message: str | None) -> None:
                deadline.alive()

            with self.asking.running(deadline):
                broken = False
                for attempt in range(2):
                    with delivery() as ticket:
                        try:
                            # Ours is the timeout (the SDK's knows neither progress nor holds);
                            # a 2026 server's input_required rounds are relayed (mrtr.py).
                            return await mrtr.call_tool(session, tool, args, progress,
                                                        self.asking, deadline)
                        except Exception as exc:
                            if not ticket.undelivered:
                                if not era.broke(session, exc):
                                    raise
                                if attempt or not self._reissue(tool):
                                    await self._settle_link(session)
                                    raise Broken(era.TWICE if attempt else era.UNSAFE) from None
                                broken = True
                    if attempt:
                        break
                    session = await self._next_session(session, broken)
                    if session is None:
                        break
                    log.info("mcp call sent again: " + ("its stream broke, and the tool is "
                             "read-only or idempotent" if broken else "it never reached the "
                             "server"), extra={"server": self.name, "tool": tool})
        if broken and session is None:
            raise Broken(era.GONE)
        if ticket.undelivered:  # (also when the deadline ran out while it waited to be sent)
            raise NotSent
        from mcp.shared.exceptions import MCPError  # here, not on the path of every call
        from mcp_types import REQUEST_TIMEOUT

        why = (ASKED if deadline.questions else CAPPED) if deadline.capped else "timed out"
        raise MCPError(code=REQUEST_TIMEOUT, message=why)

    def _reissue(self, tool: str) -> bool:
        """Whether the listed `tool` is annotated read-only or idempotent."""
        return any(lt.reissue for lt in self.supervisor.catalog.listed.values()
                   if lt.name == tool)

    async def _next_session(self, session: Any, broken: bool) -> Any:
        """Where to send a call again: a 2026 stream that broke on a link still up is sent
        again on the same (stateless) connection; otherwise on the next session."""
        sup = self.supervisor
        link = sup.link
        if broken and sup.session is session and link is not None:
            await self._settle_link(session)
            if not link.closed.is_set():
                return session
        return await sup.reach(session, RENEW_WAIT)

    async def _settle_link(self, session: Any) -> None:
        """After a broken call, wait (briefly) to learn whether its connection is gone: a
        dying child fails its calls a moment before its link is marked closed, and the next
        call must not be sent on it."""
        link = self.supervisor.link
        if link is not None and self.supervisor.session is session:
            with anyio.move_on_after(BROKEN_GRACE):
                await link.closed.wait()

    def _call_failed(
        self, tool: str, stats: ToolStats, started: float, number: int, exc: Exception
    ) -> CallResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT

        sup = self.supervisor
        elapsed = time.monotonic() - started
        if isinstance(exc, NotSent):  # it never left: not the server's failure, nor a timeout
            stats.record(elapsed, error=True)
            return CallResult(sup.unreached(), error=True)
        if isinstance(exc, Broken):
            stats.record(elapsed, error=True)
            sup.charge(number)
            if self.spec.remote:
                sup.suspect()
            return CallResult(era.broken_text(self.name, tool, exc.why), error=True)
        if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
            stats.record(elapsed, timeout=True)
            sup.charge(number)
            sup.suspect()  # hung tool or hung server? a ping tells
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
            sup.charge(number)
            if self.spec.remote:  # the network, or the server? a ping tells
                sup.suspect()
            return CallResult(f"MCP server {self.name!r} stopped while running {tool!r}; it is "
                              "being restarted, retry later", error=True)
        if isinstance(exc, MCPError) and exc.code == PARSE_ERROR and exc.message == INVALID_MESSAGE:
            sup.breaker.success()  # it answered, if garbled: alive, and this call is over
            return CallResult(f"MCP server {self.name!r} sent an invalid message in reply to "
                              f"{tool!r}", error=True)
        if isinstance(exc, MCPError):
            sup.breaker.success()  # it answered: the server is alive
            return CallResult(f"MCP server {self.name!r} rejected the call: {exc.message}",
                              error=True)
        log.warning("mcp call failed", extra={"server": self.name, "tool": tool,
                                              "error": f"{type(exc).__name__}: {exc}"[:300]})
        return CallResult(f"calling {tool!r} on MCP server {self.name!r} failed: "
                          f"{type(exc).__name__}: {str(exc)[:300]}", error=True)

    def totals(self) -> tuple[int, int]:
        """(calls, errors) over every tool, for /status."""
        return (sum(s.calls for s in self.stats.values()),
                sum(s.errors for s in self.stats.values()))
