"""The Channel protocol: how a transport hands messages to the agent and carries replies back.

Channels know nothing of models, MCP or memory; the agent knows nothing of transports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import msgspec


class Inbound(msgspec.Struct, frozen=True):
    """One user message as the agent sees it."""

    channel: str  # "stdio" | "telegram"
    chat_id: str  # channel-specific chat identity, as text
    user_id: str
    text: str
    message_id: str = ""

    @property
    def session_id(self) -> str:
        """Sessions are keyed `<channel>:<chat>` (one history per chat)."""
        return f"{self.channel}:{self.chat_id}"


class ReplyStream(Protocol):
    """A reply being written token by token (STREAM_REPLIES=true)."""

    async def write(self, delta: str) -> None: ...

    async def finish(self, final_text: str) -> None:
        """Deliver the complete text; the channel reconciles it with what was streamed."""
        ...

    async def abort(self) -> None:
        """Discard a partial reply (e.g. the round turned out to be tool calls)."""
        ...


Handler = Callable[[Inbound], Awaitable[None]]


class Channel(Protocol):
    """A transport. `serve` runs until the channel is exhausted (EOF) or cancelled."""

    name: str

    async def serve(self, handler: Handler) -> None: ...

    async def reply(self, msg: Inbound, text: str) -> None: ...

    def stream(self, msg: Inbound) -> ReplyStream: ...

    async def push(self, chat_id: str, text: str) -> None:
        """Unsolicited message to a chat (cron); must respect the channel's allowlist."""
        ...


async def drain(it: AsyncIterator[str]) -> str:
    """Collect an async iterator of text deltas into one string."""
    parts = [d async for d in it]
    return "".join(parts)
