"""One skill: a SKILL.md's text checked against the agentskills specification (pure).

Errors (the skill is not loaded): no front matter, a bad `name` (1–64 of a-z 0-9 and `-`,
no leading, trailing or doubled `-`, equal to its folder's name), a missing or over-long
`description` (≤ 1024), `compatibility` over 500, `metadata` not a map of text. Fields the
specification does not define are ignored with a warning (other agents add their own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gantry.skills.frontmatter import FrontMatterError, Value, parse, split

NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
PRIVATE_KEY = "gantry-private"
"""`metadata: {gantry-private: "true"}`: not listed, read or started in group chats."""


class SkillError(ValueError):
    """A SKILL.md that cannot be loaded; `str()` says why, for `gantry check` and the log."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    license: str = ""
    compatibility: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()  # `allowed-tools`: offered while the skill is loaded
    warnings: tuple[str, ...] = ()

    @property
    def private(self) -> bool:
        return self.metadata.get(PRIVATE_KEY, "").strip().lower() in ("true", "yes", "1")

    @property
    def command(self) -> str:
        """The skill as a chat command: Telegram allows only `_` besides letters and digits."""
        return "/" + self.name.replace("-", "_")


def check_name(name: str, folder: str) -> None:
    if not name:
        raise SkillError("`name` is missing or empty")
    if len(name) > NAME_MAX:
        raise SkillError(f"`name` is {len(name)} characters; at most {NAME_MAX}")
    if not NAME_RE.fullmatch(name):
        raise SkillError(f"`name` {name!r} may hold only a-z, 0-9 and single `-` between "
                         "them (no leading, trailing or doubled `-`)")
    if name != folder:
        raise SkillError(f"`name` {name!r} differs from its folder's name {folder!r}")


def _text(fields: dict[str, Value], key: str, limit: int | None = None) -> str:
    value = fields.get(key, "")
    if not isinstance(value, str):
        raise SkillError(f"`{key}` must be text, not a {type(value).__name__}")
    value = value.strip()
    if limit is not None and len(value) > limit:
        raise SkillError(f"`{key}` is {len(value)} characters; at most {limit}")
    return value


def _tools(value: Value) -> tuple[str, ...]:
    """`allowed-tools`: the specification's space-separated text (a YAML list is taken too)."""
    if isinstance(value, dict):
        raise SkillError("`allowed-tools` must be space-separated tool names")
    words = value.split() if isinstance(value, str) else [w for v in value for w in v.split()]
    return tuple(dict.fromkeys(words))


def from_text(text: str, folder: str) -> Skill:
    """The skill in a SKILL.md's text, found in the folder named `folder`."""
    try:
        parts = split(text)
        if parts is None:
            raise SkillError("SKILL.md must start with a `---` line opening its front matter")
        lines, body = parts
        fields = parse(lines)
    except FrontMatterError as exc:
        raise SkillError(str(exc)) from None
    name = _text(fields, "name")
    check_name(name, folder)
    description = " ".join(_text(fields, "description", DESCRIPTION_MAX).split())
    if not description:
        raise SkillError("`description` is missing or empty")
    metadata = fields.get("metadata", {})
    if not isinstance(metadata, dict):
        raise SkillError("`metadata` must be a map of `key: value` lines")
    warnings = tuple(f"field {k!r} is not in the agentskills specification; ignored"
                     for k in fields if k not in FIELDS)
    return Skill(
        name=name,
        description=description,
        body=body.strip(),
        license=_text(fields, "license"),
        compatibility=_text(fields, "compatibility", COMPATIBILITY_MAX),
        metadata=metadata,
        tools=_tools(fields.get("allowed-tools", "")),
        warnings=warnings,
    )
