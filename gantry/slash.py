"""Slash commands beyond the agent's own (/new, /status, /help): each answers at once or
hands the turn the user's message it stands for (an MCP prompt, gantry/mcp/prompt_command.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gantry.channel.base import Inbound
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
