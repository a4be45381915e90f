"""`--env-file PATH`: the one dotenv reader and option every configuration-reading command shares.

It imports only os and sys: `gantry status --env-file` is a healthcheck and must stay lean.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs a healthcheck ~10 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HELP = "read KEY=VALUE lines from PATH; variables already in the environment win"
_KEY_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_KEY_REST = _KEY_START | frozenset("0123456789")


class EnvFileError(Exception):
    """The file cannot be read or has malformed lines; `problems` names each (file:line)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def add_option(parser: Any, help: str = HELP) -> None:
    """Give an argparse (sub)parser the shared `--env-file PATH` option."""
    parser.add_argument("--env-file", metavar="PATH", default=None, help=help)


def read(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse a dotenv-style file (KEY=VALUE, `#` comments, optional quotes, `export `)."""
    shown = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileError([f"--env-file {shown!r} cannot be read: {exc}"]) from None
    out: dict[str, str] = {}
    problems: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("export "):
            s = s[7:].lstrip()
        key, sep, value = s.partition("=")
        key = key.strip()
        if not sep or not is_name(key):
            problems.append(f"{shown}:{lineno}: expected KEY=VALUE")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    if problems:
        raise EnvFileError(problems)
    return out


def is_name(key: str) -> bool:
    """A shell variable name: [A-Za-z_][A-Za-z0-9_]*."""
    return bool(key) and key[0] in _KEY_START and all(c in _KEY_REST for c in key)


def merged(path: str | None) -> dict[str, str]:
    """The process environment over an optional env file: real env vars win."""
    base = read(path) if path else {}
    base.update(os.environ)
    return base


def environ(args: Any, command: str) -> Mapping[str, str] | None:
    """The environment a command reads, over its `--env-file`; None (reported) if unreadable."""
    if not getattr(args, "env_file", None):
        return os.environ
    try:
        return merged(args.env_file)
    except EnvFileError as exc:
        print(f"gantry {command}: {exc}", file=sys.stderr)
        return None


def data_dir(args: Any, env: Mapping[str, str]) -> str:
    """--data-dir, else DATA_DIR, else the default: the operator commands' one rule."""
    return args.data_dir or env.get("DATA_DIR", "").strip() or "/data"
