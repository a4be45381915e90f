"""A persona holding three skills, for the skills tests (unit, e2e, binary): one broken, one
with a reference file (and a binary file and a symlink pointing out of its folder), one
naming a tool that tool routing would leave out.
"""

from __future__ import annotations

from pathlib import Path

EXPENSE_BODY = "EXPENSE-STEPS: ask for the amount, the date and the receipt; then file it."
POLICY = "POLICY-TEXT: meals up to 40 EUR a day."
CLOCK_BODY = "CLOCK-STEPS: call clock__now for the city's zone, then answer with the time."
SECRET = "SECRET-OUTSIDE-THE-SKILL"
CLOCK_TOOL = "clock__now"

EXPENSE = f"""---
name: expense-report
description: >
  File an expense report: collect the amount, date and receipt,
  then submit it.
license: MIT
metadata:
  author: gantry tests
  gantry-private: "true"
---
# Expense report

{EXPENSE_BODY}

The policy is in references/policy.md.
"""

CLOCK = f"""---
name: world-clock
description: "Tell the time in any city of the world."
compatibility: needs the clock MCP server
allowed-tools: {CLOCK_TOOL} Bash(date:*)
---
{CLOCK_BODY}
"""

BROKEN = """---
name: broken-one
---
This skill has no description, so it cannot be listed.
"""


def write(persona_dir: Path, outside: Path | None = None) -> Path:
    """The persona (PERSONA.md + skills/) under `persona_dir`; `outside` (default: beside
    it) holds the file the symlink points at. Returns the skills folder."""
    persona_dir.mkdir(parents=True, exist_ok=True)
    (persona_dir / "PERSONA.md").write_text("You are Tim.\n", encoding="utf-8")
    skills = persona_dir / "skills"
    expense = skills / "expense-report"
    (expense / "references").mkdir(parents=True, exist_ok=True)
    (expense / "SKILL.md").write_text(EXPENSE, encoding="utf-8")
    (expense / "references" / "policy.md").write_text(POLICY + "\n", encoding="utf-8")
    (expense / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    secret = (outside or persona_dir.parent) / "secret.txt"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    (expense / "escape.md").symlink_to(secret)
    (skills / "world-clock").mkdir(parents=True, exist_ok=True)
    (skills / "world-clock" / "SKILL.md").write_text(CLOCK, encoding="utf-8")
    (skills / "broken-one").mkdir(parents=True, exist_ok=True)
    (skills / "broken-one" / "SKILL.md").write_text(BROKEN, encoding="utf-8")
    return skills
