"""`gantry backup [PATH] | backup --verify PATH | restore PATH`: the operator's commands."""

from __future__ import annotations

import os
import sys
from typing import Any

EXIT_OK, EXIT_FAIL = 0, 1


def add_parsers(sub: Any) -> None:
    from gantry.envfile import add_option as env_file

    bk = sub.add_parser(
        "backup", help="copy gantry.db (safe while gantry run runs), or --verify a copy",
        description="Write a consistent copy of $DATA_DIR/gantry.db to PATH (a file, or a "
        "directory for a time-stamped name; default $BACKUP_DIR) under a temporary name, "
        "check it with integrity_check, fsync it and rename it into place (mode 0600). "
        "Safe while `gantry run` is answering.")
    bk.add_argument("path", nargs="?", default=None, metavar="PATH",
                    help="the backup file or directory (default: $BACKUP_DIR)")
    bk.add_argument("--with-files", action="store_true",
                    help="also copy DATA_DIR/media and DATA_DIR/outbox to PATH's .files folder")
    bk.add_argument("--verify", action="store_true",
                    help="check the backup at PATH (integrity, a gantry database, a schema "
                    "this gantry knows) without restoring it")
    rs = sub.add_parser(
        "restore", help="replace gantry.db with a backup (gantry run must be stopped)",
        description="Check the backup at PATH, keep the current $DATA_DIR/gantry.db as "
        "gantry.db.before-restore-<time>, and rename a checked copy of the backup into "
        "place. Refused while a `gantry run` uses DATA_DIR.")
    rs.add_argument("path", metavar="PATH", help="the backup to restore")
    for p in (bk, rs):
        p.add_argument("--data-dir", default=None, metavar="DIR",
                       help="override DATA_DIR (default: $DATA_DIR or /data)")
        env_file(p)


def main(args: Any) -> int:
    from gantry.db import DatabaseError
    from gantry.envfile import data_dir, environ

    env = environ(args, args.command)
    if env is None:
        return EXIT_FAIL
    directory = data_dir(args, env)
    try:
        if args.command == "restore":
            from gantry.store.restore import restore

            lines = restore(args.path, directory)
        elif args.verify:
            lines = [verify(args.path)]
        else:
            lines = backup(directory, args.path, env.get("BACKUP_DIR", "").strip(),
                           args.with_files)
    except DatabaseError as exc:
        print(f"gantry {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    for line in lines:
        print(line)
    return EXIT_OK


def backup(data_dir: str, path: str | None, backup_dir: str, with_files: bool) -> list[str]:
    from gantry.store.backup import take, target

    return [describe(w) for w in take(data_dir, target(path, backup_dir), with_files)]


def verify(path: str | os.PathLike[str]) -> str:
    from gantry.db import schema_version
    from gantry.store.examine import examine
    from gantry.store.space import human

    if path is None:
        from gantry.db import DatabaseError

        raise DatabaseError("--verify needs the PATH of the backup to check")
    v = examine(path, thorough=True, backup=True)
    known = schema_version()
    when = "" if v.version == known else f"; gantry run migrates it to {known} after a restore"
    return (f"{v.path}: a gantry database, {human(v.size)}, integrity ok, schema version "
            f"{v.version}{when}")


def describe(w: Any) -> str:
    from gantry.store.space import human

    return f"wrote {w.path} ({human(w.size)}, {w.detail})"
