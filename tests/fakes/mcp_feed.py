"""An MCP stdio server (official SDK) whose items come from a file the test appends to.

Run as `python -m tests.fakes.mcp_feed`. The feed file (FEED_FILE) holds one JSON object per
line. Tools: `items` (the lines as a JSON list, in a text block: no output schema),
`feed` (the same as structuredContent `{"items": [...]}`, with an output schema), `broken`
(text that is not JSON). Each tool call adds a line to FEED_FILE.calls, each resource read
one to FEED_FILE.reads, each subscribe one to FEED_FILE.subscribes.
Resource `feed://items`: the lines as JSON text. With FEED_SUBSCRIBE=1 the server also
serves resources/subscribe and sends notifications/resources/updated to subscribers when
the file changes (it looks every 50 ms), and, for 2026-07-28 clients, publishes the same
update to its subscriptions/listen streams; without it, it offers no subscriptions.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import EmptyResult, SubscribeRequestParams
from pydantic import BaseModel

URI = "feed://items"
SUBSCRIBERS: list[Any] = []
BUS = InMemorySubscriptionBus()  # the 2026 subscriptions/listen fan-out


def _path() -> str:
    return os.environ["FEED_FILE"]


def _read() -> list[dict[str, Any]]:
    try:
        with open(_path()) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def _stamp() -> tuple[int, float]:
    try:
        st = os.stat(_path())
    except FileNotFoundError:
        return (0, 0.0)
    return (st.st_size, st.st_mtime)


async def _notifier() -> None:
    """Tell subscribers when the feed file changes."""
    last = _stamp()
    while True:
        await anyio.sleep(0.05)
        now = _stamp()
        if now == last:
            continue
        last = now
        if os.environ.get("FEED_SUBSCRIBE") == "1":
            await BUS.publish(ResourceUpdated(URI))
        for session in list(SUBSCRIBERS):
            try:
                await session.send_resource_updated(URI)
            except Exception:
                SUBSCRIBERS.remove(session)


@asynccontextmanager
async def lifespan(_server: Any) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_notifier)
        yield
        tg.cancel_scope.cancel()


server = MCPServer("feed", instructions="A feed fixture for gantry's watch tests.",
                   lifespan=lifespan,
                   subscriptions=BUS if os.environ.get("FEED_SUBSCRIBE") == "1" else False)


class Feed(BaseModel):
    items: list[dict[str, Any]]


def _count(kind: str = "calls") -> None:
    """One line per tool call (or resource read) in FEED_FILE.calls (.reads): it outlives
    the server process, so a test counts polls across restarts."""
    with open(f"{_path()}.{kind}", "a") as fh:
        fh.write("1\n")


@server.tool(structured_output=False)
def items() -> str:
    """The feed's items as a JSON list."""
    _count()
    return json.dumps(_read())


@server.tool()
def feed() -> Feed:
    """The feed's items as structured content."""
    _count()
    return Feed(items=_read())


@server.tool()
def wrapped() -> str:
    """The items as a JSON string the SDK wraps as structuredContent {"result": "..."}."""
    _count()
    return json.dumps(_read())


@server.tool(structured_output=False)
def broken() -> str:
    """Text that is not JSON."""
    _count()
    return "sorry, no JSON today"


@server.resource(URI, mime_type="application/json")
def feed_resource() -> str:
    """The feed's items as JSON."""
    _count("reads")
    return json.dumps(_read())


async def _subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
    if ctx.session not in SUBSCRIBERS:
        SUBSCRIBERS.append(ctx.session)
    with open(_path() + ".subscribes", "a") as fh:
        fh.write(str(params.uri) + "\n")
    return EmptyResult()


if os.environ.get("FEED_SUBSCRIBE") == "1":
    server._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams,
                                                _subscribe)

if __name__ == "__main__":
    server.run()
