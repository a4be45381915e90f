"""Command line: `gantry run | status | version | mcp-memory | memory`.

Each command imports only what it needs: `status` is the container healthcheck and runs
every few seconds, so it must not pay for aiogram, mcp or httpx.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs a healthcheck ~10 ms
if TYPE_CHECKING:
    import argparse
    from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# Options of the commands that must start fast, with their value type (None = a flag). Kept in
# step with _parser() by tests/test_cli.py, which checks both parse every argv alike.
LEAN_OPTIONS: dict[str, dict[str, type | None]] = {
    "status": {"--max-age": float, "--data-dir": str},
    "version": {"--json": None, "--import-times": str},
}


def quick_parse(argv: list[str]) -> dict[str, Any] | None:
    """Parse a plain `status`/`version` argv without argparse, or return None to let it decide.

    argparse and what it pulls in at parse time (re, gettext, locale, shutil → bz2/lzma) are
    about a third of a healthcheck's run time. Anything unusual — help, an abbreviation, a
    missing or bad value, an unknown option — goes to argparse for its messages and exit codes.
    """
    if not argv or argv[0] not in LEAN_OPTIONS:
        return None
    spec = LEAN_OPTIONS[argv[0]]
    out: dict[str, Any] = {"command": argv[0]}
    for option, kind in spec.items():
        out[_dest(option)] = False if kind is None else None
    rest = iter(argv[1:])
    for token in rest:
        option, eq, value = token.partition("=")
        if option not in spec:
            return None
        kind = spec[option]
        if kind is None:
            if eq:
                return None
            out[_dest(option)] = True
            continue
        if not eq:
            nxt = next(rest, None)
            if nxt is None or nxt.startswith("-"):
                return None
            value = nxt
        try:
            out[_dest(option)] = kind(value)
        except ValueError:
            return None
    return out


def _dest(option: str) -> str:
    """argparse's attribute name for a long option: --max-age → max_age."""
    return option[2:].replace("-", "_")


class _Args:
    """The fast path's namespace: attribute access like argparse.Namespace, no import."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="gantry",
        description="One persona, one model, MCP tools, one SQLite file.",
        epilog="Configuration is environment variables; see docs/configuration.md.",
    )
    sub = p.add_subparsers(dest="command", metavar="{run,status,version,mcp-memory,memory}")
    run = sub.add_parser("run", help="run the agent daemon (the default command)")
    run.add_argument(
        "--env-file",
        metavar="PATH",
        help="read KEY=VALUE lines from PATH; variables already in the environment win",
    )
    st = sub.add_parser(
        "status",
        help="healthcheck: exit 0 if the daemon's heartbeat is fresh",
        description="Read the heartbeat row (read-only) from $DATA_DIR/gantry.db. "
        "Exit 0 if it is fresher than --max-age seconds, else 1.",
    )
    st.add_argument("--max-age", type=float, default=None, metavar="SECONDS",
                    help="maximum heartbeat age in seconds (default 60)")
    st.add_argument("--data-dir", default=None, metavar="DIR",
                    help="override DATA_DIR (default: $DATA_DIR or /data)")
    ver = sub.add_parser("version", help="print build information")
    ver.add_argument("--json", action="store_true", help="print the same as one JSON object")
    ver.add_argument(
        "--import-times",
        metavar="MODULES",
        help="diagnostic: import these comma-separated modules (e.g. aiogram,mcp) in order and "
        "report each one's import time in ms; measures the frozen binary's start-up costs",
    )
    from gantry.memory.cli import add_parsers as memory_parsers

    memory_parsers(sub)
    return p


def _status(args: Any) -> int:
    from gantry.heartbeat import DEFAULT_MAX_AGE, check

    data_dir = args.data_dir or os.environ.get("DATA_DIR", "").strip() or "/data"
    max_age = DEFAULT_MAX_AGE if args.max_age is None else args.max_age
    if max_age <= 0:
        print("gantry status: --max-age must be positive", file=sys.stderr)
        return EXIT_USAGE
    ok, line = check(os.path.join(data_dir, "gantry.db"), max_age)
    print(line)
    return EXIT_OK if ok else EXIT_FAIL


def _version(args: Any) -> int:
    from gantry.buildinfo import info

    data: dict[str, object] = dict(info())
    if args.import_times:
        data["import_ms"] = _import_times(args.import_times.split(","))
    if args.json:
        import json

        print(json.dumps(data))
    else:
        print(f"gantry {data['version']}")
        for key in ("commit", "build_date", "python", "sqlite", "apsw", "platform", "frozen"):
            print(f"  {key:<11} {data[key]}")
        for mod, ms in dict(data.get("import_ms") or {}).items():  # type: ignore[call-overload]
            print(f"  import {mod:<10} {ms} ms")
    return EXIT_OK


def _import_times(modules: list[str]) -> dict[str, float | str]:
    """Wall time of importing each module after the previous ones (diagnostics only)."""
    import importlib
    import time

    out: dict[str, float | str] = {}
    for name in (m.strip() for m in modules):
        if not name:
            continue
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except ImportError as exc:
            out[name] = f"not importable: {exc}"
            continue
        out[name] = round((time.perf_counter() - start) * 1000, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    quick = quick_parse(argv)
    args: Any = _Args(quick) if quick is not None else _parser().parse_args(argv)
    command = args.command or "run"
    if command == "status":
        return _status(args)
    if command == "version":
        return _version(args)
    if command in ("mcp-memory", "memory"):
        from gantry.memory.cli import main as memory_main

        return memory_main(args)
    from gantry.runtime import main as run_main

    return run_main(getattr(args, "env_file", None))
