"""Slash commands beyond the agent's own (/new, /status, /help): each answers at once or
hands the turn the user's message it stands for (an MCP prompt, gantry/mcp/prompt_command.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from gantry.channel.base import Inbound
from gantry.commands import Handled, first_word
from gantry.model.messages import ImagePart


@dataclass(frozen=True)
class Run:
    """Run a turn with this as the user's message (stored as the user said it)."""

    text: str
    images: tuple[ImagePart, ...] = ()


Handler = Callable[[Inbound, str], Awaitable["str | Run"]]
"""(the message, the text after the command word) → a reply, or a turn to run."""


@dataclass(frozen=True)
class Command:
    """One command: its word (`/prompts`), its /help line, and what runs it."""

    name: str
    help: str
    run: Handler


class SlashCommands:
    """Commands as one handler the agent asks before the model (gantry.commands)."""

    def __init__(self, commands: Sequence[Command]) -> None:
        self._by_name = {c.name: c for c in commands}
        self.help: Sequence[str] = [c.help for c in commands]

    async def handle(self, msg: Inbound) -> Handled | None:
        word, rest = first_word(msg.text)
        command = self._by_name.get(word)
        if command is None:
            return None
        outcome = await command.run(msg, rest)
        if isinstance(outcome, str):
            return Handled(reply=outcome)
        return Handled(text=outcome.text, images=outcome.images)
