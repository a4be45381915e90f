"""The one entry `gantry run` (and `gantry tools list`) calls: load the skills, register
`skill_read`, give the agent its prompt block and its commands.

Nothing happens without a `PERSONA_DIR/skills/` folder; with one, SIGHUP reloads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gantry.skills.catalog import FOLDER, Skills
from gantry.skills.commands import SkillCommands
from gantry.skills.tool import read_tool
from gantry.tools import Registry


def setup(persona_dir: str | Path, registry: Registry, router: Any = None, agent: Any = None
          ) -> Skills | None:
    """The loaded skills (None without a skills folder). `router` (gantry.mcp.routing)
    offers a loaded skill's tools; `agent` gets the prompt block and the commands."""
    directory = Path(persona_dir) / FOLDER
    if not directory.is_dir():
        return None
    skills = Skills(directory)
    skills.load()
    pin = router.found if router is not None else None
    registry.register(read_tool(skills, registry, pin))
    if agent is not None:
        agent.prompt_blocks.append(skills.block)
        agent.commands.append(SkillCommands(skills, registry, pin))
    return skills
