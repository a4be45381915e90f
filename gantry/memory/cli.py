"""`gantry mcp-memory` and `gantry memory …`: serve, inspect and move memory without sqlite3.

Distroless has no sqlite3, so the binary itself adds, lists, searches, deletes and shows
flagged contradictions. Imports stay inside the commands: building the parser must stay cheap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from gantry.envfile import add_option as env_file_option

COMMANDS = ("mcp-memory", "memory")
KINDS = ("fact", "preference", "person", "episode", "insight")  # store.KINDS, without apsw


def _env(environ: Mapping[str, str], name: str, default: str) -> str:
    return environ.get(name, "").strip() or default


def add_parsers(sub: Any) -> None:
    """Add `mcp-memory` and `memory` to the top-level subparsers."""
    mcp = sub.add_parser(
        "mcp-memory",
        help="serve the memory store as a stdio MCP server (memory_* and aigpt's tools)",
        description="A stdio MCP server over $DATA_DIR/gantry.db: memory_store, memory_recall, "
        "memory_forget, and aigpt-compatible read_core, read_memory, save_memory, compress. "
        "Initialize instructions = the persona (core) + the newest memories.",
    )
    _dirs(mcp, persona=True)
    mcp.add_argument("--max-records", type=int, default=100, metavar="N",
                     help="memories shown in instructions and read_memory (default 100)")
    mcp.add_argument("--did", default="self", help="DID used in record URIs (default 'self')")

    mem = sub.add_parser("memory", help="inspect, edit, export or import long-term memory")
    msub = mem.add_subparsers(dest="memory_command", metavar="{add,list,search,forget,flagged,"
                              "export,import}", required=True)
    add = msub.add_parser("add", help="store a memory yourself (source 'operator')",
                          description="Store one statement as the model's memory_store would, "
                          "with source 'operator'; an exact duplicate of an active row is not "
                          "stored twice. Creates the database if there is none yet.")
    add.add_argument("content", nargs="+", help="the statement (words are joined by spaces)")
    add.add_argument("--kind", default="fact",
                     choices=KINDS,
                     help="default fact")
    add.add_argument("--subject", default="",
                     help="who or what it is about, e.g. mom (no ':'; default none)")
    _dirs(add)
    ls = msub.add_parser("list", help="active memories, newest first")
    ls.add_argument("--kind", choices=KINDS)
    ls.add_argument("--all", action="store_true", help="include expired and superseded rows")
    ls.add_argument("--limit", type=int, default=100)
    _dirs(ls)
    se = msub.add_parser("search", help="full-text search, ranked like memory_recall")
    se.add_argument("query")
    se.add_argument("--limit", type=int, default=20)
    _dirs(se)
    fo = msub.add_parser("forget", help="delete a memory (and the older rows it superseded)")
    fo.add_argument("id", type=int)
    _dirs(fo)
    fl = msub.add_parser("flagged", help="contradictions with the persona waiting for you")
    fl.add_argument("--resolve", type=int, metavar="FLAG_ID", help="mark a flag as handled")
    _dirs(fl)
    for name, what in (("export", "write"), ("import", "read")):
        p = msub.add_parser(name, help=f"{what} aigpt's ATProto record layout")
        p.add_argument("--atproto", required=True, metavar="DIR",
                       help="DIR/{did}/ai.syui.gpt.memory/{tid}.json and "
                       "DIR/{did}/ai.syui.gpt.core/self.json")
        p.add_argument("--did", required=True, help="e.g. did:plc:abc123")
        if name == "export":
            p.add_argument("--handle", default="handle.invalid",
                           help="the handle in the core record (default handle.invalid)")
            p.add_argument("--no-core", action="store_true",
                           help="export the memories only, without the core record (which is "
                           "the persona; without this a missing persona is an error)")
        _dirs(p, persona=name == "export")


def _dirs(p: Any, persona: bool = False) -> None:
    env_file_option(p)
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="override DATA_DIR (default: $DATA_DIR or /data)")
    if persona:
        p.add_argument("--persona-dir", default=None, metavar="DIR",
                       help="the persona files (default: $PERSONA_DIR or /persona); export "
                       "writes them as the core record, mcp-memory serves them as instructions")


def main(args: Any) -> int:
    from gantry.envfile import environ

    env = environ(args, args.command)
    if env is None:
        return 1
    data_dir = args.data_dir or _env(env, "DATA_DIR", "/data")
    if args.command == "mcp-memory":
        from gantry import log as logsetup
        from gantry.memory.serve import main as serve

        logsetup.setup(_env(env, "LOG_LEVEL", "info").lower(), [])
        persona_dir = args.persona_dir or _env(env, "PERSONA_DIR", "/persona")
        return serve(data_dir, persona_dir, did=args.did, max_records=args.max_records)
    return _memory(args, data_dir, env)


def _memory(args: Any, data_dir: str, env: Mapping[str, str]) -> int:
    from gantry import db
    from gantry.memory.store import MemoryStore, render_hits

    path = os.path.join(data_dir, "gantry.db")
    creates = args.memory_command in ("add", "import")
    if not creates and not os.path.isfile(path):
        print(f"gantry memory: no database at {path}; set DATA_DIR or --data-dir",
              file=sys.stderr)
        return 1
    try:
        if creates:
            db.ensure_data_dir(data_dir)
        conn = db.connect(path)
    except db.DatabaseError as exc:
        print(f"gantry memory: {exc}", file=sys.stderr)
        return 1
    try:
        store = MemoryStore(conn)
        cmd = args.memory_command
        if cmd == "add":
            return _add(store, args)
        if cmd == "list":
            rows = store.rows(args.kind, args.all, args.limit)
            for r in rows:
                state = "" if not args.all else _state(r, store.now())
                print(f"#{r.id} {r.line()} · {r.source} · {r.created_at[:19]}Z{state}")
            print(f"({len(rows)} shown)", file=sys.stderr)
        elif cmd == "search":
            print(render_hits(store.search(args.query, limit=args.limit)) or "no match")
        elif cmd == "forget":
            deleted = store.delete(args.id)
            if not deleted:
                print(f"gantry memory: no memory #{args.id}", file=sys.stderr)
                return 1
            print(f"deleted {len(deleted)}:\n{render_hits(deleted)}")
        elif cmd == "flagged":
            return _flagged(store, args.resolve)
        elif cmd == "export":
            return _export(store, args, env)
        else:
            return _import(store, args)
    finally:
        conn.close()
    return 0


def _add(store: Any, args: Any) -> int:
    from gantry.memory.store import MemoryInputError, stored_reply

    try:
        row, new = store.add(args.kind, args.subject, " ".join(args.content), source="operator")
    except MemoryInputError as exc:
        print(f"gantry memory add: {exc}", file=sys.stderr)
        return 1
    print(stored_reply(row, new))
    return 0


def _state(row: Any, now: str) -> str:
    if row.superseded_by is not None:
        return f" · superseded by #{row.superseded_by}"
    if row.expires_at is not None and row.expires_at <= now:
        return " · expired"
    return ""


def _flagged(store: Any, resolve: int | None) -> int:
    if resolve is not None:
        if not store.resolve_flag(resolve):
            print(f"gantry memory: no open flag #{resolve}", file=sys.stderr)
            return 1
        print(f"flag #{resolve} resolved")
        return 0
    flags = store.flags()
    for fid, statement, persona_says, sources, created in flags:
        print(f"flag #{fid} ({created[:10]}): memory says {statement!r}; "
              f"persona says {persona_says!r}; from memory rows {sources}")
    if not flags:
        print("no contradictions waiting")
    return 0


def _export(store: Any, args: Any, env: Mapping[str, str]) -> int:
    """Memories plus the persona as aigpt's core record; no persona is refused, not exported
    as an empty core (an import elsewhere would take it for the persona)."""
    from pathlib import Path

    from gantry.memory.atproto import export
    from gantry.persona import PersonaError, load, md_files

    core: str | None = None
    if not args.no_core:
        persona_dir = Path(args.persona_dir or _env(env, "PERSONA_DIR", "/persona"))
        if not persona_dir.is_dir() or not md_files(persona_dir):
            what = "does not exist" if not persona_dir.is_dir() else "holds no *.md files"
            print(f"gantry memory export: the persona directory {persona_dir} {what}, and the "
                  "core record is the persona; pass --persona-dir DIR (or set PERSONA_DIR), or "
                  "--no-core to export the memories without a core record", file=sys.stderr)
            return 1
        try:
            core = load(persona_dir).text
        except PersonaError as exc:
            print(f"gantry memory export: {exc}", file=sys.stderr)
            return 1
    try:
        n, root = export(store, args.atproto, args.did, core, args.handle)
    except (OSError, ValueError) as exc:
        print(f"gantry memory export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {n} memories to {root}" + (" (no core record)" if core is None else ""))
    return 0


def _import(store: Any, args: Any) -> int:
    from gantry.memory.atproto import import_dir

    try:
        result = import_dir(store, args.atproto, args.did)
    except (OSError, ValueError) as exc:
        print(f"gantry memory import: {exc}", file=sys.stderr)
        return 1
    for line in result.skipped or []:
        print(f"skipped {line}", file=sys.stderr)
    print(f"imported {result.added} memories ({result.duplicates} already present, "
          f"{len(result.skipped or [])} skipped)")
    if result.core_chars:
        print(f"core record found ({result.core_chars} chars); persona files are not changed")
    return 1 if result.skipped and not result.added and not result.duplicates else 0
