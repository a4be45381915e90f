"""`skill_read {name, file?}`: a skill's instructions, or one of its bundled text files.

Bounded: a file is read up to FILE_MAX_BYTES. Confined: the path is resolved (symlinks
included) and must stay inside the skill's own folder; binary files are refused. Loading a
skill puts the tools its `allowed-tools` names on offer for the rest of the turn, even when
tool routing would have left them out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gantry import elicit
from gantry.skills.catalog import SKILL_FILE, Skills
from gantry.skills.skill import Skill
from gantry.tools import CALLER, Registry, Tool, ToolError

TOOL_NAME = "skill_read"
FILE_MAX_BYTES = 64 * 1024
LIST_MAX = 50  # bundled files named after a skill's body
WALK_MAX = 500  # entries looked at when listing them

Pin = Callable[[str, list[str]], None]  # (session, tool names): gantry.mcp.routing.Router.found

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "the skill's name, as listed"},
        "file": {"type": "string", "description": "a file of the skill, relative to its "
                 "folder (e.g. references/guide.md); leave out to read the instructions"},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def matches(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The tool names `allowed-tools` means: exact names, or `server__*` prefixes (as
    TOOLS_ALWAYS); entries naming no registered tool (another agent's `Bash(git:*)`) match
    nothing."""
    pats = list(patterns)
    return [n for n in names
            if any(n.startswith(p[:-1]) if p.endswith("*") else n == p for p in pats)]


def confined(folder: Path, relative: str) -> Path:
    """`relative` inside `folder`, resolved; ToolError when it would leave the folder (an
    absolute path, `..`, or a symlink pointing elsewhere) or is not a regular file."""
    if not relative or "\x00" in relative:
        raise ToolError("give a file path relative to the skill's folder")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolError(f"{relative!r} is absolute; give a path inside the skill's folder")
    if ".." in Path(relative).parts:
        raise ToolError(f"{relative!r} leaves the skill's folder; `..` is not allowed")
    root = folder.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"{relative!r} points outside the skill's folder (a symlink); refused")
    if not target.is_file():
        raise ToolError(f"the skill has no file {relative!r}")
    return target


def read_text(path: Path, limit: int = FILE_MAX_BYTES) -> str:
    """A text file's first `limit` bytes; ToolError for a binary one (NUL bytes or not
    UTF-8), so no bytes reach the model as text."""
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ToolError(f"the file cannot be read: {exc.strerror}") from None
    cut = len(data) > limit
    data = data[:limit]
    if b"\x00" in data:
        raise ToolError(f"{path.name} is a binary file; skill_read reads text files only")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not cut or exc.start < len(data) - 3:  # not just a character cut at the limit
            raise ToolError(f"{path.name} is not UTF-8 text; skill_read reads text files "
                            "only") from None
        text = data[: exc.start].decode("utf-8")
    if cut:
        text += f"\n[skill_read: the file is longer than {limit // 1024} KiB; the rest is cut]"
    return text


def bundled(folder: Path) -> list[str]:
    """The skill's other files, relative to its folder, sorted (bounded walk, hidden
    entries skipped, symlinks not followed)."""
    found: list[str] = []
    seen = 0
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            seen += 1
            if not name.startswith(".") and not (top == str(folder) and name == SKILL_FILE):
                found.append(os.path.relpath(os.path.join(top, name), folder))
        if seen > WALK_MAX:
            break
    return sorted(found)


def loaded_text(skill: Skill, folder: Path) -> str:
    """What loading a skill puts before the model: its instructions, then its files."""
    files = bundled(folder)
    text = f"[skill {skill.name}]\n{skill.body}"
    if files:
        shown = ", ".join(files[:LIST_MAX]) + (" …" if len(files) > LIST_MAX else "")
        text += f"\n\n[files of skill {skill.name}, for skill_read: {shown}]"
    return text


def pin_tools(skill: Skill, registry: Registry, pin: Pin | None, session: str) -> list[str]:
    """Offer the skill's tools for the rest of this turn; the names pinned."""
    names = matches(skill.tools, registry.names()) if skill.tools else []
    if names and pin is not None and session:
        pin(session, names)
    return names


def shared_turn() -> bool:
    """Whether the running turn's reply is read by others (a group chat)."""
    caller = elicit.TURN.get()
    return caller is not None and caller.group


def read_tool(skills: Skills, registry: Registry, pin: Pin | None) -> Tool:
    async def call(args: dict[str, Any]) -> str:
        name, file = args.get("name"), args.get("file")
        if not isinstance(name, str) or not name.strip():
            raise ToolError("give the skill's `name`")
        if file is not None and not isinstance(file, str):
            raise ToolError("`file` must be a path, as text")
        skill = skills.get(name.strip(), shared=shared_turn())
        if skill is None:
            known = ", ".join(s.name for s in skills.catalog.visible(shared_turn())) or "none"
            raise ToolError(f"no skill {name!r}; skills: {known}")
        folder = skills.directory / skill.name
        if file and file.strip() not in (SKILL_FILE, f"./{SKILL_FILE}"):
            return read_text(confined(folder, file.strip()))
        pin_tools(skill, registry, pin, CALLER.get())
        return loaded_text(skill, folder)

    return Tool(TOOL_NAME, "Read one of the skills listed in the system prompt: its "
                "instructions (name only), or one of its files (name and file).",
                PARAMETERS, call)
