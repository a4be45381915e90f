"""Chat commands a part adds (skills' `/skills` and `/<skill>`): the handler the agent asks
before the model, and what a handled command becomes.

The agent's own commands (/new, /status, /help) come first; then each handler in turn; a
command none of them knows is answered as unknown (gantry.channel.base.unknown_command).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gantry.channel.base import Inbound
from gantry.model.messages import ImagePart


@dataclass(frozen=True)
class Handled:
    """A command's outcome: `reply` answers it without a turn; otherwise `text` is the
    user message the turn runs with (a skill's instructions placed in it)."""

    reply: str | None = None
    text: str = ""
    images: tuple[ImagePart, ...] = ()  # with `text` (an MCP prompt's images)


class CommandHandler(Protocol):
    help: Sequence[str]  # lines for /help

    async def handle(self, msg: Inbound) -> Handled | None:
        """The outcome of `msg` if it is one of this handler's commands, else None."""
        ...


def first_word(text: str) -> tuple[str, str]:
    """A message's command word (lower case, Telegram's `@botname` cut) and the rest."""
    words = text.strip().split(maxsplit=1)
    if not words or not words[0].startswith("/"):
        return "", text
    return words[0].split("@", 1)[0].lower(), words[1] if len(words) > 1 else ""


async def dispatch(handlers: Sequence[CommandHandler], msg: Inbound) -> Handled | None:
    for handler in handlers:
        handled = await handler.handle(msg)
        if handled is not None:
            return handled
    return None
