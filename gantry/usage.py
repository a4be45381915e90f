"""`gantry usage`: what the model calls cost, read from the usage ledger without writing.

Read-only and lean like `status` (no httpx, aiogram or mcp): safe beside a running `gantry
run`, which holds the DATA_DIR lock. Days are CRON_TZ's, as the user lives them.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    """`gantry usage [--since …] [--by …] [--json]` on the command line's subparsers."""
    from gantry.envfile import add_option as env_file
    from gantry.model.spend import BY
    from gantry.model.usage_view import SINCE_HELP

    p = sub.add_parser("usage", help="model calls, tokens and cost from the usage ledger "
                       "(read-only)")
    p.add_argument("--since", default="30d", help=f"{SINCE_HELP} (default: 30d)")
    p.add_argument("--by", default="source", choices=BY,
                   help="break the total down by this (default: source)")
    p.add_argument("--json", action="store_true", help="one JSON object: total and breakdown")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="override DATA_DIR (default: $DATA_DIR or /data)")
    env_file(p)


def _zone(name: str) -> Any:
    """CRON_TZ as `gantry run` reads it (gantry.cron.tools.zone, without cron's imports)."""
    from datetime import UTC
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        return UTC


def main(args: Any) -> int:
    from gantry.envfile import data_dir, environ
    from gantry.model.usage_view import render, report, since_of

    env = environ(args, "usage")
    if env is None:
        return EXIT_FAIL
    zone = _zone(env.get("CRON_TZ", "").strip() or "UTC")
    try:
        since = since_of(args.since, zone, time.time())
    except ValueError as exc:
        print(f"gantry usage: {exc}", file=sys.stderr)
        return EXIT_USAGE
    db_path = os.path.join(data_dir(args, env), "gantry.db")
    if not os.path.isfile(db_path):
        print(f"gantry usage: no database at {db_path} (is DATA_DIR right?)", file=sys.stderr)
        return EXIT_FAIL
    from gantry.readonly import ReadError, query

    try:
        data = query(db_path, lambda conn: report(conn, since, None, args.by, zone))
    except ReadError as exc:
        if exc.missing_table:
            print(f"gantry usage: no usage table in {db_path} yet: start `gantry run` once "
                  "to migrate", file=sys.stderr)
        else:
            print(f"gantry usage: cannot read {db_path}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    if args.json:
        import json

        print(json.dumps(data))
    else:
        print(render(data, zone))
    return EXIT_OK
