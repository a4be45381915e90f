"""`gantry skills list`: the skills listing exactly as the system prompt carries it, then
what is private, what is left out and what could not be loaded.

Lean: the configuration and the skills folder only (no model, no MCP, no database).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(env_file: str | None) -> int:
    from gantry import config
    from gantry import log as logsetup
    from gantry.session import est_tokens
    from gantry.skills.catalog import FOLDER, block, scan

    try:
        cfg = config.load(config.merged_environ(env_file), offline=True)
    except config.ConfigError as exc:
        print(logsetup.strip_url_credentials(str(exc)), file=sys.stderr)
        return 1
    directory = Path(cfg.persona_dir) / FOLDER
    catalog = scan(directory)
    text, left = block(catalog.visible(False))
    if text:
        print(text)
        print()
    listed = len(catalog.skills) - len(left)
    print(f"skills: {listed} listed from {directory} (~{est_tokens(len(text))} tokens in the "
          "system prompt, est.)" if catalog.skills else f"skills: none in {directory}")
    private = [s.name for s in catalog.skills if s.private]
    if private:
        print(f"private (not in group chats): {', '.join(private)}")
    if left:
        print(f"over the cap, not listed (still usable by name): {', '.join(left)}")
    for skill in catalog.skills:
        for note in skill.warnings:
            print(f"note: {skill.name}: {note}")
    sys.stdout.flush()
    for folder, why in catalog.errors:
        print(f"not loaded: {folder}: {why}", file=sys.stderr)
    return 0
