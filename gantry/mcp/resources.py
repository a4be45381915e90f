"""One server's resource subscriptions (watches): sent again on every new session, read as text."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from gantry.mcp.convert import CallResult
from gantry.mcp.manifest import ServerSpec
from gantry.mcp.trouble import describe

log = logging.getLogger("gantry.mcp")


class Subscriptions:
    """The resource URIs subscribed on one server, and who hears of their updates."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.can_subscribe = False  # its capabilities include resources.subscribe
        self.uris: set[str] = set()  # resource URIs, subscribed again on restart
        self.on_updated: Callable[[str, str], None] | None = None
        # Set while a 2026-era session carries the URIs on subscriptions/listen (listen.py):
        # a new URI re-opens that stream instead of sending resources/subscribe.
        self.listening: Callable[[], Awaitable[None]] | None = None

    def updated(self, uri: str) -> None:
        """notifications/resources/updated (the session's reader calls it: it must not block)."""
        if self.on_updated is not None:
            self.on_updated(self.name, uri)

    async def resubscribe(self, session: Any) -> None:
        """A new session has no subscriptions: send them again, and have each resource read
        again (it may have changed while the server was down). A 2026-era session has no
        resources/subscribe: its listen stream names them (listen.py)."""
        from gantry.mcp.era import modern

        stateless = modern(session)
        for uri in sorted(self.uris):
            try:
                if not stateless:
                    await self._subscribe(session, uri)
            except Exception as exc:
                log.warning("mcp resource resubscribe failed",
                            extra={"server": self.name, "uri": uri, "error": describe(exc)})
            self.updated(uri)

    async def _subscribe(self, session: Any, uri: str) -> None:
        from mcp_types import EmptyResult, SubscribeRequest, SubscribeRequestParams

        with anyio.fail_after(self.spec.timeout_seconds):
            await session.send_request(
                SubscribeRequest(params=SubscribeRequestParams(uri=uri)), EmptyResult)

    async def subscribe(self, session: Any, uri: str) -> None:
        """Subscribe to `uri` now if `session` is up (raising on failure), and after every
        restart."""
        self.uris.add(uri)
        if session is not None and self.listening is not None:
            await self.listening()
        elif session is not None:
            await self._subscribe(session, uri)

    async def read(self, session: Any, state: str, uri: str) -> CallResult:
        """resources/read as text (text contents joined); every failure is an error result."""
        if session is None:
            return CallResult(f"MCP server {self.name!r} is {state}", error=True)
        try:
            with anyio.fail_after(self.spec.timeout_seconds):
                result = await session.read_resource(uri)
        except TimeoutError:
            return CallResult(f"reading {uri} on MCP server {self.name!r} timed out", error=True)
        except Exception as exc:
            return CallResult(f"reading {uri} on MCP server {self.name!r} failed: "
                              f"{describe(exc)}", error=True)
        texts = [c.text for c in result.contents if getattr(c, "text", None) is not None]
        if not texts:
            return CallResult(f"resource {uri} has no text content", error=True)
        return CallResult("\n".join(texts))
