"""The Channel protocol: how a transport hands messages to the agent and carries replies.

Channels know nothing of models, MCP or memory; the agent knows nothing of transports.
A channel calls `respond(msg, stream)` for each inbound message and delivers the text it
returns; with streaming on, it passes a ReplyStream that shows the reply as it grows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

Progress = Callable[[int, int], None]


class TurnAborted(Exception):
    """A turn cancelled at shutdown: the channel leaves the message pending, replies nothing."""


class Inbound(msgspec.Struct, frozen=True):
    """One user message as the agent sees it."""

    channel: str  # "stdio" | "telegram"
    chat_id: str  # channel-specific chat identity, as text
    user_id: str
    text: str
    message_id: str = ""
    group: bool = False
    """Sent in a chat others can read (a Telegram group): the agent recalls no long-term
    memory into the reply, since everyone in the chat would read what it recalled."""
    on_answer: Callable[[str], None] | None = None
    """The channel's own record of the reply. The agent calls it with the turn's final answer
    inside the SQLite transaction that adds that answer to the history, so a kill can never
    leave one without the other (a redelivered message would otherwise run its turn again).
    It must write through the agent's connection, and only write."""

    @property
    def session_id(self) -> str:
        """Sessions are keyed `<channel>:<chat>` (one history per chat)."""
        return f"{self.channel}:{self.chat_id}"


class ReplyStream(Protocol):
    """A reply shown while it is being generated (STREAM_REPLIES=true)."""

    async def write(self, delta: str) -> None:
        """Show more text."""
        ...

    async def discard(self) -> None:
        """The text shown so far was a preamble to tool calls; take it back if possible."""
        ...

    async def finish(self, final_text: str) -> None:
        """Make sure the user ends up seeing exactly `final_text`."""
        ...


class Responder(Protocol):
    """The agent side: the reply text for a message (commands included)."""

    async def __call__(self, msg: Inbound, stream: ReplyStream | None) -> str: ...


class Channel(Protocol):
    """A transport. `serve` runs until the input ends (EOF) or it is cancelled."""

    name: str

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
        """Receive messages and answer them; call `ready()` once receiving has started."""
        ...

    def can_push(self, chat_id: str) -> bool:
        """Whether `push` may send to this chat (checked when a job is scheduled)."""
        ...

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None
    ) -> None:
        """Unsolicited message to a chat (cron); must respect the channel's allowlist.

        A long text goes out in parts: parts before `sent` were delivered already (resume
        after a restart), and `progress(done, total)` is called after each part so the
        caller can record it: that is what makes a push exactly-once across crashes.
        """
        ...
