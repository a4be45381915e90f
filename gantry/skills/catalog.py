"""The persona's skills: `PERSONA_DIR/skills/<name>/SKILL.md` read at boot and on SIGHUP,
and the block the system prompt carries (names and descriptions only).

A broken skill is reported and left out; the others load. The block is built once per load
and kept, so every turn sends the same bytes (providers cache prompt prefixes).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from gantry.skills.skill import Skill, SkillError, from_text

log = logging.getLogger("gantry.skills")

FOLDER = "skills"  # in PERSONA_DIR
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024  # one SKILL.md; the specification suggests under 500 lines
MAX_FOLDERS = 256  # folders looked at in skills/
MAX_LISTED = 64  # skills the system prompt lists
BLOCK_MAX_CHARS = 16_000  # the listing's size in the system prompt (~4000 tokens, est.)
HEADER = (
    "Skills: instructions for particular tasks, kept out of this prompt until needed. When "
    "one fits the user's request, call skill_read with its name first and follow what it "
    "says; a skill's files are read with skill_read too."
)


@dataclass(frozen=True)
class Catalog:
    """One load of the skills folder: the skills, by name, and what could not be loaded."""

    skills: tuple[Skill, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (folder, why)
    directory: Path = Path()

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def visible(self, shared: bool) -> list[Skill]:
        """The skills a turn may use: all, less the private ones when others read along."""
        return [s for s in self.skills if not (shared and s.private)]


def read_skill(folder: Path) -> Skill:
    """The skill in `folder`; SkillError (with the file named) when it cannot be used."""
    path = folder / SKILL_FILE
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SKILL_BYTES + 1)
    except FileNotFoundError:
        raise SkillError(f"{path}: no {SKILL_FILE} in the folder") from None
    except OSError as exc:
        raise SkillError(f"{path}: cannot be read: {exc.strerror}") from None
    if len(data) > MAX_SKILL_BYTES:
        raise SkillError(f"{path}: larger than {MAX_SKILL_BYTES // 1024} KiB; move detail "
                         "into bundled files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    try:
        return from_text(text.replace("\r\n", "\n"), folder.name)
    except SkillError as exc:
        raise SkillError(f"{path}: {exc}") from None


def scan(directory: str | Path) -> Catalog:
    """Every skill folder in `directory`, in name order; hidden folders (a ConfigMap's
    `..data`) and plain files are passed over."""
    d = Path(directory)
    try:
        names = sorted(e.name for e in os.scandir(d) if not e.name.startswith(".")
                       and e.is_dir())
    except FileNotFoundError:
        return Catalog(directory=d)
    except OSError as exc:
        return Catalog(errors=((str(d), f"cannot be listed: {exc.strerror}"),), directory=d)
    skills: list[Skill] = []
    errors: list[tuple[str, str]] = []
    if len(names) > MAX_FOLDERS:
        errors.append((str(d), f"{len(names)} folders; only the first {MAX_FOLDERS} are read"))
    for name in names[:MAX_FOLDERS]:
        try:
            skills.append(read_skill(d / name))
        except SkillError as exc:
            errors.append((name, str(exc)))
    return Catalog(tuple(skills), tuple(errors), d)


def entry(skill: Skill) -> str:
    return f"- {skill.name}: {skill.description}"


def block(skills: list[Skill], max_listed: int = MAX_LISTED,
          max_chars: int = BLOCK_MAX_CHARS) -> tuple[str, list[str]]:
    """The system prompt's skills listing (pure) and the names left out by the caps."""
    if not skills:
        return "", []
    lines = [HEADER]
    size = len(HEADER)
    left: list[str] = []
    for skill in skills:
        line = entry(skill)
        if len(lines) > max_listed or size + 1 + len(line) > max_chars:
            left.append(skill.name)
            continue
        lines.append(line)
        size += 1 + len(line)
    return ("\n".join(lines) if len(lines) > 1 else ""), left


@dataclass
class Skills:
    """The current catalog and its two prompt blocks (private chat, group chat); replaced
    wholesale by `load`, which never raises."""

    directory: Path
    catalog: Catalog = field(default_factory=Catalog)
    _blocks: dict[bool, str] = field(default_factory=dict)

    def load(self) -> Catalog:
        catalog = scan(self.directory)
        for folder, why in catalog.errors:
            log.warning("skill not loaded", extra={"skill": folder, "error": why})
        for skill in catalog.skills:
            for note in skill.warnings:
                log.warning("skill field ignored", extra={"skill": skill.name, "note": note})
        blocks: dict[bool, str] = {}
        for shared in (False, True):
            blocks[shared], left = block(catalog.visible(shared))
            if left and not shared:
                log.warning("skills left out of the system prompt (over the cap)",
                            extra={"left_out": left, "max_skills": MAX_LISTED,
                                   "max_chars": BLOCK_MAX_CHARS})
        self.catalog, self._blocks = catalog, blocks
        log.info("skills loaded", extra={"skills": [s.name for s in catalog.skills],
                                         "broken": len(catalog.errors)})
        return catalog

    def block(self, shared: bool = False) -> str:
        """What the system prompt carries for a turn (`shared`: a group chat's)."""
        return self._blocks.get(shared, "")

    def get(self, name: str, shared: bool = False) -> Skill | None:
        skill = self.catalog.get(name)
        return None if skill is None or (shared and skill.private) else skill
