"""The Channel protocol: how a transport hands messages to the agent and carries replies.

Channels know nothing of models, MCP or memory; the agent knows nothing of transports.
A channel calls `respond(msg, stream)` for each inbound message and delivers the text it
returns; with streaming on, it passes a ReplyStream that shows the reply as it grows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import msgspec

from gantry.model.messages import ImagePart
from gantry.steer import Steer

Progress = Callable[[int, int], None]

COMMANDS = frozenset({"/new", "/status", "/usage", "/help", "/start", "/prompts", "/prompt"})
"""The commands the agent answers itself (`/start` is Telegram's first message; `/prompts`
and `/prompt` are MCP servers' prompts, gantry/mcp/prompt_command.py)."""
STOP_COMMANDS = frozenset({"/stop", "/cancel"})
"""The commands a channel handles itself, out of band: they stop the chat's running turn."""
STOPPED_REPLY = "Stopped."
NOTHING_TO_STOP = "Nothing to stop: no reply is being written."
NOTHING_TO_DECLINE = "Nothing to decline: no MCP server is asking a question."
_COMMAND = re.compile(r"/[A-Za-z][A-Za-z0-9_]{0,31}(?:@[A-Za-z0-9_]+)?")


class TurnAborted(Exception):
    """A turn cancelled at shutdown: the channel leaves the message pending, replies nothing."""


class TurnFailed(Exception):
    """A scheduled turn (`Inbound.scheduled`) that produced no answer. `reason` names the
    failure without secrets, for the record; `reply` is what a user who asked would read."""

    def __init__(self, reason: str, reply: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply


class TurnStopped(Exception):
    """The user stopped the turn (Telegram's /stop, the REPL's Ctrl-C): the channel says
    "stopped" instead of a reply; the history records the turn as stopped, the process
    carries on."""


def is_stop(text: str) -> bool:
    """Whether a message is `/stop` or `/cancel` (also `/stop@botname`, any case)."""
    words = text.strip().split(maxsplit=1)
    return bool(words) and words[0].split("@", 1)[0].lower() in STOP_COMMANDS


def is_command(text: str) -> bool:
    """Whether the first word is command-shaped (`/usr/bin …` is no command: a command is a
    word of letters, digits and underscores after the slash, maybe `@botname`)."""
    words = text.strip().split(maxsplit=1)
    return bool(words) and _COMMAND.fullmatch(words[0]) is not None


def unknown_command(text: str) -> str | None:
    """The reply to a command-shaped first word the agent does not know, else None: a typo
    such as `/stauts` is answered, not sent to the model as a message."""
    if not is_command(text):
        return None
    words = text.strip().split(maxsplit=1)
    command = words[0].split("@", 1)[0].lower()
    if command in COMMANDS:
        return None
    if command == "/decline":  # a question's answer (gantry/elicit.py); none is open
        return NOTHING_TO_DECLINE
    return f"Unknown command {command}. /help lists the commands."


class Inbound(msgspec.Struct, frozen=True):
    """One user message as the agent sees it."""

    channel: str  # "stdio" | "telegram"
    chat_id: str  # channel-specific chat identity, as text
    user_id: str
    text: str
    message_id: str = ""
    group: bool = False
    """Sent in a chat others can read (a Telegram group): the agent recalls no long-term
    memory into the reply and neither offers nor runs the memory tools, since everyone in
    the chat would read what they recalled."""
    scheduled: bool = False
    """Sent by the scheduler, not a person: a failed turn raises TurnFailed instead of
    answering with an apology, which would be pushed to a user who asked nothing."""
    on_answer: Callable[[str], None] | None = None
    """The channel's own record of the reply. The agent calls it with the turn's final answer
    inside the SQLite transaction that adds that answer to the history, so a kill can never
    leave one without the other (a redelivered message would otherwise run its turn again).
    It must write through the agent's connection, and only write."""
    scheduled_for: float | None = None
    """A scheduled message's due time (unix seconds): the prompt's time block names it."""
    source: str = ""
    """What started the turn, as the usage ledger counts its model calls: "" for a person's
    message (counted as "chat"), `cron:<job id>` or `watch:<watch id>` for a scheduled one."""
    images: tuple[ImagePart, ...] = ()
    """Images sent with the message (gantry.media): they go to the model as content parts
    after `text`, which describes them and holds any caption."""
    steer: Steer | None = None
    """The same user's follow-ups, folded into this turn between its rounds (gantry.steer);
    None: FOLLOWUPS=queue, or a channel without them."""
    context: str = ""
    """What the channel knows that the user did not type (a reaction to an earlier reply):
    lines shown to the model with this turn's time footer, never stored in the history."""

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

    async def restart(self) -> None:
        """The reply starts over (the model's stream broke; a fallback model writes it
        afresh): what was shown must be replaced by what follows, never added to."""
        ...

    async def finish(self, final_text: str) -> None:
        """Make sure the user ends up seeing exactly `final_text`."""
        ...


class Responder(Protocol):
    """The agent side: the reply text for a message (commands included)."""

    async def __call__(self, msg: Inbound, stream: ReplyStream | None) -> str: ...


@runtime_checkable
class Stoppable(Protocol):
    """A responder whose running turns can be stopped (gantry.turns.Shielded)."""

    def running(self, msg: Inbound) -> bool:
        """Whether `stop(msg)` would stop a turn (it runs, and has no final answer yet)."""
        ...

    def stop(self, msg: Inbound) -> bool:
        """Stop the turn answering `msg` (its call raises TurnStopped); False if none runs."""
        ...


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
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None,
        origin: str = "scheduled",
    ) -> None:
        """Unsolicited message to a chat (cron, a watch); must respect the channel's allowlist.
        `origin` says what sent it, for a channel that marks pushes (the REPL's `[watch …]`).

        A long text goes out in parts: parts before `sent` were delivered already (resume
        after a restart), and `progress(done, total)` is called after each part so the
        caller can record it: that is what makes a push exactly-once across crashes.
        """
        ...
