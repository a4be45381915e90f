"""SQLite state of cron: jobs and their runs (migration 0004_cron.sql, docs/cron.md).

A fire is *claimed* — its run row written and the job moved to its next occurrence in one
transaction — before the turn starts; the run then goes started → replied → delivered
(or silent / failed). A restart resumes every run still started or replied, so a kill -9
at any point neither loses a fire nor runs it twice.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import msgspec

ACTIVE = "active"
OPEN_RUN_STATES = ("started", "replied")
PRUNE_AFTER = 30 * 86400
NOTICE_AFTER = 3  # failed runs in a row before the user is told, once per streak


class Job(msgspec.Struct):
    id: int
    session_id: str
    kind: str
    spec: str
    label: str
    tz: str
    prompt: str
    state: str
    next_at: float | None
    anchor_at: float
    created_at: float


class Run(msgspec.Struct):
    id: int
    job_id: int
    due_at: float
    state: str
    attempts: int
    reply: str | None
    sent_parts: int
    session_id: str
    prompt: str
    label: str


class Notice(msgspec.Struct):
    """The one message a failure streak earns: pushed to the job's chat, then marked sent."""

    run_id: int
    job_id: int
    session_id: str
    text: str


class CapReached(Exception):
    """CRON_MAX_JOBS active jobs exist already."""


_JOB_COLS = (
    "id, session_id, kind, spec, label, tz, prompt, state, next_at, anchor_at, created_at"
)
_RUN_COLS = (
    "r.id, r.job_id, r.due_at, r.state, r.attempts, r.reply, r.sent_parts, j.session_id, "
    "j.prompt, j.label"
)


def _job(r: Sequence[object]) -> Job:
    return Job(
        int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]),  # type: ignore[call-overload]
        str(r[6]), str(r[7]), None if r[8] is None else float(r[8]),  # type: ignore[arg-type]
        float(r[9]), float(r[10]),  # type: ignore[arg-type]
    )


def _run(r: Sequence[object]) -> Run:
    return Run(
        int(r[0]), int(r[1]), float(r[2]), str(r[3]), int(r[4]),  # type: ignore[call-overload, arg-type]
        None if r[5] is None else str(r[5]), int(r[6]),  # type: ignore[call-overload]
        str(r[7]), str(r[8]), str(r[9]),
    )


