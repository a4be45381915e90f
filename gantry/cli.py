"""Command line: `gantry run | status | version | init | check | tools | skills | cron |
watch | usage | memory | mcp | mcp-memory | backup | restore`.

Each command imports only what it needs: `status` is the container healthcheck and runs
every few seconds, so it must not pay for aiogram, mcp or httpx.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs a healthcheck ~10 ms
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def seconds(text: str) -> float:
    """A finite number of seconds: `nan` or `inf` would make every heartbeat look fresh (or
    none), so they are refused like any other bad value."""
    value = float(text)
    if not abs(value) < float("inf"):  # also false for nan
        raise ValueError(f"not a finite number: {text!r}")
    return value

# Options of the commands that must start fast, with their value type (None = a flag). Kept in
# step with _parser() by tests/test_cli.py, which checks both parse every argv alike.
LEAN_OPTIONS: dict[str, dict[str, Callable[[str], Any] | None]] = {
    "status": {"--max-age": seconds, "--data-dir": str, "--env-file": str},
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

    from gantry.envfile import add_option as env_file

    p = argparse.ArgumentParser(
        prog="gantry",
        description="One persona, one model, MCP tools, one SQLite file.",
        epilog="Configuration is environment variables; see docs/configuration.md.",
    )
    sub = p.add_subparsers(
        dest="command",
        metavar="{run,status,version,init,check,tools,skills,cron,watch,usage,memory,mcp,"
                "mcp-memory,"
                "backup,restore}")
    run = sub.add_parser("run", help="run the agent daemon (the default command)")
    env_file(run)
    st = sub.add_parser(
        "status",
        help="healthcheck: exit 0 if the daemon's heartbeat is fresh",
        description="Read the heartbeat row (read-only) from $DATA_DIR/gantry.db. "
        "Exit 0 if it is fresher than --max-age seconds, else 1.",
    )
    st.add_argument("--max-age", type=seconds, default=None, metavar="SECONDS",
                    help="maximum heartbeat age in seconds (default 60)")
    st.add_argument("--data-dir", default=None, metavar="DIR",
                    help="override DATA_DIR (default: $DATA_DIR or /data)")
    env_file(st, "read DATA_DIR from PATH's KEY=VALUE lines (the environment wins)")
    tools = sub.add_parser("tools", help="the tools the model is offered: list them, or rank the "
                           "MCP catalog for a query")
    tools_sub = tools.add_subparsers(dest="action", metavar="{list,search}", required=True)
    tl = tools_sub.add_parser(
        "list", help="list the tools the model is offered (built-in and the MCP manifest's "
        "servers', which are started and stopped)")
    ts = tools_sub.add_parser(
        "search", help="which tools a message would be offered, ranked, one name per line")
    ts.add_argument("query", nargs="?", default="", help="the message to rank the tools for")
    ts.add_argument("--catalog", metavar="FILE",
                    help="a JSON list of OpenAI-style function definitions to rank instead of "
                    "starting the manifest's servers")
    ts.add_argument("--top", type=int, default=10, metavar="K", help="how many (default 10)")
    ts.add_argument("--queries", metavar="FILE",
                    help="one query per line: print one JSON array of ranked names per line")
    skills = sub.add_parser("skills", help="the persona's skills (PERSONA_DIR/skills)")
    skills_sub = skills.add_subparsers(dest="action", metavar="{list}", required=True)
    sl = skills_sub.add_parser(
        "list", help="print the skills listing the system prompt carries, and any skill that "
        "could not be loaded")
    for p_ in (tl, ts, sl):
        env_file(p_)
    ver = sub.add_parser("version", help="print build information")
    ver.add_argument("--json", action="store_true", help="print the same as one JSON object")
    ver.add_argument(
        "--import-times",
        metavar="MODULES",
        help="diagnostic: import these comma-separated modules (e.g. aiogram,mcp) in order and "
        "report each one's import time in ms; measures the frozen binary's start-up costs",
    )
    cron = sub.add_parser("cron", help="scheduled jobs (read-only operator view)")
    cron_sub = cron.add_subparsers(dest="cron_command", metavar="{list}", required=True)
    cl = cron_sub.add_parser("list", help="print scheduled jobs and their next fire time")
    cl.add_argument("--data-dir", default=None, metavar="DIR",
                    help="override DATA_DIR (default: $DATA_DIR or /data)")
    cl.add_argument("--all", action="store_true", help="include cancelled and finished jobs")
    env_file(cl)
    watch = sub.add_parser("watch", help="watches (read-only operator view)")
    watch_sub = watch.add_subparsers(dest="watch_command", metavar="{list}", required=True)
    wl = watch_sub.add_parser("list", help="print watches, their state and last wakes")
    wl.add_argument("--data-dir", default=None, metavar="DIR",
                    help="override DATA_DIR (default: $DATA_DIR or /data)")
    wl.add_argument("--all", action="store_true", help="include cancelled watches")
    env_file(wl)
    from gantry.usage import add_parser as usage_parser

    usage_parser(sub)
    init = sub.add_parser(
        "init",
        help="write sample persona files, mcp.toml and an env file (never overwrites)",
        description="Write a starting point: PERSONA.md, USER.md, TOOLS.md, a commented "
        "mcp.toml and an env file listing every variable, with PERSONA_DIR and MCP_MANIFEST "
        "set to the absolute paths written. Existing files are kept.",
    )
    init.add_argument("--persona-dir", metavar="DIR",
                      help="where the persona files go (default: $PERSONA_DIR; /persona "
                      "only with --default-paths)")
    init.add_argument("--manifest", metavar="PATH",
                      help="the MCP manifest (default: $MCP_MANIFEST; /etc/gantry/mcp.toml "
                      "only with --default-paths)")
    init.add_argument("--default-paths", action="store_true",
                      help="allow writing to /persona and /etc/gantry/mcp.toml when neither an "
                      "option nor the environment names another path")
    init.add_argument("--data-dir", metavar="DIR",
                      help="the DATA_DIR to record (default: $DATA_DIR; ./.gantry-data when "
                      "the persona and manifest are inside the working directory; else /data)")
    init.add_argument("--env-file", metavar="PATH", default=".env",
                      help="the env file to write (default: ./.env)")
    chk = sub.add_parser(
        "check",
        help="validate the configuration and probe the model, Telegram and MCP servers",
        description="Run every validation `gantry run` does, then probe for real, one line "
        "per check. Exit 0 only if every check passes. Sends no message and creates or "
        "writes no file (DATA_DIR and the database are only checked, read-only).",
    )
    env_file(chk)
    chk.add_argument("--json", action="store_true", help="print one JSON object instead")
    mcp = sub.add_parser("mcp", help="remote MCP servers: log in with OAuth")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", metavar="{login}", required=True)
    ml = mcp_sub.add_parser(
        "login", help="log in to an `auth = \"oauth\"` server of the manifest",
        description="Print the server's authorization address, read back the address the "
        "browser was sent to (or the code), and store the tokens in $DATA_DIR/gantry.db. "
        "Needs a terminal: `docker compose run --rm gantry mcp login NAME`.")
    ml.add_argument("name", help="the server's name in the manifest")
    ml.add_argument("--new-client", action="store_true",
                    help="register gantry with the authorization server again instead of "
                    "reusing the stored registration (when its page says the client is unknown)")
    env_file(ml)
    from gantry.memory.cli import add_parsers as memory_parsers

    memory_parsers(sub)
    from gantry.store.cli import add_parsers as store_parsers

    store_parsers(sub)
    return p


def _listing(args: Any, command: str, lister: Callable[[str, bool], tuple[bool, str]]) -> int:
    """`gantry cron|watch list`: a read-only report from the database in DATA_DIR."""
    from gantry.envfile import data_dir, environ

    env = environ(args, command)
    if env is None:
        return EXIT_FAIL
    ok, text = lister(os.path.join(data_dir(args, env), "gantry.db"), args.all)
    print(text, file=sys.stdout if ok else sys.stderr)
    return EXIT_OK if ok else EXIT_FAIL


def _cron(args: Any) -> int:
    from gantry.cron.report import list_jobs

    return _listing(args, "cron", list_jobs)


def _watch(args: Any) -> int:
    from gantry.watch.report import list_watches

    return _listing(args, "watch", list_watches)


def _init(args: Any) -> int:
    """Refuse to write the built-in default paths (/persona, /etc/gantry) unless asked to."""
    from gantry.scaffold import main as init_main

    persona = args.persona_dir or os.environ.get("PERSONA_DIR", "").strip()
    manifest = args.manifest or os.environ.get("MCP_MANIFEST", "").strip()
    defaulted = [what for what, chosen in (("/persona/*.md", persona),
                                           ("/etc/gantry/mcp.toml", manifest)) if not chosen]
    if defaulted and not args.default_paths:
        print(f"gantry init: would write {' and '.join(defaulted)} (the default paths, where "
              "a container mounts them); pass --persona-dir DIR and --manifest PATH (e.g. "
              "./persona ./mcp.toml), or --default-paths to write there", file=sys.stderr)
        return EXIT_USAGE
    from gantry.scaffold import data_dir_for

    persona, manifest = persona or "/persona", manifest or "/etc/gantry/mcp.toml"
    data = args.data_dir or os.environ.get("DATA_DIR", "").strip() or data_dir_for(persona,
                                                                                   manifest)
    return init_main(persona, manifest, args.env_file, data)


def _status(args: Any) -> int:
    from gantry.envfile import data_dir, environ
    from gantry.heartbeat import DEFAULT_MAX_AGE, check

    env = environ(args, "status")
    if env is None:
        return EXIT_FAIL
    max_age = DEFAULT_MAX_AGE if args.max_age is None else args.max_age
    if max_age <= 0:
        print("gantry status: --max-age must be positive", file=sys.stderr)
        return EXIT_USAGE
    ok, line = check(os.path.join(data_dir(args, env), "gantry.db"), max_age)
    print(line)
    return EXIT_OK if ok else EXIT_FAIL


def _version(args: Any) -> int:
    from gantry.buildinfo import info

    data: dict[str, object] = dict(info())
    if args.import_times:
        data["import_ms"] = _import_times(args.import_times.split(","))
    if args.json:
        import json

        from gantry.buildinfo import distributions

        data["distributions"] = distributions()
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


def entry() -> None:
    """The executable's entry point (`gantry`, `python -m gantry`, the frozen binary).

    `status` and `version` leave through os._exit once their output is flushed: tearing the
    interpreter down (module dicts, the collector) is a fifth of a healthcheck's run time, and
    there is nothing to tear down (the database is closed, no thread runs, no file is open for
    writing). If stdout is gone, the exit code still tells the health.
    """
    argv = sys.argv[1:]
    code = main(argv)
    if argv and argv[0] in LEAN_OPTIONS:
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105  (contextlib costs the healthcheck ~2 ms of imports)
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_pdf-text"]:  # hidden: gantry's own PDF reader (gantry.media.pdf)
        from gantry.media.pdf import child_main

        return child_main(argv[1:])
    quick = quick_parse(argv)
    args: Any = _Args(quick) if quick is not None else _parser().parse_args(argv)
    command = args.command or "run"
    if command == "status":
        return _status(args)
    if command == "version":
        return _version(args)
    if command == "tools":
        if args.action == "search":
            from gantry.mcp.listing import search as tools_search

            return tools_search(args.env_file, args.query, args.catalog, args.top, args.queries)
        from gantry.toolset import main as tools_main

        return tools_main(args.env_file)
    if command == "skills":
        from gantry.skills.cli import main as skills_main

        return skills_main(args.env_file)
    if command == "cron":
        return _cron(args)
    if command == "watch":
        return _watch(args)
    if command == "usage":
        from gantry.usage import main as usage_main

        return usage_main(args)
    if command == "init":
        return _init(args)
    if command == "check":
        from gantry.check import main as check_main

        return check_main(args.env_file, args.json)
    if command == "mcp":
        from gantry.mcp.login import main as login_main

        return login_main(args)
    if command in ("backup", "restore"):
        from gantry.store.cli import main as store_main

        return store_main(args)
    if command in ("mcp-memory", "memory"):
        from gantry.memory.cli import main as memory_main

        return memory_main(args)
    from gantry.runtime import main as run_main

    return run_main(getattr(args, "env_file", None))
