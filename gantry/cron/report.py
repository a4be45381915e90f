"""`gantry cron list`: the operator's view of jobs (distroless has no sqlite3 to look).

Opens the database read-only, so it is safe next to a running `gantry run`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from gantry.cron.store import Job, all_jobs


def _when(ts: float | None, tz: str) -> str:
    if ts is None:
        return "-"
    at = datetime.fromtimestamp(ts, UTC)
    try:
        local = at.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")
    except (KeyError, ValueError, OSError):  # a zone the system tzdata no longer has
        local = "?"
    return f"{local} ({at.strftime('%Y-%m-%dT%H:%MZ')})"


def render(jobs: list[Job], show_all: bool) -> str:
    shown = [j for j in jobs if show_all or j.state == "active"]
    active = sum(j.state == "active" for j in jobs)
    lines = [f"{active} active job(s)" + ("" if show_all else "; --all shows ended ones too")]
    for j in shown:
        label = "once" if j.kind == "once" else j.label
        prompt = j.prompt if len(j.prompt) <= 60 else j.prompt[:59] + "…"
        lines.append(
            f"#{j.id} [{j.state}] {j.session_id} · {label} · next {_when(j.next_at, j.tz)}"
            f" · {prompt!r}"
        )
    return "\n".join(lines)


def list_jobs(db_path: str, show_all: bool = False) -> tuple[bool, str]:
    """(ok, text) for `gantry cron list`."""
    if not os.path.isfile(db_path):
        return False, f"no database at {db_path} (is DATA_DIR right?)"
    from gantry.readonly import ReadError, query

    try:
        jobs = query(db_path, all_jobs)
    except ReadError as exc:
        if exc.missing_table:
            return False, f"no cron tables in {db_path} yet: start `gantry run` once to migrate"
        return False, f"cannot read {db_path}: {exc}"
    return True, render(jobs, show_all)
