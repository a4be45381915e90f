"""The persona: markdown files from PERSONA_DIR, concatenated in a fixed, documented order.

Order: the well-known files first (PERSONA.md, IDENTITY.md, SOUL.md, USER.md, TOOLS.md),
then every other `*.md` alphabetically. Hidden files are skipped (Kubernetes ConfigMap
mounts keep their real files under `..data`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import msgspec

WELL_KNOWN = ("PERSONA.md", "IDENTITY.md", "SOUL.md", "USER.md", "TOOLS.md")
MAX_TOTAL_CHARS = 64_000
# <!-- ... --> in a persona file is a note for the operator (gantry init's templates carry
# guidance that way); it is not sent to the model.
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)

log = logging.getLogger("gantry.persona")


class PersonaError(Exception):
    """A persona file that cannot be used; `str()` names the file."""


class Persona(msgspec.Struct, frozen=True):
    text: str
    files: tuple[str, ...]
    truncated: bool = False


def order(names: list[str]) -> list[str]:
    """Well-known names first in their fixed order, then the rest alphabetically."""
    known = [n for n in WELL_KNOWN if n in names]
    rest = sorted(n for n in names if n not in WELL_KNOWN)
    return known + rest


def md_files(d: Path) -> list[str]:
    """The persona files' names in `d` (visible *.md files), unordered."""
    return [p.name for p in d.glob("*.md") if not p.name.startswith(".") and p.is_file()]


def load(persona_dir: str | Path, max_chars: int = MAX_TOTAL_CHARS) -> Persona:
    """Read and concatenate the persona; raise PersonaError on non-UTF-8 or unreadable files."""
    d = Path(persona_dir)
    if not d.is_dir():
        log.warning("persona directory missing; running without a persona", extra={"dir": str(d)})
        return Persona("", ())
    names = md_files(d)
    if not names:
        log.warning("persona directory has no *.md files", extra={"dir": str(d)})
        return Persona("", ())
    parts: list[str] = []
    used: list[str] = []
    total = 0
    truncated = False
    for name in order(names):
        path = d / name
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PersonaError(
                f"persona file {path} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8"
            ) from None
        except OSError as exc:
            raise PersonaError(f"persona file {path} cannot be read: {exc.strerror}") from None
        text = _COMMENT.sub("", text.lstrip("\ufeff")).strip()
        if not text:
            continue
        room = max_chars - total
        if room <= 0:
            truncated = True
            break
        if len(text) > room:
            text = text[:room]
            truncated = True
        parts.append(text)
        used.append(name)
        total += len(text)
        if truncated:
            break
    if truncated:
        log.warning(
            "persona exceeds the size cap; the rest is left out",
            extra={"cap_chars": max_chars, "files_used": used},
        )
    return Persona("\n\n".join(parts), tuple(used), truncated)
