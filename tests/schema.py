"""A database as an older gantry left it, for the tests of a migration."""

from __future__ import annotations

from pathlib import Path

import apsw

from gantry import db


def database_at(path: Path, version: int) -> apsw.Connection:
    """A new database at `path` with migrations 1..`version` applied, and no later one."""
    conn = apsw.Connection(str(path))
    with conn:
        for number, _name, sql in db.migrations()[:version]:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {number}")
    return conn
