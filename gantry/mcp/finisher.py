"""Tasks that outlived their turn (gantry/mcp/tasks.py left them running): followed to the
end in the background, their result pushed to the chat the turn was in, as a watch wake's
reply is (riding the cron ticker, through its push_retrying). The result is written before
the push and each part sent is counted, so a restart neither loses nor repeats it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio

from gantry.mcp import convert
from gantry.mcp.taskbook import DELIVERED, DELIVERING, TaskBook, TaskRow
from gantry.mcp.tasks import follow

log = logging.getLogger("gantry.mcp")

REACH_WAIT = 60.0  # how long one try waits for the server's session
TRIES = 20  # tries to follow one task (server down, connection lost) before giving up
RETRY_MAX = 300.0  # seconds between tries, at most


def push_text(row: TaskRow, result: Any, keep: convert.Keep | None) -> str:
    """What the chat is told of a finished detached task."""
    error = bool(getattr(result, "is_error", False))
    text = convert.result_text(result.content, result.structured_content, error, keep)
    how = "failed" if error else "is done"
    return (f"The task {row.tool!r} (MCP server {row.server!r}) that was still running "
            f"{how}:\n\n{text}")


@dataclass
class Finisher:
    """A ticker rider: follows the book's owed tasks, one task each, and pushes results."""

    book: TaskBook
    host: Any  # gantry.mcp.host.Host
    ticker: Any  # gantry.cron.ticker.Ticker
    keep: convert.Keep | None = None
    following: set[tuple[str, str]] = field(default_factory=set)
    _new: bool = True

    def __post_init__(self) -> None:
        self.book.on_detach = self.wake

    def wake(self) -> None:
        self._new = True
        self.ticker.poke()

    def resume(self, tg: Any) -> None:
        self.tick(0.0, tg)

    def earliest(self) -> float | None:
        return self.ticker.clock.now() if self._new else None

    def tick(self, now: float, tg: Any) -> None:
        if not self._new:
            return
        self._new = False
        for row in self.book.owed():
            key = (row.session_id, row.call_id)
            if key not in self.following and row.session_id.startswith(f"{self.ticker.channel}:"):
                self.following.add(key)
                tg.start_soon(self._finish, row)

    async def _finish(self, row: TaskRow) -> None:
        """One owed task, an error boundary: follow it, record the message, push it."""
        key = (row.session_id, row.call_id)
        try:
            text = row.push if row.state == DELIVERING else await self._follow(row)
            if text is None:
                return
            if row.state != DELIVERING:
                self.book.delivering(*key, text)
            await self._push(row, text)
        except Exception:
            log.exception("mcp task finisher failed", extra={"task": row.task_id})
        finally:
            self.following.discard(key)

    async def _follow(self, row: TaskRow) -> str | None:
        server = self.host.servers.get(row.server)
        assert row.task_id is not None
        delay = 5.0
        for attempt in range(1, TRIES + 1):
            session = None if server is None else await server.supervisor.reach(None, REACH_WAIT)
            if session is not None:
                try:
                    result = await follow(session, row.task_id, None)
                    return push_text(row, result, self.keep)
                except Exception as exc:
                    from mcp.shared.exceptions import MCPError
                    from mcp_types import CONNECTION_CLOSED

                    if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
                        return (f"The task {row.tool!r} (MCP server {row.server!r}) that was "
                                f"still running failed: {exc.message}")
                    log.warning("mcp task: following it failed; will retry", extra={
                        "task": row.task_id, "attempt": attempt, "error": str(exc)[:200]})
            await anyio.sleep(delay)
            delay = min(RETRY_MAX, delay * 2)
        return (f"The task {row.tool!r} (MCP server {row.server!r}) that was still running "
                f"could not be followed to its end (task id {row.task_id}).")

    async def _push(self, row: TaskRow, text: str) -> None:
        key = (row.session_id, row.call_id)
        chat = row.session_id.split(":", 1)[1]
        sent = [row.sent_parts]

        def progress(done: int, total: int) -> None:
            sent[0] = done
            self.book.sent(*key, done, total)

        why = await self.ticker.push_retrying(
            chat, text, lambda: sent[0], progress,
            lambda: self.book.state(*key) == DELIVERED, 0, f"task {row.tool}")
        if why is None:
            log.info("mcp task result pushed", extra={"server": row.server, "task": row.task_id})
            return
        log.error("mcp task result could not be pushed",
                  extra={"server": row.server, "task": row.task_id, "error": why})
        self.book.sent(*key, 1, 1)  # given up: not pushed again at every restart
