"""The heartbeat row: `run` writes it every 15 s, `status` judges its age read-only.

A clean shutdown rewrites the row with pid 0 (no process has it): `status` then says "stopped"
at once, and only a crash (no chance to write) is left to the age check.

`check` is the container healthcheck: it imports only os, time, apsw and gantry.readonly (no
pathlib, no gantry.db and its importlib.resources), because every millisecond is paid every few
seconds.
"""

from __future__ import annotations

import os
import time

INTERVAL = 15.0
DEFAULT_MAX_AGE = 60.0
STOPPED_PID = 0


def touch(conn: object, version: str, now: float | None = None,
          tasks: int | None = None) -> None:
    """Upsert the singleton row with the current time, version, pid and live task count."""
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO heartbeat (id, ts, version, pid, tasks) VALUES (1, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET ts = excluded.ts, version = excluded.version, "
        "pid = excluded.pid, tasks = excluded.tasks",
        (time.time() if now is None else now, version, os.getpid(), tasks),
    )


def live_tasks() -> int | None:
    """Tasks alive in the running event loop (anyio runs on asyncio): a leak of tasks shows
    as a count that keeps growing; None outside a loop."""
    import asyncio

    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return None


def mark_stopped(conn: object, now: float | None = None) -> bool:
    """Say in the row that this process stopped cleanly; True if the row was this process's.

    Only our own row is rewritten: a second `run` on the same database keeps its mark.
    """
    conn.execute(  # type: ignore[attr-defined]
        "UPDATE heartbeat SET ts = ?, pid = ? WHERE id = 1 AND pid = ?",
        (time.time() if now is None else now, STOPPED_PID, os.getpid()),
    )
    return bool(conn.changes())  # type: ignore[attr-defined]


def check(db_path: str | os.PathLike[str], max_age: float = DEFAULT_MAX_AGE) -> tuple[bool, str]:
    """(healthy, one-line reason). Opens the database read-only and never writes."""
    p = os.fspath(db_path)
    if not os.path.isfile(p):
        return False, f"unhealthy: no database at {p} (is `gantry run` running with this DATA_DIR?)"
    full = full_disk(os.path.dirname(os.path.abspath(p)))
    if full:
        return False, full
    from gantry.readonly import ReadError, query

    try:
        row = query(p, lambda conn: conn.execute(
            "SELECT ts, version, pid FROM heartbeat WHERE id = 1").fetchone())
    except ReadError as exc:
        if exc.missing_table:
            return False, f"unhealthy: no heartbeat table in {p} (database not initialised yet)"
        return False, f"unhealthy: cannot read {p}: {exc}"
    if row is None:
        if not os.path.exists(p + "-wal"):  # a running `run` keeps the -wal file
            return False, (f"unhealthy: gantry run has never run with {p} (no heartbeat row, "
                           "and nothing has the database open)")
        return False, "unhealthy: no heartbeat row yet (gantry run has not finished booting)"
    ts, version, pid = row
    age = time.time() - float(ts)
    if pid == STOPPED_PID:
        return False, (f"unhealthy: gantry stopped cleanly {max(age, 0.0):.0f} s ago "
                       f"(version {version}); start it again with `gantry run`")
    if age > max_age:
        stale = age - max_age
        return False, f"unhealthy: heartbeat stale by {stale:.0f} s (age {age:.0f} s, pid {pid})"
    return True, f"healthy: heartbeat {max(age, 0.0):.1f} s old, version {version}, pid {pid}"


def full_disk(data_dir: str) -> str:
    """"unhealthy: …" when DATA_DIR's file system has no room for a write, else ""."""
    from gantry.store.space import free_bytes, has_room

    if has_room(data_dir):
        return ""
    free = free_bytes(data_dir)
    return (f"unhealthy: the file system holding {data_dir} is full ({free} bytes free); "
            "gantry cannot store messages until space is freed there")
