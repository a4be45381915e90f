"""`/prompts` and `/prompt SERVER NAME arg=value …`: the MCP servers' prompts as commands.

`/prompts [SERVER]` lists them; `/prompt` gets one (prompts/get) and its text becomes the
turn's user message. Arguments missing from the line are asked for one at a time through the
channel's elicitation dialog (the questions a server's form gets), when a person can answer;
otherwise the reply says how to give them. docs/mcp.md, "Prompts and resources".
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from gantry import elicit
from gantry.channel.base import Inbound
from gantry.clip import clip
from gantry.mcp.prompt_line import LineError, bind, split_words
from gantry.mcp.prompts import ListedPrompt, PromptError
from gantry.slash import Command, Run

log = logging.getLogger("gantry.mcp")

LIST_MAX_CHARS = 6_000  # of one /prompts reply
USAGE = "/prompt SERVER NAME arg=value … — run an MCP server's prompt (/prompts lists them)"
LIST_HELP = "/prompts — the MCP servers' prompts"
NONE = "No MCP server offers prompts."


def usage_of(server: str, p: ListedPrompt) -> str:
    """How a prompt is typed: its required arguments, then its optional ones in brackets."""
    args = " ".join(f"{a.name}=…" if a.required else f"[{a.name}=…]" for a in p.arguments)
    return f"/prompt {server} {p.name}" + (f" {args}" if args else "")


def prompt_line(server: str, p: ListedPrompt) -> str:
    about = ": ".join(x for x in (p.title if p.title != p.name else "", p.description) if x)
    return f"{usage_of(server, p)}" + (f" — {about}" if about else "")


def listing(prompts: list[tuple[str, ListedPrompt]], only: str = "") -> str:
    """The /prompts reply: a line per prompt, grouped by server, bounded."""
    chosen = [(s, p) for s, p in prompts if not only or s == only]
    if not chosen:
        return f"MCP server {only!r} offers no prompts." if only else NONE
    lines = ["MCP servers' prompts (a value with spaces goes in quotes: city=\"New York\"):"]
    size = len(lines[0])
    for i, (server, p) in enumerate(chosen):
        line = prompt_line(server, p)
        if size + len(line) + 1 > LIST_MAX_CHARS:
            rest = len(chosen) - i
            lines.append(f"… {rest} more" + ("" if only else "; /prompts SERVER lists one "
                                              "server's"))
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


class PromptCommands:
    """The two commands over the MCP host (None: no servers, so no prompts)."""

    def __init__(self, host: Any, timeout: float = elicit.DEFAULT_TIMEOUT) -> None:
        self.host = host
        self.timeout = timeout  # one question's wait (ELICITATION_TIMEOUT_SECONDS)

    def commands(self) -> list[Command]:
        return [Command("/prompts", LIST_HELP, self.show), Command("/prompt", USAGE, self.run)]

    def _prompts(self) -> list[tuple[str, ListedPrompt]]:
        return self.host.prompts() if self.host is not None else []

    async def show(self, msg: Inbound, rest: str) -> str:
        return listing(self._prompts(), rest.strip())

    async def run(self, msg: Inbound, rest: str) -> str | Run:
        try:
            words = split_words(rest)
        except LineError as exc:
            return f"{exc}. Usage: {USAGE}"
        found = self._find(words)
        if isinstance(found, str):
            return found
        server, p, given = found
        try:
            values = bind(given, [a.name for a in p.arguments])
        except LineError as exc:
            return f"{exc}. Usage: {usage_of(server, p)}"
        missing = [a for a in p.arguments if a.name not in values]
        if any(a.required for a in missing):
            asked = await self._ask(msg, server, p, missing)
            if isinstance(asked, str):
                return asked
            values.update(asked)
        try:
            got = await self.host.get_prompt(server, p.name, values)
        except PromptError as exc:
            return str(exc)
        log.info("mcp prompt used", extra={"server": server, "prompt": p.name,
                                           "arguments": sorted(values), "chars": len(got.text),
                                           "images": len(got.images)})
        return Run(got.text, got.images)

    def _find(self, words: list[str]) -> tuple[str, ListedPrompt, list[str]] | str:
        """(server, prompt, the words after its name), or what to reply instead."""
        prompts = self._prompts()
        if not prompts:
            return NONE
        if not words:
            return f"Usage: {USAGE}"
        servers = {s for s, _ in prompts} | set(self.host.names())
        if words[0] in servers:
            server, name, given = words[0], words[1] if len(words) > 1 else "", words[2:]
            if not name:
                return listing(prompts, server)
        else:  # `/prompt NAME …` when exactly one server has a prompt of that name
            owners = [s for s, p in prompts if p.name == words[0]]
            if len(owners) != 1:
                near = difflib.get_close_matches(words[0], sorted(servers), n=1)
                hint = f" Did you mean {near[0]}?" if near else ""
                what = ("Several servers have a prompt" if owners else
                        "There is no MCP server or prompt")
                return f"{what} named {clip(words[0], 80)!r}.{hint} Usage: {USAGE}"
            server, name, given = owners[0], words[0], words[1:]
        p = next((p for s, p in prompts if s == server and p.name == name), None)
        if p is None:
            names = [q.name for s, q in prompts if s == server]
            near = difflib.get_close_matches(name, names, n=1)
            hint = f" Did you mean {near[0]}?" if near else ""
            return (f"MCP server {server!r} has no prompt {clip(name, 80)!r}.{hint} "
                    f"/prompts {server} lists its prompts.")
        return server, p, given

    async def _ask(self, msg: Inbound, server: str, p: ListedPrompt,
                   missing: list[Any]) -> dict[str, str] | str:
        """The missing arguments from the user, one question each; or the reply to give when
        nobody can be asked (a scheduled turn, a channel without questions) or it ended."""
        elicitor = getattr(self.host, "elicitor", None)
        dialogs = elicitor.dialogs if elicitor is not None else {}
        dialog, why = elicit.who_answers(elicit.TURN.get(), dialogs)
        caller = elicit.TURN.get()
        if dialog is None or caller is None:
            needed = ", ".join(a.name for a in missing if a.required)
            log.info("mcp prompt arguments missing; nobody to ask",
                     extra={"server": server, "prompt": p.name, "why": why})
            return f"The prompt {p.name!r} needs {needed}: {usage_of(server, p)}"
        fields = [elicit.Field(key=a.name, kind="string", title=a.title or a.name,
                               description=a.description, required=a.required)
                  for a in missing]
        intro = (f"The prompt {p.name!r} of MCP server {server!r} needs {len(fields)} "
                 "more argument(s); /cancel cancels.")
        outcome = await elicit.ask_fields(dialog, caller, intro, fields, self.timeout)
        if outcome.action != "accept":
            return f"The prompt {p.name!r} was not run."
        return {k: str(v) for k, v in (outcome.content or {}).items()}