class CronStore:
    def __init__(self, conn: object) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return list(self.conn.execute(sql, params))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ jobs

    def add(
        self, *, session_id: str, kind: str, spec: str, label: str, tz: str, prompt: str,
        next_at: float, anchor_at: float, max_jobs: int, now: float | None = None,
    ) -> int:
        """Insert an active job, or raise CapReached if `max_jobs` are active already."""
        now = time.time() if now is None else now
        with self.conn:  # type: ignore[attr-defined]
            active = self._rows("SELECT count(*) FROM cron_job WHERE state = 'active'")[0][0]
            if int(active) >= max_jobs:  # type: ignore[call-overload]
                raise CapReached
            self._rows(
                "INSERT INTO cron_job (session_id, kind, spec, label, tz, prompt, state, "
                "next_at, anchor_at, created_at) VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
                (session_id, kind, spec, label, tz, prompt, next_at, anchor_at, now),
            )
            return int(self._rows("SELECT last_insert_rowid()")[0][0])  # type: ignore[call-overload]

    def get(self, job_id: int) -> Job | None:
        rows = self._rows(f"SELECT {_JOB_COLS} FROM cron_job WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def active(self, session_id: str | None = None) -> list[Job]:
        """Active jobs (of one session, or all), soonest first."""
        if session_id is None:
            rows = self._rows(
                f"SELECT {_JOB_COLS} FROM cron_job WHERE state = 'active' ORDER BY next_at, id"
            )
        else:
            rows = self._rows(
                f"SELECT {_JOB_COLS} FROM cron_job WHERE state = 'active' AND session_id = ? "
                "ORDER BY next_at, id",
                (session_id,),
            )
        return [_job(r) for r in rows]

    def cancel(self, job_id: int, session_id: str, now: float | None = None) -> bool:
        """Cancel an active job of this session; False if there is none with that id."""
        now = time.time() if now is None else now
        with self.conn:  # type: ignore[attr-defined]
            rows = self._rows(
                "SELECT 1 FROM cron_job WHERE id = ? AND session_id = ? AND state = 'active'",
                (job_id, session_id),
            )
            if not rows:
                return False
            self._rows(
                "UPDATE cron_job SET state = 'cancelled', next_at = NULL, ended_at = ? "
                "WHERE id = ?",
                (now, job_id),
            )
        return True

    def due(self, now: float, channel: str) -> list[Job]:
        """Active jobs of `channel` whose next fire is at or before `now`."""
        rows = self._rows(
            f"SELECT {_JOB_COLS} FROM cron_job WHERE state = 'active' AND next_at <= ? "
            "AND substr(session_id, 1, ?) = ? ORDER BY next_at, id",
            (now, len(channel) + 1, channel + ":"),
        )
        return [_job(r) for r in rows]

    def earliest(self, channel: str) -> float | None:
        rows = self._rows(
            "SELECT min(next_at) FROM cron_job WHERE state = 'active' "
            "AND substr(session_id, 1, ?) = ?",
            (len(channel) + 1, channel + ":"),
        )
        return None if not rows or rows[0][0] is None else float(rows[0][0])  # type: ignore[arg-type]

    # ------------------------------------------------------------------ runs

    def _advance(self, job_id: int, next_at: float | None, end_state: str, now: float) -> None:
        if next_at is None:
            self._rows(
                "UPDATE cron_job SET next_at = NULL, state = ?, ended_at = ? "
                "WHERE id = ? AND state = 'active'",
                (end_state, now, job_id),
            )
        else:
            self._rows(
                "UPDATE cron_job SET next_at = ? WHERE id = ? AND state = 'active'",
                (next_at, job_id),
            )

    def claim(self, job: Job, due_at: float, next_at: float | None, now: float) -> Run:
        """Record a fire as started and move the job on, atomically."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "INSERT INTO cron_run (job_id, due_at, state, attempts, started_at) "
                "VALUES (?, ?, 'started', 0, ?) ON CONFLICT (job_id, due_at) DO NOTHING",
                (job.id, due_at, now),
            )
            self._advance(job.id, next_at, "done", now)
            row = self._rows(
                f"SELECT {_RUN_COLS} FROM cron_run r JOIN cron_job j ON j.id = r.job_id "
                "WHERE r.job_id = ? AND r.due_at = ?",
                (job.id, due_at),
            )
        return _run(row[0])

    def pass_over(
        self, job: Job, due_at: float, next_at: float | None, state: str, now: float,
        note: str = "",
    ) -> None:
        """A fire not run (`skipped`: overlap or a budget reached; `missed`: outside the
        grace window)."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "INSERT INTO cron_run (job_id, due_at, state, error, started_at, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, due_at) DO NOTHING",
                (job.id, due_at, state, note or None, now, now),
            )
            self._advance(job.id, next_at, state if state in ("missed", "failed") else "done",
                          now)

    def skip(self, run_id: int, note: str, now: float) -> None:
        """A claimed run whose turn was refused (a budget reached): skipped, not failed, so
        it neither counts toward a failure streak nor is resumed."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows("UPDATE cron_run SET state = 'skipped', error = ?, finished_at = ? "
                       "WHERE id = ? AND state = 'started'", (note, now, run_id))

    def open_runs(self, channel: str) -> list[Run]:
        """Runs of `channel` a crash or shutdown left started or replied, oldest first."""
        rows = self._rows(
            f"SELECT {_RUN_COLS} FROM cron_run r JOIN cron_job j ON j.id = r.job_id "
            "WHERE r.state IN ('started', 'replied') AND substr(j.session_id, 1, ?) = ? "
            "ORDER BY r.id",
            (len(channel) + 1, channel + ":"),
        )
        return [_run(r) for r in rows]

    def attempt(self, run_id: int) -> int:
        """Count one more turn started for this run; returns the new count."""
        with self.conn:  # type: ignore[attr-defined]
            self._rows("UPDATE cron_run SET attempts = attempts + 1 WHERE id = ?", (run_id,))
            row = self._rows("SELECT attempts FROM cron_run WHERE id = ?", (run_id,))
        return int(row[0][0])  # type: ignore[call-overload]

    def set_reply(self, run_id: int, reply: str, silent: bool, now: float) -> None:
        with self.conn:  # type: ignore[attr-defined]
            if silent:
                self._rows(
                    "UPDATE cron_run SET reply = ?, state = 'silent', finished_at = ? "
                    "WHERE id = ?",
                    (reply, now, run_id),
                )
            else:
                self._rows(
                    "UPDATE cron_run SET reply = ?, state = 'replied' WHERE id = ?",
                    (reply, run_id),
                )

    def mark_sent(self, run_id: int, parts: int, total: int, now: float | None = None) -> None:
        """Record pushed parts; the run is delivered when all `total` are out."""
        now = time.time() if now is None else now
        if parts >= total:
            sql = "UPDATE cron_run SET sent_parts = ?, state = 'delivered', finished_at = ? "
        else:
            sql = "UPDATE cron_run SET sent_parts = ?, finished_at = ? "
        with self.conn:  # type: ignore[attr-defined]
            self._rows(sql + "WHERE id = ?", (parts, now if parts >= total else None, run_id))

    def fail(
        self, run_id: int, error: str, now: float | None = None,
        notice: Callable[[Job, int, str], str] | None = None,
    ) -> Notice | None:
        """Record a run as failed. If that makes its job's NOTICE_AFTER-th failure in a row
        (delivered or silent runs end a streak; skipped and missed ones do not count), the
        notice `notice(job, streak, error)` is stored pending in the same transaction and
        returned for the caller to push."""
        now = time.time() if now is None else now
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE cron_run SET state = 'failed', error = ?, finished_at = ? WHERE id = ?",
                (error[:500], now, run_id),
            )
            if notice is None:
                return None
            rows = self._rows(
                "SELECT r.state FROM cron_run r JOIN cron_run f ON f.job_id = r.job_id "
                "WHERE f.id = ? AND r.state IN ('delivered', 'silent', 'failed') "
                "ORDER BY r.due_at DESC LIMIT ?",
                (run_id, NOTICE_AFTER + 1),
            )
            streak = len(list(itertools.takewhile(lambda r: r[0] == "failed", rows)))
            if streak != NOTICE_AFTER:  # none yet, or longer: this streak had its notice
                return None
            job_id = int(self._rows("SELECT job_id FROM cron_run WHERE id = ?", (run_id,))[0][0])  # type: ignore[call-overload]
            job = self.get(job_id)
            assert job is not None
            text = notice(job, NOTICE_AFTER, error)
            self._rows(
                "UPDATE cron_run SET notice = ?, notice_state = 'pending' WHERE id = ?",
                (text, run_id),
            )
        return Notice(run_id, job_id, job.session_id, text)

    def notices(self, channel: str) -> list[Notice]:
        """Failure notices of `channel` still pending (a restart cut their push)."""
        rows = self._rows(
            "SELECT r.id, r.job_id, j.session_id, r.notice FROM cron_run r "
            "JOIN cron_job j ON j.id = r.job_id WHERE r.notice_state = 'pending' "
            "AND substr(j.session_id, 1, ?) = ? ORDER BY r.id",
            (len(channel) + 1, channel + ":"),
        )
        return [Notice(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]  # type: ignore[call-overload]

    def notice_done(self, run_id: int, sent: bool) -> None:
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "UPDATE cron_run SET notice_state = ? WHERE id = ?",
                ("sent" if sent else "failed", run_id),
            )

    def run_state(self, run_id: int) -> str:
        return str(self._rows("SELECT state FROM cron_run WHERE id = ?", (run_id,))[0][0])

    def prune(self, now: float | None = None) -> None:
        """Forget finished runs after 30 days and ended jobs that have no runs left."""
        cutoff = (time.time() if now is None else now) - PRUNE_AFTER
        with self.conn:  # type: ignore[attr-defined]
            self._rows(
                "DELETE FROM cron_run WHERE state NOT IN ('started', 'replied') "
                "AND coalesce(notice_state, '') != 'pending' "
                "AND coalesce(finished_at, started_at) < ?",
                (cutoff,),
            )
            self._rows(
                "DELETE FROM cron_job WHERE state != 'active' AND ended_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM cron_run r WHERE r.job_id = cron_job.id)",
                (cutoff,),
            )


def all_jobs(conn: object) -> list[Job]:
    """Every job, for the operator's `gantry cron list` (active first, then newest)."""
    rows = conn.execute(  # type: ignore[attr-defined]
        f"SELECT {_JOB_COLS} FROM cron_job ORDER BY state != 'active', next_at, id DESC"
    )
    return [_job(r) for r in rows]
