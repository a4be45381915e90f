"""`gantry watch list`: the operator's view of watches (distroless has no sqlite3 to look).

Opens the database read-only, so it is safe next to a running `gantry run`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from gantry.watch.store import Watch, all_watches


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(conn: Any) -> tuple[list[Watch], dict[int, tuple[int, str]]]:
    """Every watch, and per watch (wakes so far, state of the latest wake)."""
    wakes = {int(r[0]): (int(r[1]), str(r[2])) for r in conn.execute(
        "SELECT watch_id, count(*), (SELECT state FROM watch_wake l WHERE l.watch_id = "
        "k.watch_id ORDER BY l.id DESC LIMIT 1) FROM watch_wake k GROUP BY watch_id")}
    return all_watches(conn), wakes


def render(watches: list[Watch], wakes: dict[int, tuple[int, str]], show_all: bool) -> str:
    shown = [w for w in watches if show_all or w.state != "cancelled"]
    active = sum(w.state == "active" for w in watches)
    paused = sum(w.state == "paused" for w in watches)
    lines = [f"{active} active, {paused} paused watch(es)"
             + ("" if show_all else "; --all shows cancelled ones too")]
    for w in shown:
        every = "on change or " if w.uri is not None else ""
        cursor = "unseeded" if w.cursor is None else f"{len(w.cursor)} ids seen"
        count, last = wakes.get(w.id, (0, "-"))
        line = (f"#{w.id} [{w.state}] {w.session_id} · {w.label} · {w.target} · "
                f"{every}every {int(w.interval_s)} s · next {_when(w.next_at)} · {w.polls} "
                f"polls, {cursor} · {count} wakes (last {last})")
        if w.failures:
            line += f" · {w.failures} failures in a row, last: {w.last_error or '?'}"
        lines.append(line)
    return "\n".join(lines)


def list_watches(db_path: str, show_all: bool = False) -> tuple[bool, str]:
    """(ok, text) for `gantry watch list`."""
    if not os.path.isfile(db_path):
        return False, f"no database at {db_path} (is DATA_DIR right?)"
    from gantry.readonly import ReadError, query

    try:
        watches, wakes = query(db_path, _read)
    except ReadError as exc:
        if exc.missing_table:
            return False, f"no watch tables in {db_path} yet: start `gantry run` once to migrate"
        return False, f"cannot read {db_path}: {exc}"
    return True, render(watches, wakes, show_all)
