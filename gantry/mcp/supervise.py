"""Supervision of one server: connect, initialize, serve, reconnect with backoff; its breaker.

One long-lived task per server opens and closes its own SDK client context (the SDK's cancel
scopes must not cross tasks); calls (caller.py) use the live session from their own tasks. A
server that dies is restarted with capped exponential backoff and jitter; a circuit breaker
stops hammering one that keeps failing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from gantry.mcp.auth import AuthHook
from gantry.mcp.breaker import Breaker
from gantry.mcp.catalog import Catalog
from gantry.mcp.elicitation import Asking
from gantry.mcp.era import negotiate, probe
from gantry.mcp.link import Link
from gantry.mcp.listen import Listener
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.resources import Subscriptions
from gantry.mcp.trouble import ServerStartError, besides, cause, describe, redacted

log = logging.getLogger("gantry.mcp")

BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
STABLE_AFTER = 30.0  # up this long → the next crash starts the backoff from the beginning
# A remote server that went away is no crashing child: trying it costs one connect, so it is
# tried again at most this far apart, charging the breaker nothing, and at once for a call.
REMOTE_BACKOFF_CAP = 2.0
INIT_TIMEOUT = 30.0
PING_TIMEOUT = 5.0


class Listing(Protocol):
    """A list a server keeps besides its tools (prompts.py, resource_tool.py): read after
    every initialize, and again when the server says it changed."""

    what: str  # for the log: "prompts", "resources"

    async def refresh(self, session: Any, capabilities: Any) -> None:
        """List it again (bounded by the caller's timeout); raising leaves the old list."""
        ...

    def changed(self, message: Any) -> bool:
        """Whether a server notification says this list changed."""
        ...


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter in [half, full] of the step."""
    step = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** min(attempt, 20)))
    return step * (0.5 + 0.5 * (rng or random).random())


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


@asynccontextmanager
async def open_link(
    spec: ServerSpec, environ: Mapping[str, str], warned: set[str], auth: Any = None
) -> AsyncIterator[tuple[Link, Any, Any]]:
    """Connect to `spec` and yield (link, read stream, write stream) for a ClientSession.
    `auth`: an httpx2.Auth for a remote server (see AuthHook), ignored for a child."""
    if spec.remote:
        from gantry.mcp.remote import open_remote

        async with open_remote(spec, environ, auth) as remote:
            yield remote
    else:
        from gantry.mcp.child import open_child

        async with open_child(spec, environ, warned) as child:
            yield child


class Supervisor:
    """One server's connection: its supervisor task, live session, breaker and state."""

    def __init__(
        self, spec: ServerSpec, environ: Mapping[str, str], auth: AuthHook | None,
        catalog: Catalog, watches: Subscriptions, asking: Asking,
        listings: Sequence[Listing] = (),
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.environ = environ
        self.catalog = catalog  # listed at every start, and again on tools/list_changed
        self.watches = watches  # subscribed again at every start
        # 2026 sessions: list changes come on a listen stream
        self.listener = Listener(spec.name, watches, self._tools_changed, self._lists_changed)
        self.protocol = ""  # the protocol version the last session spoke (era.py)
        self.asking = asking  # the elicitation callback each session gets
        self.listings = tuple(listings)  # prompts and resources, listed at every start
        self.capabilities: Any = None  # the server's, from its last initialize
        self._stale: set[int] = set()  # indexes of listings whose list_changed came
        self.state = "starting"
        self.session: Any = None
        self.link: Link | None = None
        self.auth = auth  # gives a remote server's HTTP client its httpx2.Auth (auth.py)
        # An OAuth server's login state (gantry/mcp/oauth.py Gate), from the hook that has one.
        gate = getattr(auth, "gate", None)
        self.login: Any = gate(spec) if gate is not None else None
        if self.login is not None:
            self.login.on_refused = self._login_lost
        self.error = ""  # why it is not up, for /status and check (an optional server's)
        self._next_up = anyio.Event()  # set (and replaced) as each new session comes up
        self.instructions: str = ""
        self.breaker = Breaker()
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
                        await self.watches.resubscribe(session)
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
                                                             "tools": len(self.catalog.listed)})
                        else:
                            log.info("mcp server restarted",
                                     extra={"server": self.name,
                                            "tools": len(self.catalog.listed)})
                        ever_up = True
                        async with self.listener.running(session):
                            await self._serve(session, link)
                        reason = link.reason
                        renew = link.renew
                        self.session = None
            except Exception as exc:
                if self.login is not None and self.login.reason is not None:
                    first = self._needs_login(first, task_status)
                    continue  # not a failure of the server: it waits for `gantry mcp login`
                # open_link's task groups wrap what its body raised in an exception group.
                inner = cause(exc)
                if isinstance(inner, ServerStartError):
                    message = str(inner)
                else:
                    tail = self.link.tail() if self.link else ""
                    message = self._start_message(describe(inner), tail)
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
            self.error = redacted(reason.split("\n", 1)[0])
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

    def login_text(self) -> str:
        return f"MCP server {self.name!r} needs an OAuth login: {self.login.reason}"

    def _start_message(self, error: str, tail: str) -> str:
        verb = "could not connect" if self.spec.remote else "could not start"
        msg = f"MCP server {self.name!r} ({self.spec.where}) {verb}: {error}"
        if self.spec.remote:
            extra = besides(tail, error)
            if extra:
                msg += f" {extra}" if extra.startswith("(") else f" ({extra})"
            return redacted(msg)
        if tail:
            msg += "\nlast lines of its stderr:\n  " + "\n  ".join(tail.splitlines()[-10:])
        return msg

    async def _connect(self, link: Link, read: Any, write: Any) -> Any:
        from mcp.client.session import ClientSession
        from mcp_types import Implementation

        from gantry import __version__
        from gantry.mcp import taskext

        # The default read timeout bounds requests the SDK sends on its own (tools/list when
        # a called tool's output schema is not cached); ours carry their own timeouts.
        return ClientSession(
            read, write,
            read_timeout_seconds=INIT_TIMEOUT,
            message_handler=self._on_message,
            elicitation_callback=self.asking.callback(),
            client_info=Implementation(name="gantry", version=__version__),
            **taskext.session_options(),  # the 2026 tasks extension, declared
        )

    async def _initialize(self, session: Any, link: Link) -> None:
        """initialize, the listings (prompts, resources: each bounded on its own, a failure
        only logged), then tools/list last, so tools listed means the server is all but up; a
        child that dies meanwhile fails it at once (its stdout closes, and the SDK fails the
        pending request)."""
        step = "initialize"
        try:
            with anyio.fail_after(INIT_TIMEOUT):
                await negotiate(session, self.spec)
            self.capabilities = session.server_capabilities
            await self._list_all(session, range(len(self.listings)))
            with anyio.fail_after(INIT_TIMEOUT):
                step = "tools/list"
                await self.catalog.list_tools(session)
        except Exception as exc:
            await anyio.sleep(0.2)  # its exit status and last stderr lines
            ended = link.ended()
            if isinstance(exc, TimeoutError):
                why = f"no answer to {step} within {INIT_TIMEOUT:g} s"
            elif ended is not None:  # a remote's HTTP status, and what its body said
                extra = besides(describe(exc), ended) if self.spec.remote else ""
                why = f"{ended}; {extra}" if extra else ended
            else:
                why = describe(exc)
            raise ServerStartError(self._start_message(why, link.tail())) from None
        self.protocol = session.protocol_version or ""
        self.instructions = session.instructions or ""
        resources = getattr(session.server_capabilities, "resources", None)
        self.watches.can_subscribe = bool(getattr(resources, "subscribe", False))

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
                        await self.catalog.list_tools(session)
                    log.info("mcp tools refreshed",
                             extra={"server": self.name, "tools": len(self.catalog.listed)})
                except Exception as exc:
                    log.warning("mcp tools/list failed", extra={"server": self.name,
                                                                 "error": str(exc)[:200]})
            if self._stale:
                stale, self._stale = sorted(self._stale), set()
                await self._list_all(session, stale)
            if self._probe:
                self._probe = False
                with anyio.move_on_after(PING_TIMEOUT) as scope:
                    try:
                        await probe(session)
                    except Exception:
                        scope.cancel()
                if scope.cancelled_caught:
                    # The calls in flight on it fail as it stops; the timeout that started
                    # this was charged already, and they are the same episode.
                    self._charged_upto = self._started_calls
                    link.mark_closed("it stopped answering (ping failed after a timeout)")
                    return

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ResourceUpdatedNotification, ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, ResourceUpdatedNotification):
            self.watches.updated(str(message.params.uri))
        elif any(listing.changed(message) for listing in self.listings):
            self._stale.update(i for i, listing in enumerate(self.listings)
                               if listing.changed(message))
            self._wake.set()
        elif isinstance(message, Exception):
            log.warning("mcp transport error", extra={"server": self.name,
                                                       "error": str(message)[:200]})

    async def _list_all(self, session: Any, which: Any) -> None:
        """Each listing in `which` read again, each within INIT_TIMEOUT; a failure keeps
        that list as it was (a server's prompts are no reason to refuse its tools)."""
        for i in which:
            listing = self.listings[i]
            try:
                with anyio.fail_after(INIT_TIMEOUT):
                    await listing.refresh(session, self.capabilities)
            except Exception as exc:
                log.warning(f"mcp {listing.what} list failed; the last list is kept",
                            extra={"server": self.name, "error": describe(exc)[:200]})

    def _lists_changed(self, what: str) -> None:
        """prompts or resources list_changed on a 2026 listen stream: that listing re-read."""
        self._stale.update(i for i, listing in enumerate(self.listings) if listing.what == what)
        self._wake.set()

    def _tools_changed(self) -> None:
        """tools/list_changed (a notification, or an event on a 2026 listen stream)."""
        self._refresh = True
        self._wake.set()

    # ------------------------------------------------------------------ for the call path

    async def reach(self, old: Any, wait: float) -> Any:
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

    def unreached(self) -> str:
        """What a call that was not sent answers: the connection's last trouble, if known."""
        trouble = redacted(self.link.tail()) if self.link is not None else ""
        why = f" ({trouble[:200]})" if trouble else ""
        return (f"MCP server {self.name!r} is not reachable{why}; the call was not sent, "
                "retry later")

    def number(self) -> int:
        """Number a call as it starts (see charge)."""
        self._started_calls += 1
        return self._started_calls

    def charge(self, number: int) -> None:
        """One breaker failure per episode: calls already in flight when one was charged
        (the others a crash or a hang hit) add none. A half-open probe started after every
        charge so far, so its failure always counts."""
        if number > self._charged_upto:
            self._charged_upto = self._started_calls
            self.breaker.failure()

    def suspect(self) -> None:
        """A call suggests the server hangs (or the network went): a ping tells."""
        self._probe = True
        self._wake.set()

    def described_state(self) -> str:
        """Its state for /status: the breaker's, a missing login, or the last error."""
        state = "open circuit" if self.breaker.state != "closed" else self.state
        if self.session is None and self.login is not None and self.login.reason:
            state = f"needs login ({self.login.reason})"
        elif self.session is None and self.error:
            from gantry.clip import clip

            optional = "optional, " if not self.spec.required else ""
            state += f" ({optional}last error: {clip(self.error, 200)})"
        return state
