"""A 2026-era server's change notifications: one `subscriptions/listen` stream per session.

At 2026-07-28 there is no standing event stream and no resources/subscribe: a client opens
`subscriptions/listen` naming what it wants (tools/list_changed, the watched resource URIs)
and the server pushes those on it. The SDK opens the stream and types its events; gantry
keeps one open while the session lives, opens it again with the new filter when a watch
subscribes, and after a lost stream (there is no replay) re-opens it and refetches what
depends on it: the tool list, and every watched resource.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from gantry.mcp import era
from gantry.mcp.resources import Subscriptions
from gantry.mcp.trouble import describe

log = logging.getLogger("gantry.mcp")

RETRY_BASE = 0.5
RETRY_CAP = 30.0
ACK_TIMEOUT = 30.0  # a watch's subscribe waits this long for the new stream's acknowledgment


class Listener:
    """One server's listen stream, across its sessions (only 2026-era ones listen)."""

    def __init__(self, name: str, watches: Subscriptions,
                 tools_changed: Callable[[], None],
                 lists_changed: Callable[[str], None] = lambda what: None) -> None:
        self.name = name
        self.watches = watches
        self.tools_changed = tools_changed  # the supervisor re-lists its tools
        self.lists_changed = lists_changed  # … or its "prompts" / "resources"
        self._again = anyio.Event()  # set: re-open with the current filter
        self._acked = anyio.Event()  # set as a (re-)opened stream is acknowledged, or fails
        self._error = ""  # why the last open failed ("" if it was acknowledged)
        self.open = False  # a stream is acknowledged and open, for /status and tests

    @asynccontextmanager
    async def running(self, session: Any) -> AsyncIterator[None]:
        """Keep a listen stream open on `session` while the block runs (a 2025-era session:
        nothing; its notifications come the old way, through the session's handler)."""
        if not era.modern(session):
            yield
            return
        self.watches.listening = self.relisten
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run, session)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self.watches.listening = None
            self.open = False

    async def relisten(self) -> None:
        """Re-open the stream with the current filter (a watch was added); raise if the
        server refused it or did not acknowledge it in time."""
        acked = self._acked = anyio.Event()
        self._again.set()
        with anyio.fail_after(ACK_TIMEOUT):
            await acked.wait()
        if self._error:
            raise RuntimeError(self._error)

    def _wanted(self, session: Any) -> tuple[bool, bool, bool, list[str]]:
        """(tools, prompts and resources list_changed, resource URIs) the server can push,
        of what gantry wants."""
        caps = session.server_capabilities

        def pushes(kind: str) -> bool:
            return bool(getattr(getattr(caps, kind, None), "list_changed", False))

        uris = sorted(self.watches.uris) if self.watches.can_subscribe else []
        return pushes("tools"), pushes("prompts"), pushes("resources"), uris

    def _settled(self, error: str) -> None:
        self._error = error
        self._acked.set()

    async def _run(self, session: Any) -> None:
        from mcp.client.subscriptions import listen

        failures = 0
        while True:
            self._again = again = anyio.Event()
            tools, prompts, resources, uris = self._wanted(session)
            if not (tools or prompts or resources or uris):
                self._settled("")
                await again.wait()
                continue
            try:
                async with listen(session, tools_list_changed=tools,
                                  prompts_list_changed=prompts,
                                  resources_list_changed=resources,
                                  resource_subscriptions=uris) as stream:
                    self.open = True
                    self._settled("")
                    if failures:  # no replay: what changed while it was gone is fetched
                        self._refetch()
                        log.info("mcp listen stream open again", extra={"server": self.name})
                    failures = 0
                    await self._consume(stream, again)
                    self.open = False
                    if again.is_set():
                        continue
                    # A graceful close by the server: open it again (not in a tight loop).
                    failures = 1
            except Exception as exc:
                self.open = False
                failures += 1
                self._settled(f"subscriptions/listen failed: {describe(exc)}"[:300])
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "mcp listen stream lost; opening it again",
                        extra={"server": self.name, "error": describe(exc)[:200],
                               "attempt": failures})
            delay = min(RETRY_CAP, RETRY_BASE * 2 ** min(failures, 10))
            with anyio.move_on_after(delay):
                await again.wait()

    async def _consume(self, stream: Any, again: anyio.Event) -> None:
        """Deliver the stream's events until it ends or `again` asks for a new filter."""
        from mcp.client.subscriptions import (
            PromptsListChanged,
            ResourcesListChanged,
            ResourceUpdated,
            ToolsListChanged,
        )

        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                await again.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop)
            async for event in stream:
                if isinstance(event, ToolsListChanged):
                    self.tools_changed()
                elif isinstance(event, ResourceUpdated):
                    self.watches.updated(str(event.uri))
                elif isinstance(event, PromptsListChanged):
                    self.lists_changed("prompts")
                elif isinstance(event, ResourcesListChanged):
                    self.lists_changed("resources")
            tg.cancel_scope.cancel()

    def _refetch(self) -> None:
        self.tools_changed()
        self.lists_changed("prompts")
        self.lists_changed("resources")
        for uri in sorted(self.watches.uris):
            self.watches.updated(uri)
