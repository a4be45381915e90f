"""SQLite state of watches (migration 0010_watch.sql, docs/watch.md).

A poll that finds new items writes the watch's new cursor and a wake row (the pending turn)
in one transaction; the wake then goes started → replied → delivered (or silent / failed)
like a cron run. A restart resumes every wake still started or replied, so a kill -9 at any
point neither loses new items nor wakes the agent twice for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import msgspec

PAUSE_AFTER = 5  # failed polls in a row before the watch is paused (one message to the chat)
BACKOFF_CAP = 6 * 3600.0  # a failing watch's polls spread out up to this far apart
PRUNE_AFTER = 30 * 86400


class Watch(msgspec.Struct):
    id: int
    session_id: str
    server: str
    tool: str | None
    exposed: str | None
    args: dict[str, Any]
    uri: str | None
    id_field: str
    label: str
    instruction: str
    interval_s: float
    state: str
    next_at: float | None
    cursor: list[str] | None
    failures: int
    last_error: str | None
    polls: int
    created_at: float

    @property
    def target(self) -> str:
        """What is watched, as the model and the operator name it."""
        if self.uri is not None:
            return f"resource {self.uri} on {self.server}"
        return str(self.exposed or f"{self.server}__{self.tool}")


class Wake(msgspec.Struct):
    id: int
    watch_id: int
    items: list[Any]
    total: int
    state: str
    attempts: int
    reply: str | None
    sent_parts: int
    created_at: float
    session_id: str
    label: str
    instruction: str


class Notice(msgspec.Struct):
    watch_id: int
    session_id: str
    text: str


class CapReached(Exception):
    """WATCH_MAX active watches exist already."""


_COLS = (
    "id, session_id, server, tool, exposed, args, uri, id_field, label, instruction, "
    "interval_s, state, next_at, cursor, failures, last_error, polls, created_at"
)
_WAKE_COLS = (
    "k.id, k.watch_id, k.items, k.total, k.state, k.attempts, k.reply, k.sent_parts, "
    "k.created_at, w.session_id, w.label, w.instruction"
)


def _watch(r: Sequence[Any]) -> Watch:
    return Watch(
        int(r[0]), str(r[1]), str(r[2]), r[3], r[4], json.loads(r[5]), r[6], str(r[7]),
        str(r[8]), str(r[9]), float(r[10]), str(r[11]), None if r[12] is None else float(r[12]),
        None if r[13] is None else json.loads(r[13]), int(r[14]), r[15], int(r[16]),
        float(r[17]),
    )


def _wake(r: Sequence[Any]) -> Wake:
    return Wake(int(r[0]), int(r[1]), json.loads(r[2]), int(r[3]), str(r[4]), int(r[5]), r[6],
                int(r[7]), float(r[8]), str(r[9]), str(r[10]), str(r[11]))


def _of(channel: str) -> tuple[int, str]:
    return len(channel) + 1, channel + ":"


class WatchStore:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params))

    # ------------------------------------------------------------------ watches

    def add(
        self, *, session_id: str, server: str, tool: str | None, exposed: str | None,
        args: dict[str, Any], uri: str | None, id_field: str, label: str, instruction: str,
        interval_s: float, max_watches: int, now: float,
    ) -> int:
        """Insert an active watch due now (its first poll seeds the cursor), or CapReached."""
        with self.conn:
            active = self._rows("SELECT count(*) FROM watch WHERE state = 'active'")[0][0]
            if int(active) >= max_watches:
                raise CapReached
            self._rows(
                "INSERT INTO watch (session_id, server, tool, exposed, args, uri, id_field, "
                "label, instruction, interval_s, state, next_at, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)",
                (session_id, server, tool, exposed, json.dumps(args), uri, id_field, label,
                 instruction, interval_s, now, now),
            )
            return int(self._rows("SELECT last_insert_rowid()")[0][0])

    def get(self, watch_id: int) -> Watch | None:
        rows = self._rows(f"SELECT {_COLS} FROM watch WHERE id = ?", (watch_id,))
        return _watch(rows[0]) if rows else None

    def listed(self, session_id: str) -> list[Watch]:
        """This chat's active and paused watches, oldest first."""
        rows = self._rows(
            f"SELECT {_COLS} FROM watch WHERE session_id = ? AND state IN ('active', 'paused') "
            "ORDER BY id", (session_id,))
        return [_watch(r) for r in rows]

    def active(self, channel: str) -> list[Watch]:
        n, prefix = _of(channel)
        rows = self._rows(
            f"SELECT {_COLS} FROM watch WHERE state = 'active' AND substr(session_id, 1, ?) = ? "
            "ORDER BY next_at, id", (n, prefix))
        return [_watch(r) for r in rows]

    def due(self, now: float, channel: str) -> list[Watch]:
        n, prefix = _of(channel)
        rows = self._rows(
            f"SELECT {_COLS} FROM watch WHERE state = 'active' AND next_at <= ? "
            "AND substr(session_id, 1, ?) = ? ORDER BY next_at, id", (now, n, prefix))
        return [_watch(r) for r in rows]

    def next_times(self, channel: str) -> list[tuple[int, float]]:
        """(id, next_at) of the channel's active watches: the ticker plans its nap on them."""
        n, prefix = _of(channel)
        return [(int(r[0]), float(r[1])) for r in self._rows(
            "SELECT id, next_at FROM watch WHERE state = 'active' AND next_at IS NOT NULL "
            "AND substr(session_id, 1, ?) = ?", (n, prefix))]

    def cancel(self, watch_id: int, session_id: str, now: float) -> Watch | None:
        """Cancel an active or paused watch of this chat; None if there is none with that id."""
        with self.conn:
            rows = self._rows(
                f"SELECT {_COLS} FROM watch WHERE id = ? AND session_id = ? "
                "AND state IN ('active', 'paused')", (watch_id, session_id))
            if not rows:
                return None
            self._rows("UPDATE watch SET state = 'cancelled', next_at = NULL, ended_at = ? "
                       "WHERE id = ?", (now, watch_id))
        return _watch(rows[0])

    def claim_poll(self, watch_id: int, next_at: float) -> None:
        """Move the next poll on before this one runs: a poll cut by a crash is simply
        made again later, and a slow one is never started twice."""
        with self.conn:
            self._rows("UPDATE watch SET next_at = ? WHERE id = ? AND state = 'active'",
                       (next_at, watch_id))

    def seen(self, watch_id: int, cursor: list[str], new: list[Any], total: int,
             now: float) -> Wake | None:
        """A successful poll: the new cursor, and when there are new items the wake row, in
        one transaction. Returns the wake to run, if any."""
        with self.conn:
            state = self._rows("SELECT state FROM watch WHERE id = ?", (watch_id,))
            if not state or state[0][0] != "active":
                return None  # cancelled while the poll ran: nothing to wake
            self._rows(
                "UPDATE watch SET cursor = ?, failures = 0, last_error = NULL, "
                "polls = polls + 1 WHERE id = ?", (json.dumps(cursor), watch_id))
            if not total:
                return None
            self._rows(
                "INSERT INTO watch_wake (watch_id, items, total, state, created_at) "
                "VALUES (?, ?, ?, 'started', ?)",
                (watch_id, json.dumps(new, ensure_ascii=False), total, now))
            wake_id = int(self._rows("SELECT last_insert_rowid()")[0][0])
            return self.wake(wake_id)

    def failed(self, watch_id: int, error: str, now: float, notice_text: str | None,
               ) -> tuple[int, Notice | None]:
        """A failed poll: counted, the next one backed off; at PAUSE_AFTER in a row the watch
        is paused with its notice stored pending in the same transaction. Returns (failures,
        the notice to push or None)."""
        with self.conn:
            rows = self._rows("SELECT failures, interval_s, session_id, state FROM watch "
                              "WHERE id = ?", (watch_id,))
            if not rows or rows[0][3] != "active":
                return 0, None
            failures = int(rows[0][0]) + 1
            interval, session_id = float(rows[0][1]), str(rows[0][2])
            if failures >= PAUSE_AFTER and notice_text is not None:
                self._rows(
                    "UPDATE watch SET failures = ?, last_error = ?, state = 'paused', "
                    "next_at = NULL, notice = ?, notice_state = 'pending' WHERE id = ?",
                    (failures, error[:500], notice_text, watch_id))
                return failures, Notice(watch_id, session_id, notice_text)
            delay = min(BACKOFF_CAP, interval * 2 ** (failures - 1))
            self._rows("UPDATE watch SET failures = ?, last_error = ?, next_at = ? "
                       "WHERE id = ?", (failures, error[:500], now + delay, watch_id))
            return failures, None

    def notices(self, channel: str) -> list[Notice]:
        n, prefix = _of(channel)
        rows = self._rows(
            "SELECT id, session_id, notice FROM watch WHERE notice_state = 'pending' "
            "AND substr(session_id, 1, ?) = ? ORDER BY id", (n, prefix))
        return [Notice(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def notice_done(self, watch_id: int, sent: bool) -> None:
        with self.conn:
            self._rows("UPDATE watch SET notice_state = ? WHERE id = ?",
                       ("sent" if sent else "failed", watch_id))

    # ------------------------------------------------------------------ wakes

    def wake(self, wake_id: int) -> Wake:
        rows = self._rows(f"SELECT {_WAKE_COLS} FROM watch_wake k JOIN watch w "
                          "ON w.id = k.watch_id WHERE k.id = ?", (wake_id,))
        return _wake(rows[0])

    def open_wakes(self, channel: str) -> list[Wake]:
        n, prefix = _of(channel)
        rows = self._rows(
            f"SELECT {_WAKE_COLS} FROM watch_wake k JOIN watch w ON w.id = k.watch_id "
            "WHERE k.state IN ('started', 'replied') AND substr(w.session_id, 1, ?) = ? "
            "ORDER BY k.id", (n, prefix))
        return [_wake(r) for r in rows]

    def attempt(self, wake_id: int) -> int:
        with self.conn:
            self._rows("UPDATE watch_wake SET attempts = attempts + 1 WHERE id = ?", (wake_id,))
            return int(self._rows("SELECT attempts FROM watch_wake WHERE id = ?",
                                  (wake_id,))[0][0])

    def set_reply(self, wake_id: int, reply: str, silent: bool, now: float) -> None:
        with self.conn:
            if silent:
                self._rows("UPDATE watch_wake SET reply = ?, state = 'silent', finished_at = ? "
                           "WHERE id = ?", (reply, now, wake_id))
            else:
                self._rows("UPDATE watch_wake SET reply = ?, state = 'replied' WHERE id = ?",
                           (reply, wake_id))

    def mark_sent(self, wake_id: int, parts: int, total: int, now: float) -> None:
        done = parts >= total
        with self.conn:
            self._rows(
                "UPDATE watch_wake SET sent_parts = ?, state = CASE WHEN ? THEN 'delivered' "
                "ELSE state END, finished_at = ? WHERE id = ?",
                (parts, done, now if done else None, wake_id))

    def wake_state(self, wake_id: int) -> str:
        return str(self._rows("SELECT state FROM watch_wake WHERE id = ?", (wake_id,))[0][0])

    def skip_wake(self, wake_id: int, note: str, now: float) -> None:
        """A wake whose turn was refused (a budget reached): skipped, its items kept in the
        row, never resumed."""
        with self.conn:
            self._rows("UPDATE watch_wake SET state = 'skipped', error = ?, finished_at = ? "
                       "WHERE id = ? AND state = 'started'", (note, now, wake_id))

    def fail_wake(self, wake_id: int, error: str, now: float) -> None:
        with self.conn:
            self._rows("UPDATE watch_wake SET state = 'failed', error = ?, finished_at = ? "
                       "WHERE id = ?", (error[:500], now, wake_id))

    def prune(self, now: float | None = None) -> None:
        """Forget finished wakes after 30 days, and ended watches with no wakes left."""
        cutoff = (time.time() if now is None else now) - PRUNE_AFTER
        with self.conn:
            self._rows("DELETE FROM watch_wake WHERE state NOT IN ('started', 'replied') "
                       "AND coalesce(finished_at, created_at) < ?", (cutoff,))
            self._rows(
                "DELETE FROM watch WHERE state = 'cancelled' AND ended_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM watch_wake k WHERE k.watch_id = watch.id)", (cutoff,))


def all_watches(conn: Any) -> list[Watch]:
    """Every watch, for the operator's `gantry watch list` (active first, then newest)."""
    rows = conn.execute(
        f"SELECT {_COLS} FROM watch ORDER BY state != 'active', state != 'paused', id DESC")
    return [_watch(r) for r in rows]
