"""`gantry run`: build the parts from config and run them in one anyio task group."""

from __future__ import annotations

import sys


def main(env_file: str | None) -> int:
    from gantry import config

    try:
        cfg = config.load(config.merged_environ(env_file))
    except config.ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("gantry run: not wired yet", cfg.channel, file=sys.stderr)
    return 1
