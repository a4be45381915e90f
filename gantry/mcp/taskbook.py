"""The SQLite record of MCP tool calls made as tasks (migration 0017_mcp_tasks.sql): one row per
recorded tool call, each step its own transaction, so a restart knows for every call whether
its task exists, which one, and whether its result was already given."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

SENDING = "sending"  # written before tools/call is sent; no task id known yet
RUNNING = "running"  # the server made the task: poll it
DETACHED = "detached"  # outlived its turn's patience: its result goes to the chat later
DELIVERING = "delivering"  # a detached task is over: its `push` is being sent to the chat
DELIVERED = "delivered"
DONE = "done"  # over (completed, failed or cancelled); `result` is what was told
LOST = "lost"  # a restart found no task id: it may have started, so it is not sent again
OWED = (DETACHED, DELIVERING)  # the chat is owed a message


@dataclass(frozen=True)
class TaskRow:
    session_id: str
    call_id: str
    server: str
    tool: str
    task_id: str | None
    state: str
    result: str | None
    error: bool
    push: str | None = None
    sent_parts: int = 0


_COLUMNS = ("session_id, call_id, server, tool, task_id, state, result, error, push,"
            " sent_parts")


class TaskBook:
    """The mcp_task table over one apsw connection (autocommit: each write commits)."""

    def __init__(self, conn: Any, clock: Any = time.time) -> None:
        self.conn = conn
        self.clock = clock
        self.on_detach: Any = None  # called after a task is detached (the finisher's wake)

    def get(self, session_id: str, call_id: str) -> TaskRow | None:
        rows = list(self.conn.execute(
            f"SELECT {_COLUMNS} FROM mcp_task WHERE session_id = ? AND call_id = ?",
            (session_id, call_id)))
        return _row(rows[0]) if rows else None

    def sending(self, session_id: str, call_id: str, server: str, tool: str) -> None:
        now = self.clock()
        self.conn.execute(
            "INSERT INTO mcp_task (session_id, call_id, server, tool, state, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, call_id, server, tool, SENDING, now, now))

    def running(self, session_id: str, call_id: str, task_id: str) -> None:
        self._set(session_id, call_id, "task_id = ?, state = ?", (task_id, RUNNING))

    def detach(self, session_id: str, call_id: str, told: str) -> None:
        self._set(session_id, call_id, "state = ?, result = ?", (DETACHED, told))
        if self.on_detach is not None:
            self.on_detach()

    def delivering(self, session_id: str, call_id: str, push: str) -> None:
        self._set(session_id, call_id, "state = ?, push = ?", (DELIVERING, push))

    def sent(self, session_id: str, call_id: str, parts: int, total: int) -> None:
        self._set(session_id, call_id,
                  "sent_parts = ?, state = CASE WHEN ? THEN ? ELSE state END",
                  (parts, parts >= total, DELIVERED))

    def state(self, session_id: str, call_id: str) -> str:
        row = self.get(session_id, call_id)
        return row.state if row is not None else ""

    def done(self, session_id: str, call_id: str, result: str, error: bool) -> None:
        self._set(session_id, call_id, "state = ?, result = ?, error = ?",
                  (DONE, result, int(error)))

    def lost(self, session_id: str, call_id: str, told: str) -> None:
        self._set(session_id, call_id, "state = ?, result = ?, error = 1", (LOST, told))

    def owed(self) -> list[TaskRow]:
        """Detached tasks whose result the chat is still owed, oldest first."""
        return [_row(r) for r in self.conn.execute(
            f"SELECT {_COLUMNS} FROM mcp_task WHERE state IN (?, ?) ORDER BY created_at",
            OWED)]

    def _set(self, session_id: str, call_id: str, assign: str, values: tuple[Any, ...]) -> None:
        self.conn.execute(
            f"UPDATE mcp_task SET {assign}, updated_at = ? WHERE session_id = ? AND call_id = ?",
            (*values, self.clock(), session_id, call_id))


def _row(r: Any) -> TaskRow:
    return TaskRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]),
                   None if r[4] is None else str(r[4]), str(r[5]),
                   None if r[6] is None else str(r[6]), bool(r[7]),
                   None if r[8] is None else str(r[8]), int(r[9]))
