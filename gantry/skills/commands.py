"""The user's side of skills: `/skills` lists them; `/<skill> …` (or `/skill NAME …`) runs
a turn with that skill's instructions placed in it and its tools on offer.

`/plan_week` and `/plan-week` both start `plan-week`: Telegram's commands allow `_` only.
A skill named like one of gantry's own commands is reached with `/skill NAME`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gantry.channel.base import Inbound
from gantry.clip import clip
from gantry.commands import Handled, first_word
from gantry.skills.catalog import Skills
from gantry.skills.skill import Skill
from gantry.skills.tool import Pin, loaded_text, pin_tools
from gantry.tools import Registry

HELP = (
    "/skills — the persona's skills",
    "/<skill> … — start a turn with that skill (also /skill NAME …)",
)
LISTED_CHARS = 100  # of each description in /skills


def turn_text(skill: Skill, loaded: str, request: str) -> str:
    """The user message a skill command becomes: the instructions, then what was typed."""
    said = request.strip() or "(nothing more; start with what the skill says)"
    return (f"[gantry: the user started this turn with the skill {skill.name}; its "
            f"instructions follow, then their message]\n{loaded}\n\n[the user's message]\n"
            f"{said}")


def listing(skills: Skills, shared: bool) -> str:
    """The /skills reply: one line per skill a turn here may use, then any not loaded."""
    shown = skills.catalog.visible(shared)
    lines = [f"Skills ({len(shown)}):" if shown else "No skills."]
    lines += [f"{s.command} — {clip(s.description, LISTED_CHARS)}" for s in shown]
    broken = len(skills.catalog.errors)
    if broken and not shared:
        lines.append(f"({broken} could not be loaded: `gantry check` says why)")
    return "\n".join(lines)


class SkillCommands:
    help: Sequence[str] = HELP

    def __init__(self, skills: Skills, registry: Registry, pin: Pin | None) -> None:
        self.skills, self.registry, self.pin = skills, registry, pin

    async def handle(self, msg: Inbound) -> Handled | None:
        command, rest = first_word(msg.text)
        if command == "/skills":
            return Handled(reply=listing(self.skills, msg.group))
        if command == "/skill":
            name, _, rest = rest.strip().partition(" ")
            if not name:
                return Handled(reply="Usage: /skill NAME [message]. /skills lists them.")
            skill = self._find(name, msg.group)
            if skill is None:
                return Handled(reply=f"No skill {name!r} here. /skills lists them.")
        elif not command or (skill := self._find(command[1:], msg.group)) is None:
            return None
        pin_tools(skill, self.registry, self.pin, msg.session_id)
        loaded = loaded_text(skill, self.skills.directory / skill.name)
        return Handled(text=turn_text(skill, loaded, rest))

    def _find(self, word: str, shared: bool) -> Skill | None:
        return self.skills.get(word.lower().replace("_", "-"), shared=shared)
