"""deploy/systemd/gantry.service read as data: its directives and its install steps.

The install steps are the commented shell lines in the unit's header, from the first
`install ` line to the one that runs `systemctl enable`; tests/systemd runs them verbatim in a
real systemd, and tests/test_deploy_files.py checks what they install against the directives.
"""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "gantry.service"


def directives(text: str | None = None) -> dict[str, list[str]]:
    """KEY -> every value it is given, in order (comments and section headers dropped)."""
    out: dict[str, list[str]] = {}
    for line in (UNIT.read_text() if text is None else text).splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def install_steps(text: str | None = None) -> list[str]:
    """The header's install commands, in order, without the comment marker."""
    steps: list[str] = []
    for line in (UNIT.read_text() if text is None else text).splitlines():
        if not line.startswith("#   "):
            if steps:
                break
            continue
        cmd = line[4:].strip()
        if not steps and not cmd.startswith("install "):
            continue
        steps.append(cmd)
        if "systemctl enable" in cmd:
            return steps
    raise ValueError(f"{UNIT}: no install steps ending in `systemctl enable` in the header")
